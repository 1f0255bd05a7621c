"""Id minting with OpenAI's prefixes; injected into the builder so tests can make ids deterministic."""

from __future__ import annotations

import itertools
import secrets
from typing import Callable

IdFactory = Callable[[str], str]

RESPONSE = "resp"
CONVERSATION = "conv"
CALL = "call"  # a tool call's call_id
# Each item type's id prefix, for output items and stored input items alike.
ITEM_PREFIXES = {
    "message": "msg", "reasoning": "rs", "function_call": "fc", "function_call_output": "fco",
    "custom_tool_call": "ctc", "custom_tool_call_output": "ctco", "compaction": "cmp",
    "mcp_call": "mcp", "mcp_list_tools": "mcpl", "mcp_approval_request": "mcpr", "mcp_approval_response": "mcpa",
    "shell_call": "sh", "shell_call_output": "sho", "apply_patch_call": "apc", "apply_patch_call_output": "apco",
    "web_search_call": "ws", "code_interpreter_call": "ci", "file_search_call": "fs",
    "client_tool_search_call": "tsc",  # (the builder's kind of a tool_search_call the client runs)
    # Codex's items (input only), with codex-rs's prefixes where it has them
    "local_shell_call": "lsh", "local_shell_call_output": "lsho", "tool_search_call": "tsc", "tool_search_output": "tso",
    "image_generation_call": "ig", "agent_message": "amsg", "context_compaction": "cmp", "compaction_trigger": "cmpt",
    "additional_tools": "at", "configuration_update": "cfg",
}


def random_id(prefix: str) -> str:
    """A fresh id such as `msg_3f2a...` (48 hex digits, like OpenAI's)."""
    return f"{prefix}_{secrets.token_hex(24)}"


def counting_ids() -> IdFactory:
    """Deterministic ids (`msg_1`, `msg_2`, ...) for tests and replays."""
    counter = itertools.count(1)
    return lambda prefix: f"{prefix}_{next(counter)}"
