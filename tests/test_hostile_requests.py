"""Single hostile requests found by review (issue 32): each is a clear 4xx or a served response, never a 500,
never a response left running."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from conformance.contract import validate_events
from tests.test_harmony import harmony  # noqa: F401  (the fixture)
from tests.test_images import PLACEHOLDER as VISION_PLACEHOLDER, Vision, image_url, served_vision
from tests.test_server import MODEL, Harness, answer_tokens  # noqa: F401
from tests.test_server import in_process_harness as harness  # noqa: F401  (the fixture, by this name)
from server.attachments.work_pool import WorkLimits
from server.config import ServerConfig
from server.records import open_records
from server.responses.records import RetentionPolicy
from server.http.app import create_app
from server.runs.context import ServingContext
from streaming.ids import counting_ids
from tests.conftest import serve_in_thread
from tests.hostile import HEALTH_BOUND, Probe, bilevel_png, pdf_bomb
from tests.scripted_engine import ScriptedEngine, steps_from_tokens

CALL = {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{}"}


@pytest.fixture(scope="module")
def vision(tokenizer: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Vision]:
    """In the server's process: what these tests send is refused, or decoded, before any engine sees it."""
    with served_vision(tokenizer, tmp_path_factory.mktemp("store") / "responses.db", "in_process") as served:
        yield served


@pytest.fixture(scope="module")
def counted(tokenizer: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Harness, ServingContext]]:
    """A served app with a store, whose context the test reads (how many responses it holds as running)."""
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    store = open_records(f"sqlite:///{tmp_path_factory.mktemp('store') / 'responses.db'}", RetentionPolicy(),
                       Path("unused"))
    config = ServerConfig(served_model_name=MODEL, input_work=WorkLimits(workers=2, seconds=1.0))
    context = ServingContext(config=config, engine_factory=lambda: engine, ids=counting_ids(), records=store)
    with serve_in_thread(create_app(context)) as base_url:
        yield Harness(engine, base_url), context


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_output_with_an_extra_numeric_content_is_served_and_not_left_running(
        counted: tuple[Harness, ServingContext], tokenizer: Any, stream: bool) -> None:
    served, context = counted
    served.play(steps_from_tokens(answer_tokens(tokenizer, "Done."), cuts=[1]))
    output = {"type": "function_call_output", "call_id": "call_1", "output": "42", "content": 7}
    response = served.post(input=[{"role": "user", "content": "look it up"}, CALL, output], stream=stream)
    assert response.status_code == 200, response.text
    assert context.admission.active == 0


def _nested(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"], "additionalProperties": False}
    return schema


HOSTILE_SCHEMAS = {
    "an empty anyOf": {"type": "object", "properties": {"a": {"anyOf": []}}, "required": ["a"],
                       "additionalProperties": False},
    "250 levels of nesting": _nested(250),
}


@pytest.mark.parametrize("path", ["chat_template", "harmony"])
@pytest.mark.parametrize("schema", list(HOSTILE_SCHEMAS.values()), ids=list(HOSTILE_SCHEMAS))
def test_a_schema_the_grammar_cannot_hold_is_a_400_in_plain_words(request: pytest.FixtureRequest, schema: Any,
                                                                  path: str) -> None:
    served: Harness = request.getfixturevalue("harness" if path == "chat_template" else "harmony")
    answer = {"type": "json_schema", "name": "s", "schema": schema}
    tool = {"type": "function", "name": "f", "parameters": schema, "strict": True}
    for body, param in (({"text": {"format": answer}}, "text.format.schema"), ({"tools": [tool]}, "tools")):
        response = httpx.post(f"{served.base_url}/responses", json={"input": "x", **body}, timeout=30)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"].startswith(param), error
        assert ".cc" not in error["message"] and "/project/" not in error["message"], error["message"]


def test_schema_errors_do_not_show_the_grammar_engines_source(harness: Harness) -> None:  # noqa: F811
    schema = {"type": "object", "properties": {"a": {"type": "string", "minLength": 5, "maxLength": 2}},
              "required": ["a"], "additionalProperties": False}
    response = harness.post(input="x", text={"format": {"type": "json_schema", "name": "s", "schema": schema}})
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert ".cc:" not in message and "/project/" not in message, message


@pytest.mark.parametrize("url", [
    "http://[example.com/a.png",
    "http://127.0.0.1\uff03@example.com/a.png",
    "http://127.0.0.1/a\x01b.png",
], ids=["open-bracket", "full-width-host", "control-character"])
def test_a_malformed_image_url_is_a_400_naming_its_part(vision: Vision, url: str) -> None:
    response = vision.post(input=[{"role": "user", "content": [{"type": "input_image", "image_url": url}]}])
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "input[0].content[0]"


def test_a_conversation_item_with_an_object_image_url_is_refused(vision: Vision) -> None:
    conversation = httpx.post(f"{vision.base_url}/conversations", json={}, timeout=30).json()["id"]
    part = {"type": "input_image", "image_url": {"url": image_url(4, 4)}}
    added = httpx.post(f"{vision.base_url}/conversations/{conversation}/items", timeout=30,
                       json={"items": [{"role": "user", "content": [part]}]})
    assert added.status_code == 400, added.text
    assert added.json()["error"]["param"].startswith("items[0].content[0]")
    later = vision.post(conversation=conversation, input="What was it?")
    assert later.status_code == 200, later.text


def test_an_object_image_url_in_a_response_input_is_a_400(vision: Vision) -> None:
    part = {"type": "input_image", "image_url": {"url": image_url(4, 4)}}
    response = vision.post(input=[{"role": "user", "content": [part]}])
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"].startswith("input[0].content[0]")


@pytest.mark.parametrize("stream", [True, False])
def test_a_compaction_that_fails_ends_the_response_failed_and_stored(
        counted: tuple[Harness, ServingContext], tokenizer: Any, stream: bool) -> None:
    """The request fits with its own small max_output_tokens, but not with the summary's 512: compaction fails
    after response.created, so the response ends failed, as stored, saying why in the client's terms."""
    served, context = counted
    served.play(steps_from_tokens(answer_tokens(tokenizer, "A summary."), cuts=[1]))
    instructions = "word " * (served.engine.max_model_len - 350)  # kept whole in the summary's prompt too
    body = {"model": MODEL, "instructions": instructions, "input": "Go on.", "stream": stream,
            "max_output_tokens": 16, "context_management": [{"type": "compaction", "compact_threshold": 1000}]}
    if stream:
        events = served.raw_stream(**{key: value for key, value in body.items() if key not in ("model", "stream")})
        assert [event["type"] for event in events] == [  # the compaction begun is closed, empty, before the end
            "response.created", "response.in_progress", "response.output_item.added", "response.compaction.compacting",
            "response.output_item.done", "response.failed"]
        validate_events(events)
        final = events[-1]["response"]
    else:
        answer = httpx.post(f"{served.base_url}/responses", json=body, timeout=30)
        assert answer.status_code == 200, answer.text
        final = answer.json()
    assert final["status"] == "failed" and "compaction" in final["error"]["message"].lower(), final["error"]
    assert [(item["type"], item["encrypted_content"]) for item in final["output"]] == [("compaction", "")]
    stored = httpx.get(f"{served.base_url}/responses/{final['id']}", timeout=30)
    assert stored.status_code == 200 and stored.json()["status"] == "failed"
    assert context.admission.active == 0




def test_a_costly_pdf_is_read_off_the_event_loop_within_a_time_limit(counted: tuple[Harness, ServingContext],
                                                                     tokenizer: Any) -> None:
    served, context = counted
    served.play(steps_from_tokens(answer_tokens(tokenizer, "Read."), cuts=[1]))
    part = {"type": "input_file", "filename": "bomb.pdf",
            "file_data": "data:application/pdf;base64," + base64.b64encode(pdf_bomb()).decode()}
    with Probe(served.base_url.removesuffix("/v1")) as probe:
        response = served.post(input=[{"role": "user", "content": [{"type": "input_text", "text": "Read."}, part]}])
    assert probe.slowest < HEALTH_BOUND, probe.slowest
    assert response.status_code == 400, response.text  # past the work's time limit (1 s here), it names the part
    error = response.json()["error"]
    assert error["param"] == "input[0].content[1]" and error["code"] == "file_too_costly", error


def test_images_past_the_requests_pixel_budget_are_a_413_before_any_is_decoded(vision: Vision) -> None:
    """Eight 6,300 x 6,300 PNGs (KBs each, 40M pixels each: each under the per-image cap) decoded to ~1.9 GB."""
    parts = [{"type": "input_image", "image_url": "data:image/png;base64,"
              + base64.b64encode(bilevel_png(6_300 - n)).decode()} for n in range(8)]  # 8 distinct images
    with Probe(vision.base_url.removesuffix("/v1")) as probe:
        response = vision.post(input=[{"role": "user", "content": parts}])
    grown = probe.grown
    assert response.status_code == 413, response.text
    error = response.json()["error"]
    assert error["param"].startswith("input[0].content[") and "pixels" in error["message"], error
    assert grown < 300 * 2**20, f"the server grew by {grown / 2**20:.0f} MiB"
    assert probe.slowest < HEALTH_BOUND, probe.slowest


def test_one_image_sent_under_several_spellings_is_decoded_once(vision: Vision) -> None:
    url = image_url(6, 4)
    spellings = [url, url.replace(";base64", ";n=1;base64"), url.replace(";base64", ";n=2;base64")]
    response = vision.post(input=[{"role": "user", "content": [
        {"type": "input_image", "image_url": spelling} for spelling in spellings]}])
    assert response.status_code == 200, response.text
    first, *others = vision.engine.requests[-1].images
    assert all(other is first for other in others)


def test_a_placeholder_written_in_text_is_not_an_image(vision: Vision) -> None:
    """User text (or instructions) that spells the model's image placeholder must not make a slot for an image:
    the prompt has as many placeholders as images."""
    response = vision.post(instructions="Answer about <image> only.", input=[{"role": "user", "content": [
        {"type": "input_text", "text": "Compare <image> with this:"},
        {"type": "input_image", "image_url": image_url(5, 5)}]}])
    assert response.status_code == 200, response.text
    request = vision.engine.requests[-1]
    assert vision.prompt().count(VISION_PLACEHOLDER) == len(request.images) == 1
    assert "Compare" in vision.prompt() and "with this:" in vision.prompt()
