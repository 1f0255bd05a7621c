"""Input items -> chat messages, and rendering with the bundled model's chat template."""

from __future__ import annotations

import json
from typing import Any

import pytest

from server.errors import RequestError
from parsers.tools import ToolSpec
from server.paths.chat_messages import chat_messages
from server.paths.chat_template import ChatTemplateRenderer
from server.paths.tools import function_tools, tool_table
from server.requests import ResponsesRequest

CASES: list[tuple[str, dict[str, Any], list[dict[str, Any]]]] = [
    ("string input", {"input": "hi"}, [{"role": "user", "content": "hi"}]),
    ("instructions become the system message", {"instructions": "be brief", "input": "hi"},
     [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]),
    ("developer maps to system", {"input": [{"role": "developer", "content": "rules"}]},
     [{"role": "system", "content": "rules"}]),
    ("content parts are joined", {"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]}]},
     [{"role": "user", "content": "ab"}]),
    ("output-shaped assistant message with id and status", {"input": [
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "yes", "annotations": []}]}]},
     [{"role": "assistant", "content": "yes"}]),
    ("function call and its output", {"input": [
        {"role": "user", "content": "weather?"},
        {"type": "function_call", "call_id": "c1", "name": "get", "arguments": "{\"city\": \"Paris\"}"},
        {"type": "function_call", "call_id": "c2", "name": "get", "arguments": "{\"city\": \"Rome\"}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "c2", "output": "rain"}]},
     [{"role": "user", "content": "weather?"},
      {"role": "assistant", "content": "", "tool_calls": [
          {"id": "c1", "type": "function", "function": {"name": "get", "arguments": {"city": "Paris"}}},
          {"id": "c2", "type": "function", "function": {"name": "get", "arguments": {"city": "Rome"}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
      {"role": "tool", "tool_call_id": "c2", "content": "rain"}]),
    ("text then a call in one assistant turn", {"input": [
        {"role": "assistant", "content": "Let me check."},
        {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": ""}]},
     [{"role": "assistant", "content": "Let me check.", "tool_calls": [
         {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": {}}}]}]),
    ("custom tool call and output", {"input": [
        {"type": "custom_tool_call", "call_id": "c9", "name": "apply_patch", "input": "*** Begin"},
        {"type": "custom_tool_call_output", "call_id": "c9", "output": "done"}]},
     [{"role": "assistant", "content": "", "tool_calls": [
         {"id": "c9", "type": "function", "function": {"name": "apply_patch", "arguments": {"input": "*** Begin"}}}]},
      {"role": "tool", "tool_call_id": "c9", "content": "done"}]),
    ("reasoning before a user message is not rendered", {"input": [
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "x"}]},
        {"role": "user", "content": "hi"}]},
     [{"role": "user", "content": "hi"}]),
    ("reasoning goes with the call it led to, as reasoning_content", {"input": [
        {"role": "user", "content": "go"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "think"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        {"role": "assistant", "content": "done"}]},
     [{"role": "user", "content": "go"},
      {"role": "assistant", "content": "", "reasoning_content": "think",
       "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "ok"},
      {"role": "assistant", "content": "done"}]),
]


@pytest.mark.parametrize(("body", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_chat_messages(body: dict[str, Any], expected: list[dict[str, Any]]) -> None:
    assert chat_messages(ResponsesRequest.model_validate(body)) == expected


def test_callable_tools_reach_the_template_under_model_names() -> None:
    request = ResponsesRequest.model_validate({"input": "x", "tools": [
        {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {"a": {}}}},
        {"type": "web_search"}, {"type": "custom", "name": "apply_patch"},
        {"type": "namespace", "name": "fs", "tools": [{"type": "function", "name": "read"}]}]})
    tools = function_tools(request, tool_table(request))
    assert [t["function"]["name"] for t in tools] == ["f", "apply_patch", "fs__read"]
    assert tools[0]["function"]["parameters"]["properties"] == {"a": {}}
    assert tools[1]["function"]["parameters"]["properties"] == {"input": {"type": "string"}}
    table = tool_table(request)
    assert table is not None and table.lookup("fs__read") == ToolSpec("read", namespace="fs")
    assert tool_table(request.model_copy(update={"tool_choice": "none"})) is None


def test_template_without_tools_gets_hermes_instructions(tokenizer: Any) -> None:
    renderer = ChatTemplateRenderer(tokenizer)
    assert not renderer.template_has_tools
    request = ResponsesRequest.model_validate({"input": [
        {"role": "user", "content": "weather?"},
        {"type": "function_call", "call_id": "c1", "name": "get", "arguments": "{\"city\": \"Paris\"}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"}],
        "tools": [{"type": "function", "name": "get", "parameters": {"type": "object", "properties": {}}}]})
    rendered = renderer.render(request)
    assert "<tools>" in rendered.text and '"name":"get"' in rendered.text
    assert '<tool_call>\n{"name": "get", "arguments": {"city": "Paris"}}\n</tool_call>' in rendered.text
    assert "<tool_response>\nsunny\n</tool_response>" in rendered.text
    assert rendered.tools is not None and rendered.tools.lookup("get").kind == "function"


def test_rendering_with_the_bundled_template(tokenizer: Any) -> None:
    renderer = ChatTemplateRenderer(tokenizer)
    rendered = renderer.render(ResponsesRequest.model_validate({"instructions": "Be brief.", "input": "Hello there"}))
    text = tokenizer.decode(rendered.token_ids, skip_special_tokens=False)
    assert text == rendered.text
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>")
    assert "<|im_start|>user\nHello there<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")


def test_parallel_hermes_calls_render_as_the_model_writes_them(tokenizer: Any) -> None:
    """Found by bench/render_stability.py: a model writes `</tool_call>\\n<tool_call>` between parallel calls, and a
    history rendered without the newline breaks the next turn's prefix (84% of the turn cached instead of 100%)."""
    renderer = ChatTemplateRenderer(tokenizer)
    calls = [{"type": "function_call", "call_id": f"c{n}", "name": "get", "arguments": json.dumps({"city": city})}
             for n, city in enumerate(["Paris", "Rome"])]
    request = ResponsesRequest.model_validate({"input": [{"role": "user", "content": "weather?"}, *calls], "tools": [
        {"type": "function", "name": "get", "parameters": {"type": "object", "properties": {}}}]})
    written = "".join('<tool_call>\n{"name": "get", "arguments": {"city": "%s"}}\n</tool_call>' % city
                      for city in ("Paris", "Rome"))
    assert written.replace("</tool_call><tool_call>", "</tool_call>\n<tool_call>") + "<|im_end|>" in renderer.render(
        request).text
