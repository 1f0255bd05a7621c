"""A tool's text that may come as a JSON object holding it: its string field, else the text as it is."""

from __future__ import annotations

import json


def string_field(text: str, name: str) -> str:
    """`text`'s field `name` when `text` is a JSON object whose `name` is a string; else `text` itself."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return text
    return value[name] if isinstance(value, dict) and isinstance(value.get(name), str) else text
