"""The response store."""
