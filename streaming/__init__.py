"""Streaming: the response builder (deltas -> Responses events and final Response) and SSE encoding."""
