"""Parsers: turn generated tokens into the neutral deltas of `parsers.deltas`."""
