"""Request fields through the real app (scripted engine): what reaches the engine, call limits, truncation, 400s."""

from __future__ import annotations

import json
from typing import Any, Iterator

import httpx
import pytest

from server.config import ServerConfig
from server.http.app import create_app
from server.runs.context import ServingContext
from streaming.ids import counting_ids
from tests.conftest import serve_in_thread
from tests.scripted_engine import ScriptedEngine, steps_from_tokens
from tests.test_server import MODEL, Harness
from conformance.contract import validate_events

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather for a city", "strict": False,
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
THREE_CALLS = "".join(f'<tool_call>\n{{"name": "get_weather", "arguments": {{"city": "{city}"}}}}\n</tool_call>\n'
                      for city in ("Paris", "London", "Tokyo"))


@pytest.fixture(scope="module")
def app(tokenizer: Any) -> Iterator[Harness]:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]], sampling_defaults={"temperature": 0.2, "top_p": 0.9})
    context = ServingContext(config=ServerConfig(served_model_name=MODEL), engine_factory=lambda: engine,
                             ids=counting_ids())
    with serve_in_thread(create_app(context)) as base_url:
        yield Harness(engine, base_url)


def answer(tokenizer: Any, text: str) -> list[Any]:
    ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
    return steps_from_tokens(ids, cuts=list(range(3, len(ids), 3)))


def test_sampling_defaults_come_from_the_model_and_the_request_wins(app: Harness, tokenizer: Any) -> None:
    app.play(answer(tokenizer, "ok"))
    defaults = app.client.responses.create(model=MODEL, input="hi")
    sampling = app.engine.requests[-1].sampling
    assert (sampling.temperature, sampling.top_p) == (0.2, 0.9)
    assert (defaults.temperature, defaults.top_p) == (0.2, 0.9)  # echoed as used
    given = app.client.responses.create(model=MODEL, input="hi", temperature=0.7)
    assert app.engine.requests[-1].sampling.temperature == 0.7 and given.temperature == 0.7
    assert app.engine.requests[-1].sampling.top_p == 0.9


def test_a_json_schema_answer_hands_the_engine_its_grammar(app: Harness, tokenizer: Any) -> None:
    app.play(answer(tokenizer, '{"city": "Paris"}'))
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    fmt = {"type": "json_schema", "name": "place", "schema": schema, "strict": True}
    response = app.client.responses.create(model=MODEL, input="where?", text={"format": fmt})
    tag = json.loads(app.engine.requests[-1].sampling.structural_tag)
    assert tag["format"]["type"] == "grammar" and '"\\"city\\""' in tag["format"]["grammar"]
    assert response.text.format.type == "json_schema" and response.text.format.schema_ == schema  # echoed
    assert json.loads(response.output_text) == {"city": "Paris"}


def test_free_output_hands_the_engine_no_grammar(app: Harness, tokenizer: Any) -> None:
    app.play(answer(tokenizer, "ok"))
    app.client.responses.create(model=MODEL, input="hi", tools=[WEATHER])
    assert app.engine.requests[-1].sampling.structural_tag is None


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_parallel_tool_calls_false_stops_after_the_first_call(app: Harness, tokenizer: Any, stream: bool) -> None:
    """No grammar is active (auto, no strict tool): generation stops after the call, still `completed`."""
    app.play(answer(tokenizer, THREE_CALLS))
    body = {"input": "weather in three cities", "tools": [WEATHER], "parallel_tool_calls": False}
    if stream:
        events = app.raw_stream(**body)
        final = validate_events(events)
        kinds = [e["type"] for e in events]
        assert kinds.index("response.function_call_arguments.delta") < kinds.index(
            "response.function_call_arguments.done")
    else:
        final = app.client.responses.create(model=MODEL, **body)
    assert final.status == "completed"
    assert [(o.type, json.loads(o.arguments)) for o in final.output] == [("function_call", {"city": "Paris"})]
    assert app.engine_aborted_last_request()


def test_max_tool_calls_caps_the_calls(app: Harness, tokenizer: Any) -> None:
    app.play(answer(tokenizer, THREE_CALLS))
    final = app.client.responses.create(model=MODEL, input="x", tools=[WEATHER], max_tool_calls=2)
    assert [json.loads(o.arguments)["city"] for o in final.output] == ["Paris", "London"]
    app.play(answer(tokenizer, THREE_CALLS))
    every = app.client.responses.create(model=MODEL, input="x", tools=[WEATHER])
    assert len(every.output) == 3


def _history(turns: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"role": "developer", "content": "Answer briefly."}]
    for turn in range(turns):
        words = f"question {turn} " + "about the long history of the city " * 12
        items += [{"role": "user", "content": words},
                  {"type": "function_call", "call_id": f"c{turn}", "name": "get_weather", "arguments": "{}"},
                  {"type": "function_call_output", "call_id": f"c{turn}", "output": "sunny " * 20},
                  {"role": "assistant", "content": "It is sunny " * 10}]
    return items + [{"role": "user", "content": "And now, the last question?"}]


def test_truncation_auto_drops_the_oldest_items_until_it_fits(app: Harness, tokenizer: Any) -> None:
    app.engine.max_model_len = 1024
    try:
        history = _history(12)  # about 3 times the context
        too_long = app.post(input=history, tools=[WEATHER])
        assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "context_length_exceeded"
        app.play(answer(tokenizer, "ok"))
        response = app.client.responses.create(model=MODEL, input=history, tools=[WEATHER], truncation="auto",
                                               max_output_tokens=64)
        assert response.status == "completed"
        prompt = tokenizer.decode(app.engine.requests[-1].prompt_token_ids)
        assert len(app.engine.requests[-1].prompt_token_ids) + 64 <= 1024
        assert response.usage.input_tokens == len(app.engine.requests[-1].prompt_token_ids)
        assert "Answer briefly." in prompt and "And now, the last question?" in prompt  # never dropped
        assert "question 0 " not in prompt and "question 11 " in prompt  # oldest first, newest kept
        calls = prompt.count('{"name": "get_weather", "arguments"')
        assert calls == prompt.count("<tool_response>") > 0  # calls keep their outputs
    finally:
        app.engine.max_model_len = 8192


def test_truncation_auto_that_cannot_fit_is_a_400(app: Harness) -> None:
    app.engine.max_model_len = 256
    try:
        response = app.post(input="word " * 400, truncation="auto")
        assert response.status_code == 400 and response.json()["error"]["code"] == "context_length_exceeded"
    finally:
        app.engine.max_model_len = 8192


def test_namespaced_calls_in_history_use_the_offered_name(app: Harness, tokenizer: Any) -> None:
    app.play(answer(tokenizer, "ok"))
    tools = [{"type": "namespace", "name": "multi_agent_v1", "tools": [
        {"type": "function", "name": "spawn_agent", "parameters": {"type": "object", "properties": {}}}]}]
    app.client.responses.create(model=MODEL, tools=tools, input=[
        {"role": "user", "content": "go"},
        {"type": "function_call", "call_id": "c1", "name": "spawn_agent", "namespace": "multi_agent_v1",
         "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "done"}])
    prompt = tokenizer.decode(app.engine.requests[-1].prompt_token_ids)
    assert prompt.count("multi_agent_v1__spawn_agent") == 2  # offered, and called in the history
    assert '"name": "spawn_agent"' not in prompt


def test_explicit_nulls_are_not_given(app: Harness, tokenizer: Any) -> None:
    app.play(answer(tokenizer, "ok"))
    body = {"model": MODEL, "input": "hi", "parallel_tool_calls": None, "store": None, "stream": None,
            "background": None, "temperature": None, "tool_choice": None, "truncation": None, "include": None}
    response = httpx.post(f"{app.base_url}/responses", json=body, timeout=30)
    assert response.status_code == 200 and response.json()["status"] == "completed"


REQUEST_ERRORS = [
    ("tool_choice bogus", {"input": "x", "tool_choice": "bogus"}, "tool_choice"),
    ("unknown named tool", {"input": "x", "tools": [WEATHER], "tool_choice": {"type": "function", "name": "f"}},
     "tool_choice.name"),
    ("malformed tool_choice", {"input": "x", "tools": [WEATHER], "tool_choice": {"name": "get_weather"}},
     "tool_choice"),
    ("schema-less json_schema", {"input": "x", "text": {"format": {"type": "json_schema", "name": "x"}}},
     "text.format.schema"),
    ("unknown include", {"input": "x", "include": ["reasoning.plaintext"]}, "include"),
    ("unknown stored prompt", {"input": "x", "prompt": {"id": "pmpt_1"}}, "prompt.id"),
    ("conversation not an id", {"input": "x", "conversation": 5}, "conversation"),
    ("moderation", {"input": "x", "moderation": {"model": "omni-moderation-latest"}}, "moderation"),
    ("no input", {}, "input"),
    ("empty input list", {"input": []}, "input"),
    ("unknown file by id", {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
     "input[0].content[0].file_id"),
    ("audio in a tool output", {"input": [
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": [{"type": "input_audio"}]}]},
     "input[1].output[0].type"),
]


@pytest.mark.parametrize(("body", "param"), [c[1:] for c in REQUEST_ERRORS], ids=[c[0] for c in REQUEST_ERRORS])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_fields_that_cannot_be_honoured_are_a_400(app: Harness, body: dict[str, Any], param: str,
                                                  stream: bool) -> None:
    response = app.post(stream=stream, **body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["message"] and error["type"] == "invalid_request_error"


def test_input_token_count_is_what_the_response_reports(app: Harness, tokenizer: Any) -> None:
    body = {"instructions": "Be brief.", "input": [{"role": "user", "content": "weather in Paris?"}],
            "tools": [WEATHER], "tool_choice": "required"}
    counted = app.client.responses.input_tokens.count(model=MODEL, **body)
    assert counted.object == "response.input_tokens"
    app.play(answer(tokenizer, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'))
    assert app.client.responses.create(model=MODEL, **body).usage.input_tokens == counted.input_tokens > 0
    assert app.client.responses.input_tokens.count(model=MODEL, input="hi").input_tokens < counted.input_tokens
    bad = httpx.post(f"{app.base_url}/responses/input_tokens", json={"tool_choice": "bogus", "input": "x"},
                     timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tool_choice"


def test_a_custom_tool_in_a_namespace_is_offered_called_and_sent_back_as_outside_one(app: Harness,
                                                                                     tokenizer: Any) -> None:
    tools = [{"type": "namespace", "name": "edits", "description": "file edits", "tools": [
        {"type": "custom", "name": "apply_patch", "description": "Apply a patch.",
         "format": {"type": "grammar", "syntax": "regex", "definition": "\\*\\*\\* Begin Patch[a-z ]*"}}]}]
    call = '<tool_call>\n{"name": "edits__apply_patch", "arguments": {"input": "*** Begin Patch ok"}}\n</tool_call>'
    app.play(answer(tokenizer, call))
    first = app.client.responses.create(model=MODEL, tools=tools, input="patch it")
    prompt = tokenizer.decode(app.engine.requests[-1].prompt_token_ids)
    assert "edits__apply_patch" in prompt, "offered to the model"
    item = first.output[0]
    assert (item.type, item.name, item.namespace, item.input) == (  # type: ignore[union-attr]
        "custom_tool_call", "apply_patch", "edits", "*** Begin Patch ok")
    app.play(answer(tokenizer, "Patched."))
    app.client.responses.create(model=MODEL, tools=tools, store=False, input=[
        {"role": "user", "content": "patch it"}, item.model_dump(exclude_none=True),
        {"type": "custom_tool_call_output", "call_id": item.call_id, "output": "applied"}])  # type: ignore[union-attr]
    prompt = tokenizer.decode(app.engine.requests[-1].prompt_token_ids)
    assert prompt.count("edits__apply_patch") == 2 and "applied" in prompt  # offered, and called in the history
    forced = app.post(input="patch it", tools=tools, tool_choice={"type": "custom", "name": "apply_patch"})
    assert forced.status_code == 200, forced.json()
    assert app.engine.requests[-1].sampling.structural_tag is not None, "its grammar holds when it is forced"


def test_a_local_shell_tool_is_offered_and_its_calls_come_out_as_local_shell_call_items(app: Harness,
                                                                                        tokenizer: Any) -> None:
    """The Agents SDK's LocalShellTool sends `{"type": "local_shell"}`: the model gets it, the client runs its calls."""
    call = '<tool_call>\n{"name": "local_shell", "arguments": {"command": ["ls", "-la"]}}\n</tool_call>'
    app.play(answer(tokenizer, call))
    first = app.client.responses.create(model=MODEL, tools=[{"type": "local_shell"}], input="list files")
    assert "local_shell" in tokenizer.decode(app.engine.requests[-1].prompt_token_ids), "offered to the model"
    item = first.output[0]
    assert item.type == "local_shell_call" and item.status == "completed"  # type: ignore[union-attr]
    assert item.action.type == "exec" and item.action.command == ["ls", "-la"]  # type: ignore[union-attr]
    app.play(answer(tokenizer, "Two files."))
    second = app.client.responses.create(model=MODEL, tools=[{"type": "local_shell"}], store=False, input=[
        {"role": "user", "content": "list files"}, item.model_dump(exclude_none=True),
        {"type": "local_shell_call_output", "id": item.call_id, "output": "a.txt\nb.txt"}])  # type: ignore[union-attr]
    assert second.output_text == "Two files."
    assert "a.txt" in tokenizer.decode(app.engine.requests[-1].prompt_token_ids)
    forced = app.post(input="list", tools=[{"type": "local_shell"}], tool_choice={"type": "local_shell"})
    assert forced.status_code == 200, forced.json()


@pytest.mark.parametrize("tool, needs", [
    ({"type": "computer_use_preview", "display_width": 1024, "display_height": 768, "environment": "linux"},
     "computer-use model"),
    ({"type": "computer"}, "computer-use model"),
    ({"type": "image_generation"}, "image generation model"),
    ({"type": "programmatic_tool_calling"}, "OpenAI's hosted"),
    ({"type": "bogus_tool"}, "unknown tool type"),
])
def test_a_tool_the_server_cannot_offer_or_run_is_a_400_naming_it_and_what_would_enable_it(
        app: Harness, tool: dict[str, Any], needs: str) -> None:
    response = app.post(input="go", tools=[WEATHER, tool])
    error = response.json()["error"]
    assert response.status_code == 400 and error["param"] == "tools[1]", error
    assert tool["type"] in error["message"] and needs.lower() in error["message"].lower(), error["message"]


def test_a_web_search_tool_with_no_browser_is_accepted_not_offered_and_the_response_says_so(app: Harness,
                                                                                            tokenizer: Any) -> None:
    app.play(answer(tokenizer, "ok"))
    # (a server's tool search with nothing deferred: not offered; a client's is, its catalog is the client's)
    response = app.post(input="go", tools=[{"type": "web_search"}, {"type": "tool_search"}])
    assert response.status_code == 200 and response.json()["status"] == "completed"
    assert response.headers["x-tools-not-offered"] == "web_search, tool_search"
    assert "web_search" not in tokenizer.decode(app.engine.requests[-1].prompt_token_ids)
    app.play(answer(tokenizer, "ok"))
    assert "x-tools-not-offered" not in app.post(input="go", tools=[WEATHER]).headers


def _sdk_input_item_types() -> list[str]:
    """Every `type` the openai SDK's ResponseInputItemParam names."""
    import typing

    from openai.types.responses.response_input_item_param import ResponseInputItemParam

    def literals(annotation: Any) -> list[str]:
        return [arg for arg in typing.get_args(annotation) if isinstance(arg, str)] or [
            value for arg in typing.get_args(annotation) for value in literals(arg)]
    return sorted({kind for member in typing.get_args(ResponseInputItemParam)
                   for kind in literals(typing.get_type_hints(member, include_extras=True)["type"])})


def test_every_input_item_type_of_the_sdk_is_taken_or_refused_by_name_at_its_type(app: Harness) -> None:
    """Each SDK item type, alone at position 2 of an input: an item of a type the server takes gets past the type
    (a 200, or a 400 about another field); any other is a 400 at `input[2].type` naming it."""
    refused = []
    for kind in _sdk_input_item_types() + ["bogus_item"]:
        body = {"model": MODEL, "input": [{"role": "user", "content": "hi"}] * 2 + [{"type": kind}]}
        answer = httpx.post(f"{app.base_url}/responses", json={**body, "generate": False})
        error = answer.json().get("error") if answer.status_code == 400 else None
        if error is not None and error["param"] == "input[2].type":
            assert f"`{kind}`" in error["message"], error
            refused.append(kind)
        else:
            assert answer.status_code in (200, 400, 404), (kind, answer.text)
    assert sorted(refused) == ["bogus_item", "computer_call", "computer_call_output", "program", "program_output"]
