"""Tenancy: projects, the keys that act for them, and who a request comes from."""
