"""Retrieval: uploaded files, and (to come) vector stores and `file_search` over them."""
