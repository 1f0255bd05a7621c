"""The engine: its interface, the vLLM AsyncLLM adapter, and record/replay of its output."""
