"""The items of calls the client runs with item types of their own: a shell call's `action` and an apply_patch
call's `operation`, read from the arguments the model wrote."""

from __future__ import annotations

import json
from typing import Any


def shell_action(arguments: str) -> dict[str, Any]:
    """A shell call's `action` from the arguments the model wrote (text that is not the schema's: one command)."""
    try:
        values = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        values = None
    commands = values.get("commands") if isinstance(values, dict) else None
    if not isinstance(commands, list) or not all(isinstance(command, str) for command in commands):
        return {"commands": [arguments] if arguments else []}
    action: dict[str, Any] = {"commands": commands}
    if isinstance(values.get("timeout_ms"), int):
        action["timeout_ms"] = values["timeout_ms"]
    return action


def patch_operation(arguments: str) -> dict[str, Any]:
    """An apply_patch call's `operation` from the model's arguments (a create of nothing when they are not one)."""
    try:
        values = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        values = {}
    values = values if isinstance(values, dict) else {}
    kind = values.get("type") if values.get("type") in ("create_file", "update_file", "delete_file") else "create_file"
    operation = {"type": kind, "path": str(values.get("path") or "")}
    if kind != "delete_file":
        operation["diff"] = str(values.get("diff") or "")
    return operation
