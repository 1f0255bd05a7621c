"""Two replicas on one PostgreSQL database (scripted engines, real store): whatever one stores, the other reads,
chains, deletes, follows live and cancels; the replica running a response aborts its engine request."""

from __future__ import annotations

import time
from typing import Any, Iterator

import httpx
import pytest

from tests.sse import events_of, parse_frames
from tests.test_server import MODEL, Harness
from tests.test_store import say, served, slow, wait_for_status
from conformance.contract import validate_events


@pytest.fixture
def replicas(tokenizer: Any, postgres: Any) -> Iterator[tuple[Harness, Harness]]:
    url = postgres.new_database()
    a_engine, a_server = served(tokenizer, url)
    b_engine, b_server = served(tokenizer, url)
    with a_server as a_url, b_server as b_url:
        yield Harness(a_engine, a_url), Harness(b_engine, b_url)


def first_events(harness: Harness, count: int, **body: Any) -> list[dict[str, Any]]:
    """The first `count` events of a streamed request, then the client goes away."""
    with httpx.stream("POST", f"{harness.base_url}/responses", timeout=30,
                      json={"model": MODEL, "stream": True, **body}) as response:
        frames = []
        for line in response.iter_lines():
            frames.append(line)
            if sum(f.startswith("data:") for f in frames) == count:
                break
    return events_of(parse_frames(frames + [""]))


def test_a_background_response_on_a_is_followed_chained_and_deleted_on_b(
        replicas: tuple[Harness, Harness], tokenizer: Any) -> None:
    a, b = replicas
    slow(a, tokenizer, words=60, delay=0.03)
    first = first_events(a, 6, input="Count.", background=True)
    response_id = first[0]["response"]["id"]
    assert b.client.responses.retrieve(response_id).status == "in_progress"
    with httpx.stream("GET", f"{b.base_url}/responses/{response_id}", timeout=30,
                      params={"stream": "true", "starting_after": first[-1]["sequence_number"]}) as response:
        rest = events_of(parse_frames(response.iter_lines()))
    final = validate_events(first + rest)  # one gapless stream, half from A and half, live, from B
    assert final.status == "completed" and final.output_text.startswith("word0 word1")
    assert b.client.responses.retrieve(response_id).output_text == final.output_text

    b.play(say(tokenizer, "Sixty words."))
    chained = b.client.responses.create(model=MODEL, input="How many?", previous_response_id=response_id)
    prompt = tokenizer.decode(b.engine.requests[-1].prompt_token_ids)
    assert "Count." in prompt and "word59" in prompt and chained.output_text == "Sixty words."
    items = a.client.responses.input_items.list(chained.id).data  # stored by B, listed on A
    assert [item.content[0].text for item in items] == ["How many?"]  # type: ignore[union-attr]
    b.client.responses.delete(response_id)
    assert httpx.get(f"{a.base_url}/responses/{response_id}").status_code == 404


def test_cancel_on_b_aborts_the_engine_request_on_a(replicas: tuple[Harness, Harness], tokenizer: Any) -> None:
    a, b = replicas
    slow(a, tokenizer, words=400, delay=0.05)
    started = a.client.responses.create(model=MODEL, input="x", background=True)
    time.sleep(0.3)
    asked = time.monotonic()
    cancelled = b.client.responses.cancel(started.id)
    assert cancelled.status == "cancelled" and time.monotonic() - asked < 3
    assert a.engine_aborted_last_request()
    assert wait_for_status(b, started.id, {"cancelled"}).status == "cancelled"
    with httpx.stream("GET", f"{b.base_url}/responses/{started.id}", params={"stream": "true"},
                      timeout=30) as response:
        events = events_of(parse_frames(response.iter_lines()))
    validate_events(events)
    assert events[-1]["response"]["status"] == "cancelled"


def test_an_approval_asked_on_a_is_run_on_b(tokenizer: Any, postgres: Any) -> None:
    """An MCP call that waited for approval on one replica runs on the other, from the shared store's chain, and
    the listing made on the first is not made again."""
    from server.config import ServerConfig
    from server.tools.mcp_servers import McpSettings
    from tests.mcp_servers import serve_mcp
    from tests.test_hosted_tools import call_text, script

    url = postgres.new_database()
    with serve_mcp() as mcp:
        config = ServerConfig(served_model_name=MODEL, tool_call_parser="hermes",
                              mcp=McpSettings(servers={"calc": mcp.url}))
        a_engine, a_server = served(tokenizer, url, config)
        b_engine, b_server = served(tokenizer, url, config)
        with a_server as a_url, b_server as b_url:
            a, b = Harness(a_engine, a_url), Harness(b_engine, b_url)
            tool = {"type": "mcp", "server_label": "calc", "require_approval": "always"}
            a.play(script(tokenizer, call_text("calc__add", {"a": 1, "b": 41})))
            asked = a.post(input="1+41?", tools=[tool]).json()
            request = asked["output"][-1]
            assert request["type"] == "mcp_approval_request"
            b.play(script(tokenizer, "42."))
            answer = b.post(previous_response_id=asked["id"], tools=[tool], input=[
                {"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": True}]).json()
    assert [item["type"] for item in answer["output"]] == ["mcp_call", "message"]
    assert answer["output"][0]["output"] == "42" and answer["output"][0]["approval_request_id"] == request["id"]
