"""Batches: a project's bulk requests from a JSONL file, run at the lowest priority when the engines have room."""
