"""Prompts kept to extend: a turn renders and tokenizes what it adds to a prompt the server already knows."""
