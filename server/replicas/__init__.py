"""Replicas sharing a store: who is alive and where, and which of them is a request's home."""
