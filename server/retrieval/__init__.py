"""Retrieval: uploaded files, vector stores of their chunks on a real embedding model, and the searches that the
`file_search` tool runs over them."""
