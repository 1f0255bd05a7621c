"""Every input item shape Codex sends, as codex-rs serializes it (`protocol/src/models.rs`, ResponseItem, read for
Codex 0.171): for the item tests and as seeds of the hostile-input harness."""

from __future__ import annotations

from typing import Any

USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "List the files."}]}
# Each shape as codex-rs serializes it, with the words the model must read of it (none: left out of the prompt).
CODEX_ITEMS: dict[str, tuple[list[dict[str, Any]], list[str]]] = {
    "local_shell_call": ([
        {"type": "local_shell_call", "id": "lsh_1", "call_id": "call_ls", "status": "completed",
         "action": {"type": "exec", "command": ["ls", "-la"], "timeout_ms": 1000, "working_directory": "/work",
                    "env": None, "user": None}},
        {"type": "function_call_output", "call_id": "call_ls", "output": "notes.txt"},
    ], ["ls", "-la", "notes.txt"]),
    "local_shell_call_output": ([
        {"type": "local_shell_call", "call_id": "call_ls", "status": "completed",
         "action": {"type": "exec", "command": ["ls"]}},
        {"type": "local_shell_call_output", "id": "call_ls", "output": "readme.md"},
    ], ["readme.md"]),
    "tool_search": ([
        {"type": "tool_search_call", "call_id": "call_ts", "status": "completed", "execution": "client",
         "arguments": {"query": "calendar tools"}},
        {"type": "tool_search_output", "call_id": "call_ts", "status": "completed", "execution": "client",
         "tools": [{"type": "function", "name": "create_event", "description": "Creates a calendar event.",
                    "parameters": {"type": "object", "properties": {}}}]},
    ], ["calendar tools", "create_event"]),
    "image_generation_call": ([
        {"type": "image_generation_call", "id": "ig_1", "status": "completed",
         "revised_prompt": "A gray tabby cat hugging an otter", "result": "iVBORw0KGgo="},
    ], ["A gray tabby cat hugging an otter"]),
    "web_search_call_without_id": ([
        {"type": "web_search_call", "status": "completed", "action": {"type": "search", "query": "vllm release"}},
    ], ["vllm release"]),
    "encrypted_tool_output": ([
        {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{\"command\": [\"ls\"]}"},
        {"type": "function_call_output", "call_id": "call_1", "output": [
            {"type": "input_text", "text": "plain part"},
            {"type": "encrypted_content", "encrypted_content": "gAAAA-sealed-by-another-server"}]},
    ], ["plain part"]),
    "agent_message": ([
        {"type": "agent_message", "author": "/root/worker", "recipient": "/root",
         "content": [{"type": "input_text", "text": "The tests pass."},
                     {"type": "encrypted_content", "encrypted_content": "gAAAA-opaque"}]},
    ], ["The tests pass."]),
    "context_compaction_without_content": ([{"type": "context_compaction"}], []),
    "additional_tools": ([
        {"type": "additional_tools", "role": "developer",
         "tools": [{"type": "function", "name": "late_tool", "parameters": {"type": "object", "properties": {}}}]},
    ], []),
    "configuration_update": ([{"type": "configuration_update", "reasoning": {"effort": "low"}}], []),
    # A tool's output given unasked (Codex's goal objective, as codex 0.1xx sends it): named, with no call.
    "tool_output_without_a_call": ([{"type": "function_call_output", "id": "fco_x", "name": "goal_objective",
                                     "namespace": "agent", "output": "Count the files in the tree."}],
                                   ["Count the files in the tree."]),
    "message_with_phase": ([
        {"type": "message", "role": "assistant", "phase": "commentary",
         "content": [{"type": "output_text", "text": "Looking around."}]},
    ], ["Looking around."]),
}


def codex_item_seeds() -> list[dict[str, Any]]:
    """Each item of each shape, once."""
    return [item for items, _ in CODEX_ITEMS.values() for item in items]
