"""Hosted tools: the tools the server runs itself (MCP servers), between the passes of one response."""
