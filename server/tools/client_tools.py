"""Tools with item types of their own that the client runs (`shell`, `local_shell`, `apply_patch`): what the model is shown of
them (a function with a fixed schema), and their calls and outputs in the function vocabulary the paths render."""

from __future__ import annotations

import json
from typing import Any

SHELL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"commands": {"type": "array", "items": {"type": "string"}},
                   "timeout_ms": {"type": "integer"}},
    "required": ["commands"],
}
LOCAL_SHELL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"command": {"type": "array", "items": {"type": "string"}},
                   "working_directory": {"type": "string"}, "timeout_ms": {"type": "integer"}},
    "required": ["command"],
}
APPLY_PATCH_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"type": {"type": "string", "enum": ["create_file", "update_file", "delete_file"]},
                   "path": {"type": "string"}, "diff": {"type": "string"}},
    "required": ["type", "path"],
}
_SHOWN = {
    "shell": ("Run shell commands in the user's environment; each command's stdout, stderr and exit code come back.",
              SHELL_PARAMETERS),
    "local_shell": ("Run one command (its program and arguments, as a list) in the user's environment; its output "
                    "comes back.", LOCAL_SHELL_PARAMETERS),
    "apply_patch": ("Create, update or delete one file: `diff` is the new file's content (create_file) or a V4A "
                    "diff of the changes (update_file).", APPLY_PATCH_PARAMETERS),
}
CLIENT_TOOLS = tuple(_SHOWN)


def shown(tool: dict[str, Any]) -> dict[str, Any]:
    """A `shell`, `local_shell` or `apply_patch` tool as the paths offer it: named as its type, with its description and schema."""
    description, parameters = _SHOWN[tool["type"]]
    return {**tool, "name": tool["type"], "description": description, "parameters": parameters}


def shell_output_text(output: Any) -> str:
    """What the model reads of a shell call's output: each command's stdout, stderr and how it ended."""
    pieces = []
    for entry in output if isinstance(output, list) else []:
        if not isinstance(entry, dict):
            continue
        outcome = entry.get("outcome") or {}
        ended = f"exit code {outcome.get('exit_code')}" if outcome.get("type") == "exit" else "timed out"
        pieces.append(f"{entry.get('stdout') or ''}{entry.get('stderr') or ''}[{ended}]")
    return "\n".join(pieces)
