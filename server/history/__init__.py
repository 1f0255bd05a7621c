"""What the model sees of the past: stored conversations, truncation, compaction, and sealed items."""
