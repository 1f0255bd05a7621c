"""What the server needs to know of one served model beyond its engine: its name, parsers and defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# What an API process keeps of recent turns' rendered prompts, per model path, by default.
DEFAULT_HISTORY_MEMORY_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class ModelSettings:
    """One served model's own settings: what clients call it and how its output is read and sampled."""

    name: str  # what clients send as `model`
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    harmony: bool = False  # force the harmony (gpt-oss) path
    default_max_output_tokens: int | None = None  # the cap of a request that sets no max_output_tokens
    # Sampling values for requests that leave them unset, before the model's generation_config.json's
    sampling_defaults: dict[str, float] = field(default_factory=dict)
    codex_model_info: dict[str, Any] = field(default_factory=dict)  # the operator's fields of Codex's catalog entry
    history_memory_bytes: int = DEFAULT_HISTORY_MEMORY_BYTES  # rendered messages the model path keeps (harmony)
