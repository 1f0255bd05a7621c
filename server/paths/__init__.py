"""Per-model paths: chat-template and harmony prompt rendering, and which parsers read the output."""
