"""What the items of calls with item types of their own hold, read from the arguments the model wrote: a shell
or local shell call's `action`, an apply_patch call's `operation`, a web search's `action`, a python call's `code`."""

from __future__ import annotations

import json
from typing import Any

from parsers.json_text import string_field


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


def local_shell_action(arguments: str) -> dict[str, Any]:
    """A local_shell call's `action` (exec one command, as argv) from the model's arguments (text that is not the
    schema's: one command as one word)."""
    try:
        values = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        values = None
    command = values.get("command") if isinstance(values, dict) else None
    if isinstance(command, str):
        command = [command]
    if not isinstance(command, list) or not all(isinstance(word, str) for word in command):
        command = [arguments] if arguments else []
    action: dict[str, Any] = {"type": "exec", "command": command, "env": {}}
    for key, kind in (("timeout_ms", int), ("working_directory", str)):
        if isinstance(values, dict) and isinstance(values.get(key), kind):
            action[key] = values[key]
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


def python_code(arguments: str) -> str:
    """The code of a python call: the message body (harmony), or the `code` of its JSON arguments (chat paths)."""
    return string_field(arguments, "code")


def web_search_action(name: str, arguments: str) -> dict[str, Any]:
    """A browser call (`search`, `open`, `find`) as a web_search_call's `action`."""
    try:
        values = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        values = {}
    values = values if isinstance(values, dict) else {}
    if name == "open":
        target = values.get("id")
        return {"type": "open_page", "url": target if isinstance(target, str) else None}
    if name == "find":
        return {"type": "find_in_page", "pattern": str(values.get("pattern") or ""), "url": ""}
    return {"type": "search", "query": str(values.get("query") or "")}


MAX_SEARCH_QUERIES = 5


def search_queries(arguments: str) -> list[str]:
    """A file search call's queries (`{"queries": [...]}`, or one `query`; arguments that are no JSON: one query),
    at most MAX_SEARCH_QUERIES."""
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return [arguments.strip()] if arguments.strip() else []
    if not isinstance(parsed, dict):
        return []
    found = parsed.get("queries", parsed.get("query"))
    items = [found] if isinstance(found, str) else found if isinstance(found, list) else []
    return [item for item in items if isinstance(item, str) and item.strip()][:MAX_SEARCH_QUERIES]
