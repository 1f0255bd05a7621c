"""Reusable prompts: a project's prompts, versioned, rendered into the requests that name them."""
