"""Server settings that are not engine settings."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerConfig:
    """What the HTTP layer needs to know, fixed at start-up."""

    served_model_name: str
    api_keys: tuple[str, ...] = ()  # any of them is accepted; none: no key needed
    keepalive_seconds: float = 15.0
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    harmony: bool = False  # force the harmony (gpt-oss) path
