"""Structured outputs: what a request asks of the output, and the grammars (xgrammar structural tags) that enforce it."""
