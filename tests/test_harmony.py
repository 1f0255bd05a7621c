"""The harmony path: real o200k_harmony token streams through the real server at every step size."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from server.http.app import create_app
from server.runs.context import ServingContext
from server.config import ServerConfig
from server.model_settings import ModelSettings
from server.paths.harmony import HarmonyPath, harmony_conversation, harmony_encoding
from server.paths.tools import tool_table
from server.engine.recording import Recording
from server.history.sealing import Sealer
from server.requests import ResponsesRequest
from streaming.ids import counting_ids
from tests.conftest import free_port, serve_in_thread
from tests.helpers import collapsed_types, without_volatile
from tests.scripted_engine import ScriptedEngine, steps_from_tokens
from tests.test_constraints import harmony_accepts
from tests.sse import events_of, parse_frames
from tests.test_server import Harness
from conformance.contract import validate_events

MODEL = "gpt-oss-test"
RETURN, CALL = "<|return|>", "<|call|>"
TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather for a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]


def completion(*messages: tuple[str, str | None, str], end: str = RETURN) -> list[int]:
    """Tokens as gpt-oss generates them after the prompt's `<|start|>assistant`: (channel, recipient, body)."""
    from openai_harmony import Conversation, Message, RenderConversationConfig, Role

    rendered = []
    for channel, recipient, body in messages:
        message = Message.from_role_and_content(Role.ASSISTANT, body).with_channel(channel)
        if recipient:
            message = message.with_recipient(recipient).with_content_type("<|constrain|>json")
        rendered.append(message)
    encoding = harmony_encoding()
    config = RenderConversationConfig(auto_drop_analysis=False)
    tokens = list(encoding.render_conversation(Conversation.from_messages(rendered), config=config))
    start = encoding.encode("<|start|>assistant", allowed_special="all")
    assert tokens[: len(start)] == start
    tokens = tokens[len(start):]
    if end == RETURN and tokens[-1] == encoding.encode("<|end|>", allowed_special="all")[0]:
        tokens[-1] = encoding.encode(RETURN, allowed_special="all")[0]
    return tokens


REASONING_THEN_FINAL = completion(("analysis", None, "The user wants the capital. It is Paris."),
                                  ("final", None, "The capital of France is Paris."))
CALLS_WITH_PREAMBLE = completion(
    ("analysis", None, "Need weather for two cities."),
    ("commentary", None, "Checking the weather for both cities."),
    ("commentary", "functions.get_weather", '{"city": "Paris"}'),
    ("commentary", "functions.get_weather", '{"city": "Rome"}'), end=CALL)


SEALER = Sealer.ephemeral()  # the harmony app's, so tests can seal values for another purpose under its key


@pytest.fixture(scope="module")
def harmony() -> Iterator[Harness]:
    engine = ScriptedEngine(tokenizer=None, scripts=[[]], max_model_len=131072)
    config = ServerConfig(served_model_name=MODEL, harmony=True)
    context = ServingContext(config=config, engine_factory=lambda: engine, ids=counting_ids(), sealer=SEALER)
    with serve_in_thread(create_app(context)) as base_url:
        harness = Harness(engine, base_url)
        yield harness


def stream(harness: Harness, **body: Any) -> list[dict[str, Any]]:
    with httpx.stream("POST", f"{harness.base_url}/responses",
                      json={"model": MODEL, "stream": True, "input": "hi", **body}, timeout=30) as response:
        assert response.status_code == 200, response.read()
        return events_of(parse_frames(response.iter_lines()))


def every_step_size(harness: Harness, tokens: list[int], finish: str = "stop", same_usage: bool = True,
                    **body: Any) -> list[dict[str, Any]]:
    """Replay at step sizes 1..8, a third, a half and all of the output; all must agree. Returns the 1-token run."""
    runs = []
    sizes = sorted({*range(1, 9), len(tokens) // 3 or 1, len(tokens) // 2 or 1, len(tokens)})
    for size in sizes:
        harness.play(steps_from_tokens(tokens, cuts=list(range(size, len(tokens), size)), finish=finish))
        events = stream(harness, **body)
        validate_events(events)
        runs.append(events)
    for events in runs[1:]:
        assert collapsed_types(events) == collapsed_types(runs[0])
        response, first = without_volatile(events[-1]["response"]), without_volatile(runs[0][-1]["response"])
        if not same_usage:  # generation stops at the step that broke: bigger steps generated more tokens
            response.pop("usage"), first.pop("usage")
        assert response == first
    return runs[0]


def test_reasoning_then_final(harmony: Harness) -> None:
    events = every_step_size(harmony, REASONING_THEN_FINAL)
    final = events[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "message"]
    assert final["output"][0]["content"][0]["text"] == "The user wants the capital. It is Paris."
    assert final["output"][1]["content"][0]["text"] == "The capital of France is Paris."
    assert final["status"] == "completed"
    assert 0 < final["usage"]["output_tokens_details"]["reasoning_tokens"] < final["usage"]["output_tokens"]


def test_reasoning_preamble_and_two_calls(harmony: Harness) -> None:
    events = every_step_size(harmony, CALLS_WITH_PREAMBLE, tools=TOOLS)
    output = events[-1]["response"]["output"]
    assert [item["type"] for item in output] == ["reasoning", "message", "function_call", "function_call"]
    assert output[1]["content"][0]["text"] == "Checking the weather for both cities."
    assert output[1]["phase"] == "commentary"  # a preamble, as harmony's commentary channel says
    assert [json.loads(item["arguments"]) for item in output[2:]] == [{"city": "Paris"}, {"city": "Rome"}]
    assert all(item["name"] == "get_weather" for item in output[2:])
    assert sum(e["type"] == "response.function_call_arguments.delta" for e in events) > 4


def test_sdk_clients_over_harmony(harmony: Harness) -> None:
    harmony.play(steps_from_tokens(CALLS_WITH_PREAMBLE, cuts=[5, 6, 30]))
    events = list(harmony.client.responses.create(model=MODEL, input="x", tools=TOOLS, stream=True))  # type: ignore[arg-type]
    assert events[-1].type == "response.completed"
    harmony.play(steps_from_tokens(REASONING_THEN_FINAL, cuts=[7]))
    with harmony.client.responses.stream(model=MODEL, input="x") as sdk_stream:
        final = sdk_stream.get_final_response()
        assert final.output_text == "The capital of France is Paris."
        assert final.output[-1].phase == "final_answer"  # type: ignore[union-attr]


@pytest.mark.parametrize("where", ["analysis", "final"])
def test_truncation_mid_message(harmony: Harness, where: str) -> None:
    encoding = harmony_encoding()
    text = encoding.decode(REASONING_THEN_FINAL)
    marker = "It is" if where == "analysis" else "France is"
    cut = len(encoding.encode(text[: text.index(marker)], allowed_special="all"))
    events = every_step_size(harmony, REASONING_THEN_FINAL[:cut], finish="length")
    final = events[-1]["response"]
    assert events[-1]["type"] == "response.incomplete"
    kinds = {"analysis": ["reasoning"], "final": ["reasoning", "message"]}[where]
    assert [item["type"] for item in final["output"]] == kinds
    assert final["output"][-1]["status"] == "incomplete"


def test_malformed_header_fails_and_keeps_what_was_said(harmony: Harness) -> None:
    encoding = harmony_encoding()
    good = completion(("analysis", None, "Thinking first."), end=RETURN)[:-1] + encoding.encode(
        "<|end|>", allowed_special="all")
    bad = good + encoding.encode("<|start|><|start|>assistant<|channel|>final<|message|>x", allowed_special="all")
    events = every_step_size(harmony, bad, same_usage=False)
    final = events[-1]["response"]
    assert events[-1]["type"] == "response.failed"
    assert "harmony" in final["error"]["message"]
    assert final["output"][0]["content"][0]["text"] == "Thinking first."
    assert harmony.engine.aborted[-1] == harmony.engine.requests[-1].request_id  # generation stopped


def test_prompt_matches_openai_harmony_rendering(harmony: Harness) -> None:
    from openai_harmony import (Author, Conversation, DeveloperContent, Message, ReasoningEffort,
                                RenderConversationConfig, Role, SystemContent, ToolDescription)

    today = datetime.date(2026, 11, 22)
    request = ResponsesRequest.model_validate({
        "instructions": "Be brief.", "reasoning": {"effort": "high"}, "tools": TOOLS,
        "input": [
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "reasoning", "id": "rs_1", "summary": [],
             "content": [{"type": "reasoning_text", "text": "Call the tool."}]},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Paris"}',
             "id": "fc_1", "status": "completed"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
             "content": [{"type": "output_text", "text": "It is sunny.", "annotations": []}]},
            {"role": "user", "content": "And tomorrow?"}]})
    expected = Conversation.from_messages([
        Message.from_role_and_content(Role.SYSTEM, SystemContent.new().with_conversation_start_date("2026-11-22")
                                      .with_reasoning_effort(ReasoningEffort.HIGH)),
        Message.from_role_and_content(Role.DEVELOPER, DeveloperContent.new().with_instructions("Be brief.")
                                      .with_function_tools([ToolDescription.new(
                                          "get_weather", "Weather for a city", parameters=TOOLS[0]["parameters"])])),
        Message.from_role_and_content(Role.USER, "Weather in Paris?"),
        Message.from_role_and_content(Role.ASSISTANT, "Call the tool.").with_channel("analysis"),
        Message.from_role_and_content(Role.ASSISTANT, '{"city": "Paris"}').with_channel("commentary")
        .with_recipient("functions.get_weather").with_content_type("<|constrain|>json"),
        Message.from_author_and_content(Author.new(Role.TOOL, "functions.get_weather"), "sunny")
        .with_channel("commentary").with_recipient("assistant"),
        Message.from_role_and_content(Role.ASSISTANT, "It is sunny.").with_channel("final"),
        Message.from_role_and_content(Role.USER, "And tomorrow?"),
    ])
    encoding = harmony_encoding()
    config = RenderConversationConfig(auto_drop_analysis=True)
    want = encoding.render_conversation_for_completion(expected, Role.ASSISTANT, config=config)
    got = HarmonyPath(ModelSettings(MODEL, harmony=True), today=today).render(request).token_ids
    assert got == list(want)
    assert "Call the tool." not in encoding.decode(got)  # reasoning before a final answer is dropped
    assert harmony_conversation(request, today, tool_table(request)).messages[3].channel == "analysis"


def test_unknown_call_id_is_a_400(harmony: Harness) -> None:
    response = httpx.post(f"{harmony.base_url}/responses", json={"model": MODEL, "input": [
        {"type": "function_call_output", "call_id": "nope", "output": "x"}]}, timeout=30)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "input[0].call_id"


def test_stop_tokens_reach_the_engine(harmony: Harness) -> None:
    harmony.play(steps_from_tokens(REASONING_THEN_FINAL, cuts=[]))
    stream(harmony)
    encoding = harmony_encoding()
    assert set(harmony.engine.requests[-1].sampling.stop_token_ids) == set(encoding.stop_tokens_for_assistant_actions())


def test_cli_serves_a_harmony_replay_without_the_model(tmp_path: Path) -> None:
    recording = tmp_path / "gpt-oss.jsonl"
    steps = [CALLS_WITH_PREAMBLE[i:i + 5] for i in range(0, len(CALLS_WITH_PREAMBLE), 5)]
    recording.write_text(Recording([1, 2, 3], steps, "stop").to_json() + "\n")
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "server", "--harmony", "--replay-engine-output", str(recording),
                                "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(240):
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                if process.poll() is not None:
                    raise AssertionError(process.stderr.read() if process.stderr else "server exited")
                import time

                time.sleep(0.5)
        model = httpx.get(f"{base}/v1/models").json()["data"][0]["id"]
        with httpx.stream("POST", f"{base}/v1/responses", json={"model": model, "stream": True, "input": "weather?",
                                                               "tools": TOOLS}, timeout=60) as response:
            events = events_of(parse_frames(response.iter_lines()))
    finally:
        process.terminate()
        process.wait(timeout=30)
    final = validate_events(events)
    assert [item.type for item in final.output] == ["reasoning", "message", "function_call", "function_call"]


def test_path_is_chosen_once_per_model() -> None:
    from server.paths.chat_template import ChatTemplatePath
    from server.paths.choice import choose_path

    class Engine:
        tokenizer = None
        model_type = "gpt_oss"
        image_placeholder = None

    assert isinstance(choose_path(Engine(), ModelSettings(MODEL)), HarmonyPath)
    Engine.model_type = "llama"
    assert isinstance(choose_path(Engine(), ModelSettings(MODEL)), ChatTemplatePath)
    assert isinstance(choose_path(Engine(), ModelSettings(MODEL, harmony=True)), HarmonyPath)


def test_previous_response_id_on_the_harmony_path(tmp_path: Path) -> None:
    """The stored reasoning, preamble and calls go back into the harmony prompt of the next turn."""
    from tests.stores import sqlite_records

    engine = ScriptedEngine(tokenizer=None, scripts=[steps_from_tokens(CALLS_WITH_PREAMBLE, cuts=[9])],
                            max_model_len=131072)
    context = ServingContext(config=ServerConfig(served_model_name=MODEL, harmony=True),
                             engine_factory=lambda: engine, records=sqlite_records(tmp_path / "r.db"))
    with serve_in_thread(create_app(context)) as base_url:
        client = Harness(engine, base_url).client
        first = client.responses.create(model=MODEL, input="Weather in Paris and Rome?", tools=TOOLS)  # type: ignore[arg-type]
        calls = [item for item in first.output if item.type == "function_call"]
        engine.scripts = [steps_from_tokens(REASONING_THEN_FINAL, cuts=[4])]
        client.responses.create(model=MODEL, previous_response_id=first.id, tools=TOOLS,  # type: ignore[arg-type]
                                input=[{"type": "function_call_output", "call_id": c.call_id, "output": f"sunny {n}"}
                                       for n, c in enumerate(calls)])
    prompt = harmony_encoding().decode(engine.requests[-1].prompt_token_ids)
    assert "Weather in Paris and Rome?" in prompt
    assert "Need weather for two cities." in prompt  # reasoning between tool calls of the turn is kept
    assert prompt.count("to=functions.get_weather") == 2
    assert "<|start|>functions.get_weather" in prompt and "sunny 1" in prompt


def test_a_reusable_prompt_on_the_harmony_path(tmp_path: Path) -> None:
    """A prompt's instructions go into harmony's developer message, its items before the request's input."""
    import httpx

    from tests.stores import sqlite_records

    engine = ScriptedEngine(tokenizer=None, scripts=[steps_from_tokens(REASONING_THEN_FINAL, cuts=[4])],
                            max_model_len=131072)
    context = ServingContext(config=ServerConfig(served_model_name=MODEL, harmony=True),
                             engine_factory=lambda: engine, records=sqlite_records(tmp_path / "r.db"))
    with serve_in_thread(create_app(context)) as base_url:
        made = httpx.post(f"{base_url}/prompts", json={"instructions": "Speak as a sailor from {{port}}.",
                                                        "input": "I sail from {{port}} at dawn."}).json()
        response = Harness(engine, base_url).client.responses.create(
            model=MODEL, prompt={"id": made["id"], "variables": {"port": "Lisbon"}}, input="Which wind?")
    prompt = harmony_encoding().decode(engine.requests[-1].prompt_token_ids)
    developer = prompt[prompt.index("<|start|>developer"):]
    assert "Speak as a sailor from Lisbon." in developer[:developer.index("<|end|>")]
    assert prompt.index("I sail from Lisbon at dawn.") < prompt.index("Which wind?")
    assert response.prompt is not None and response.prompt.version == "1"


STRICT_WEATHER = {**TOOLS[0], "strict": True, "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": False}}
CITY_FORMAT = {"format": {"type": "json_schema", "name": "city", "strict": True, "schema": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": False}}}
CALL_PARIS = completion(("analysis", None, "Need the weather."),
                        ("commentary", "functions.get_weather", '{"city": "Paris"}'), end=CALL)
FINAL_JSON = completion(("analysis", None, "Answer as JSON."), ("final", None, '{"city": "Paris"}'))
FINAL_PROSE = completion(("analysis", None, "Answer."), ("final", None, "It is Paris."))
GRAMMAR_CASES = [
    ("text.format json_schema", {"text": CITY_FORMAT}, FINAL_JSON, FINAL_PROSE),
    ("text.format json_object", {"text": {"format": {"type": "json_object"}}}, FINAL_JSON, FINAL_PROSE),
    ("tool_choice required", {"tools": TOOLS, "tool_choice": "required"}, CALL_PARIS, FINAL_PROSE),
    ("tool_choice named", {"tools": TOOLS, "tool_choice": {"type": "function", "name": "get_weather"}}, CALL_PARIS,
     FINAL_PROSE),
    ("allowed_tools required", {"tools": TOOLS, "tool_choice": {
        "type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "get_weather"}]}},
     CALL_PARIS, FINAL_PROSE),
    ("strict tool under auto", {"tools": [STRICT_WEATHER]}, CALL_PARIS,
     completion(("commentary", "functions.get_weather", '{"town": "Paris"}'), end=CALL)),
]


@pytest.mark.parametrize(("fields", "allowed", "stopped"), [c[1:] for c in GRAMMAR_CASES],
                         ids=[c[0] for c in GRAMMAR_CASES])
def test_the_engine_gets_a_grammar_that_holds_the_replayed_output(harmony: Harness, fields: dict[str, Any],
                                                                  allowed: list[int], stopped: list[int]) -> None:
    harmony.play(steps_from_tokens(allowed, cuts=list(range(3, len(allowed), 3))))
    final = validate_events(stream(harmony, **fields))
    assert final.status == "completed"
    tag = harmony.engine.requests[-1].sampling.structural_tag
    assert tag is not None
    assert harmony_accepts(tag, allowed) and not harmony_accepts(tag, stopped)


def test_free_output_gets_no_grammar(harmony: Harness) -> None:
    harmony.play(steps_from_tokens(REASONING_THEN_FINAL, cuts=[]))
    stream(harmony, tools=TOOLS)
    assert harmony.engine.requests[-1].sampling.structural_tag is None


@pytest.mark.parametrize(("effort", "expected"), [("none", "LOW"), ("minimal", "LOW"), ("low", "LOW"),
                                                  ("medium", "MEDIUM"), ("high", "HIGH"), ("xhigh", "HIGH"),
                                                  ("max", "HIGH")])
def test_every_sdk_effort_maps_to_the_nearest_harmony_effort(effort: str, expected: str) -> None:
    request = ResponsesRequest.model_validate({"input": "hi", "reasoning": {"effort": effort}})
    system = harmony_conversation(request, datetime.date(2026, 1, 1), None).messages[0].content[0]
    assert system.reasoning_effort.name == expected


def test_image_input_is_a_400_on_the_harmony_path(harmony: Harness) -> None:
    response = httpx.post(f"{harmony.base_url}/responses", json={"model": MODEL, "input": [
        {"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}]},
        timeout=30)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "input[0].content[0]"
    assert "reads text only" in response.json()["error"]["message"]


ENCRYPTED = "reasoning.encrypted_content"


def test_reasoning_sealed_for_a_stateless_client_is_rendered_again(harmony: Harness) -> None:
    """Turn 1 seals its analysis; turn 2 sends it back stripped to encrypted_content, as Codex does."""
    harmony.play(steps_from_tokens(CALL_PARIS, cuts=[4]))
    first = stream(harmony, tools=TOOLS, store=False, include=[ENCRYPTED])
    output = validate_events(first).output
    reasoning = next(item for item in output if item.type == "reasoning")
    call = next(item for item in output if item.type == "function_call")
    assert reasoning.encrypted_content and "weather" not in reasoning.encrypted_content
    harmony.play(steps_from_tokens(REASONING_THEN_FINAL, cuts=[]))
    stripped = {"type": "reasoning", "id": reasoning.id, "summary": [], "encrypted_content": reasoning.encrypted_content}
    second = [{"role": "user", "content": "hi"}, stripped, call.model_dump(exclude_none=True),
              {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}]
    stream(harmony, tools=TOOLS, store=False, include=[ENCRYPTED], input=second)
    prompt = harmony_encoding().decode(harmony.engine.requests[-1].prompt_token_ids)
    assert "<|channel|>analysis<|message|>Need the weather.<|end|>" in prompt


def test_without_the_include_no_reasoning_is_sealed(harmony: Harness) -> None:
    harmony.play(steps_from_tokens(CALL_PARIS, cuts=[]))
    output = validate_events(stream(harmony, tools=TOOLS)).output
    assert next(item for item in output if item.type == "reasoning").encrypted_content is None


@pytest.mark.parametrize("tamper", ["flip", "truncate", "foreign", "moved"])
def test_tampered_reasoning_is_a_400(harmony: Harness, tamper: str) -> None:
    harmony.play(steps_from_tokens(CALL_PARIS, cuts=[]))
    reasoning = next(item for item in validate_events(stream(harmony, tools=TOOLS, include=[ENCRYPTED])).output
                     if item.type == "reasoning")
    sealed = reasoning.encrypted_content
    value = {"flip": sealed[:20] + ("A" if sealed[20] != "A" else "B") + sealed[21:],
             "truncate": sealed[:-8],
             "foreign": Sealer.ephemeral().seal("reasoning", {"text": "forged"}),
             "moved": SEALER.seal("compaction", {"text": "Need the weather."})}[tamper]
    for stream_flag in (False, True):
        response = httpx.post(f"{harmony.base_url}/responses", timeout=30, json={
            "model": MODEL, "stream": stream_flag, "input": [
                {"role": "user", "content": "hi"},
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": value}]})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == "invalid_encrypted_content" and error["param"] == "input[1].encrypted_content"


def test_a_reasoning_summary_asked_for_is_the_analysis_streamed_as_summary(harmony: Harness) -> None:
    harmony.play(steps_from_tokens(CALLS_WITH_PREAMBLE, cuts=[3, 9, 17]))
    with harmony.client.responses.stream(model=MODEL, input="Weather in Paris and Rome?", tools=TOOLS,
                                         reasoning={"effort": "low", "summary": "auto"}) as sdk_stream:
        kinds = [event.type for event in sdk_stream]
        final = sdk_stream.get_final_response()
    assert "response.reasoning_summary_text.delta" in kinds
    reasoning = next(item for item in final.output if item.type == "reasoning")
    assert [part.text for part in reasoning.summary] == ["Need weather for two cities."]
    harmony.play(steps_from_tokens(CALLS_WITH_PREAMBLE, cuts=[5]))
    events = stream(harmony, tools=TOOLS, reasoning={"summary": "concise"})
    validate_events(events)
    assert any(event["type"] == "response.reasoning_summary_part.done" for event in events)


# -- found by running the tiny gpt-oss on the real engine (tests/test_e2e_gpt_oss.py) ----------------------------------

def _special(text: str) -> int:
    (token_id,) = harmony_encoding().encode(text, allowed_special="all")
    return token_id


def test_store_false_is_echoed_as_false(harmony: Harness) -> None:
    harmony.play(steps_from_tokens(REASONING_THEN_FINAL, cuts=[]))
    assert stream(harmony, store=False)[-1]["response"]["store"] is False
    harmony.play(steps_from_tokens(REASONING_THEN_FINAL, cuts=[]))
    assert stream(harmony)[-1]["response"]["store"] is True


def test_a_preamble_cut_by_the_token_limit_is_still_commentary(harmony: Harness) -> None:
    preamble = completion(("commentary", None, "Let me look up the weather for both cities first."))
    events = every_step_size(harmony, preamble[:-4], finish="length", tools=TOOLS)
    final = events[-1]["response"]
    assert events[-1]["type"] == "response.incomplete"
    assert [(item["type"], item["status"], item["phase"]) for item in final["output"]] == [
        ("message", "incomplete", "commentary")]


@pytest.mark.parametrize("end", ["<|endoftext|>", "<|return|>"])
def test_an_end_of_text_token_ends_the_turn_and_is_never_text(harmony: Harness, end: str) -> None:
    """gpt-oss's generation_config lists <|endoftext|> among its end ids: vLLM stops on it and returns it."""
    answer = completion(("final", None, '{"city": "Paris"}'))[:-1] + [_special(end)]
    final = every_step_size(harmony, answer)[-1]["response"]
    assert final["status"] == "completed"
    assert final["output"][-1]["content"][0]["text"] == '{"city": "Paris"}'
    call = completion(("commentary", "functions.get_weather", '{"city": "Rome"}'), end=CALL)[:-1] + [_special(end)]
    final = every_step_size(harmony, call, tools=TOOLS)[-1]["response"]
    assert [(item["type"], item["status"], item["arguments"]) for item in final["output"]] == [
        ("function_call", "completed", '{"city": "Rome"}')]


@pytest.mark.parametrize("token", ["<|reserved_200013|>", "<|startoftext|>", "<|reserved_201000|>", "<|start|>"])
def test_a_reserved_token_inside_a_message_is_never_text(harmony: Harness, token: str) -> None:
    tokens = completion(("final", None, "The answer is"))[:-1] + [_special(token)] + _body_tokens(" Paris.")
    events = every_step_size(harmony, tokens, same_usage=False)
    final = events[-1]["response"]
    assert events[-1]["type"] == "response.failed"
    assert token not in json.dumps(events)
    assert final["output"][-1]["content"][0]["text"] == "The answer is"


def _body_tokens(text: str) -> list[int]:
    return list(harmony_encoding().encode(text, disallowed_special=()))


def test_reserved_tokens_are_banned_from_sampling(harmony: Harness) -> None:
    harmony.play(steps_from_tokens(REASONING_THEN_FINAL, cuts=[]))
    stream(harmony)
    banned = set(harmony.engine.requests[-1].sampling.banned_token_ids)
    allowed = {_special(t) for t in ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>",
                                      "<|return|>", "<|call|>", "<|endoftext|>")}
    assert {_special("<|reserved_200013|>"), _special("<|startoftext|>"), 201087} <= banned
    assert not banned & allowed and all(token_id >= 199998 for token_id in banned)


def test_a_custom_tools_call_is_rendered_as_its_freeform_body() -> None:
    patch = {"type": "custom", "name": "apply_patch", "description": "Applies a patch."}
    request = ResponsesRequest.model_validate({"model": MODEL, "tools": [patch], "input": [
        {"role": "user", "content": "Fix it."},
        {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": '*** Begin Patch\n"x"'},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "Done."}]})
    path = HarmonyPath(ModelSettings(name=MODEL), today=datetime.date(2026, 1, 1))
    text = harmony_encoding().decode(path.render(request).token_ids)
    assert 'to=functions.apply_patch<|message|>*** Begin Patch\n"x"<|call|>' in text
    assert "Freeform: the message body is the input" in text and "type apply_patch = () => any" in text


def test_a_tool_output_given_unasked_is_the_named_tools_message(harmony: Harness) -> None:
    """Codex sends a tool's output with its name and namespace and no call (its goal objective): harmony renders it
    as a message from that tool, as it would the output of a call."""
    from server.paths.harmony import harmony_encoding

    harmony.play(steps_from_tokens(completion(("final", None, "ok")), cuts=[2]))
    response = harmony.post(model=MODEL, input=[{"role": "user", "content": "Go."}, {
        "type": "function_call_output", "name": "goal_objective", "namespace": "agent", "output": "Count the files."}])
    assert response.status_code == 200, response.text
    prompt = harmony_encoding().decode(harmony.engine.requests[-1].prompt_token_ids)
    assert "<|start|>functions.agent__goal_objective<|channel|>commentary to=assistant<|message|>Count the files." \
        in prompt, prompt
    missing = harmony.post(model=MODEL, input=[{"role": "user", "content": "Go."},
                                               {"type": "function_call_output", "output": "x"}])
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "input[1]"
