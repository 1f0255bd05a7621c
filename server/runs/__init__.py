"""One response's run: generation, storing as it finishes, and background runs."""
