"""The response store and the stateful API: retrieval, replay, delete, input items, previous_response_id."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from server.http.app import create_app
from server.runs.context import ServingContext
from server.config import ServerConfig
from server.runs.background import interrupt_with
from server.records import MIGRATIONS, Records
from server.responses.records import RetentionPolicy, StoredConversation, StoredResponse
from tests.stores import records_at
from tests.conftest import serve_in_thread
from tests.scripted_engine import ScriptedEngine, steps_from_tokens
from tests.sse import events_of, parse_frames
from tests.test_server import MODEL, Harness
from conformance.contract import validate_events

TOOLS = [{"type": "function", "name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def record(n: int, items: int = 3, created: float | None = None, status: str = "completed") -> StoredResponse:
    created_at = created if created is not None else time.time() + n
    response = {"id": f"resp_{n}", "object": "response", "created_at": created_at, "model": MODEL, "status": status,
                "output": [], "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}
    return StoredResponse(id=f"resp_{n}", created_at=created_at, status=status, response=response,
                          input_items=[{"id": f"msg_{n}_{i}", "type": "message"} for i in range(items)])


def open_url(url: str, retention: RetentionPolicy = RetentionPolicy()) -> Records:
    return records_at(url, retention)


def test_store_round_trip_pagination_and_delete(store_url: str) -> None:
    async def scenario() -> None:
        records = open_url(store_url)
        store = records.responses
        await store.save(record(1, items=5), events=[json.dumps({"sequence_number": n, "type": "x"}) for n in range(4)])
        got = await store.get("resp_1", "default")
        assert got is not None and got.response["id"] == "resp_1" and len(got.input_items) == 5
        assert [json.loads(e)["sequence_number"] for e in await store.events_after("resp_1", 1, "default")] == [2, 3]
        page, more = await store.input_items("resp_1", None, 2, "asc", "default")
        assert [i["id"] for i in page] == ["msg_1_0", "msg_1_1"] and more
        page, more = await store.input_items("resp_1", "msg_1_1", 10, "asc", "default")
        assert [i["id"] for i in page] == ["msg_1_2", "msg_1_3", "msg_1_4"] and not more
        page, more = await store.input_items("resp_1", "msg_1_3", 2, "desc", "default")
        assert [i["id"] for i in page] == ["msg_1_2", "msg_1_1"] and more
        assert await store.delete("resp_1", "default") and await store.get("resp_1", "default") is None
        assert not await store.delete("resp_1", "default")
        assert await store.events_after("resp_1", -1, "default") == []
        await records.close()

    asyncio.run(scenario())


def running(n: int, owner: str) -> StoredResponse:
    return replace(record(n, status="in_progress"), background=True, owner=owner)


def event(n: int, kind: str = "x") -> str:
    return json.dumps({"sequence_number": n, "type": kind})


def test_concurrent_writers_and_a_restart_fails_only_what_is_no_longer_running(store_url: str) -> None:
    async def write_all() -> None:
        records = open_url(store_url)
        store = records.responses
        await asyncio.gather(*(store.save(record(n)) for n in range(64)))
        await store.start_owned(running(100, "replica-a"), lease_seconds=60)
        assert await store.append_events("resp_100", [event(0)], "replica-a")
        await store.start_owned(running(101, "replica-b"), lease_seconds=-1)  # b stopped renewing: expired
        await store.start_owned(running(102, "replica-c"), lease_seconds=60)  # c is alive
        await records.close()

    async def reopen() -> None:
        records = open_url(store_url)  # replica-a restarts
        store = records.responses
        assert all([await store.get(f"resp_{n}", "default") for n in range(64)])
        failed = await store.fail_interrupted(interrupt_with("server restarted"), restarted_owner="replica-a")
        assert sorted(failed) == ["resp_100", "resp_101"]
        interrupted = await store.get("resp_100", "default")
        assert interrupted is not None and interrupted.status == "failed"
        assert interrupted.response["error"]["message"] == "server restarted"
        ending = [json.loads(e) for e in await store.events_after("resp_100", 0, "default")]  # followers see it end
        assert [(e["type"], e["sequence_number"], e["response"]["status"]) for e in ending] == [
            ("response.failed", 1, "failed")]
        alive = await store.get("resp_102", "default")
        assert alive is not None and alive.status == "in_progress"
        assert await store.fail_interrupted(interrupt_with("gone")) == []
        await store.renew_leases("replica-c", ["resp_102"], lease_seconds=-1)  # as if c stopped renewing
        assert await store.fail_interrupted(interrupt_with("gone")) == ["resp_102"]
        await records.close()

    asyncio.run(write_all())
    asyncio.run(reopen())


def test_leases_renew_and_cancel_requests_reach_their_owner(store_url: str) -> None:
    async def scenario() -> None:
        records = open_url(store_url)
        store = records.responses
        await store.start_owned(running(1, "replica-a"), lease_seconds=-1)
        await store.start_owned(running(2, "replica-b"), lease_seconds=-1)
        await store.save(record(3))
        await store.renew_leases("replica-a", ["resp_1", "resp_2"], lease_seconds=100)  # only its own
        assert await store.fail_interrupted(interrupt_with("gone")) == ["resp_2"]
        assert await store.cancel_requests("replica-a") == []
        assert await store.request_cancel("resp_1", "default")
        assert not await store.request_cancel("resp_2", "default")  # failed: no longer running
        assert not await store.request_cancel("resp_3", "default")  # not a background response
        assert await store.cancel_requests("replica-a") == ["resp_1"]
        assert await store.cancel_requests("replica-b") == []
        await records.close()

    asyncio.run(scenario())


def test_retention_by_age_and_count(store_url: str) -> None:
    async def scenario() -> None:
        records = open_url(store_url, RetentionPolicy(max_age_seconds=3600, max_count=3))
        store = records.responses
        await store.save(record(0, created=time.time() - 7200))
        for n in range(1, 6):
            await store.save(record(n))
        await store.start_owned(replace(running(6, "replica-a"), created_at=time.time() - 7200), lease_seconds=60)
        assert await store.enforce_retention(batch=1) == 2  # one per rule and round
        assert await store.enforce_retention(batch=100) == 1
        assert await store.enforce_retention(batch=100) == 0
        kept = [n for n in range(7) if await store.get(f"resp_{n}", "default")]
        assert kept == [3, 4, 5, 6]  # the running one is never deleted, however old
        await records.close()

    asyncio.run(scenario())


# -- through the server ----------------------------------------------------------------------


def served(tokenizer: Any, store_url: str, config: ServerConfig | None = None) -> Any:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    context = ServingContext(config=config or ServerConfig(served_model_name=MODEL), engine_factory=lambda: engine,
                             records=open_url(store_url))
    return engine, serve_in_thread(create_app(context))


@pytest.fixture
def stateful(tokenizer: Any, store_url: str) -> Iterator[Harness]:
    engine, server = served(tokenizer, store_url)
    with server as base_url:
        yield Harness(engine, base_url)  # a fresh server (and engine) for every test


def say(tokenizer: Any, text: str) -> list[Any]:
    return steps_from_tokens(tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id], cuts=[2])


def test_streamed_response_is_retrievable_with_the_same_ids(stateful: Harness, tokenizer: Any) -> None:
    stateful.play(say(tokenizer, "Paris."))
    events = stateful.raw_stream(input="Capital of France?")
    final = events[-1]["response"]
    retrieved = stateful.client.responses.retrieve(final["id"])
    assert retrieved.model_dump(mode="json", exclude_unset=True)["output"] == final["output"]
    assert retrieved.output_text == "Paris."


def test_stream_resumes_after_a_sequence_number(stateful: Harness, tokenizer: Any) -> None:
    stateful.play(say(tokenizer, "Resumable answer here."))
    events = stateful.raw_stream(input="x")
    response_id = events[-1]["response"]["id"]
    with httpx.stream("GET", f"{stateful.base_url}/responses/{response_id}",
                      params={"stream": "true", "starting_after": 4}, timeout=30) as response:
        replayed = events_of(parse_frames(response.iter_lines()))
    assert replayed == events[5:]
    with httpx.stream("GET", f"{stateful.base_url}/responses/{response_id}", params={"stream": "true"},
                      timeout=30) as response:
        assert validate_events(events_of(parse_frames(response.iter_lines()))).id == response_id


def test_three_turns_with_a_function_call(stateful: Harness, tokenizer: Any) -> None:
    stateful.play(steps_from_tokens(tokenizer.encode(CALL, add_special_tokens=False), cuts=[3], finish="stop"))
    first = stateful.client.responses.create(model=MODEL, input="Weather in Paris?", tools=TOOLS,  # type: ignore[arg-type]
                                             instructions="Answer like a pirate.")
    call = first.output[0]
    assert call.type == "function_call"
    stateful.play(say(tokenizer, "It is sunny in Paris."))
    second = stateful.client.responses.create(
        model=MODEL, previous_response_id=first.id, tools=TOOLS,  # type: ignore[arg-type]
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 24C"}])
    prompt = tokenizer.decode(stateful.engine.requests[-1].prompt_token_ids)
    for text in ("Weather in Paris?", '"city": "Paris"', "sunny, 24C"):
        assert text in prompt
    assert "pirate" not in prompt  # instructions are not inherited
    stateful.play(say(tokenizer, "Bring sunglasses."))
    stateful.client.responses.create(model=MODEL, previous_response_id=second.id, input="What should I bring?")
    prompt = tokenizer.decode(stateful.engine.requests[-1].prompt_token_ids)
    for text in ("Weather in Paris?", "sunny, 24C", "It is sunny in Paris.", "What should I bring?"):
        assert text in prompt
    items = stateful.client.responses.input_items.list(second.id, order="asc")
    assert [item.type for item in items.data] == ["function_call_output"]


def test_store_false_is_neither_retrievable_nor_continuable(stateful: Harness, tokenizer: Any) -> None:
    stateful.play(say(tokenizer, "Ephemeral."))
    response = stateful.client.responses.create(model=MODEL, input="x", store=False)
    assert httpx.get(f"{stateful.base_url}/responses/{response.id}").status_code == 404
    follow_up = stateful.post(input="y", previous_response_id=response.id)
    assert follow_up.status_code == 404 and follow_up.json()["error"]["param"] == "previous_response_id"


def test_delete_then_get_is_404(stateful: Harness, tokenizer: Any) -> None:
    stateful.play(say(tokenizer, "Gone soon."))
    response = stateful.client.responses.create(model=MODEL, input="x")
    stateful.client.responses.delete(response.id)
    assert httpx.get(f"{stateful.base_url}/responses/{response.id}").status_code == 404
    assert httpx.delete(f"{stateful.base_url}/responses/{response.id}").status_code == 404


def test_input_items_pagination_in_both_orders(stateful: Harness, tokenizer: Any) -> None:
    stateful.play(say(tokenizer, "ok"))
    messages = [{"role": "user", "content": f"message {n}"} for n in range(7)]
    response = stateful.client.responses.create(model=MODEL, input=messages)  # type: ignore[arg-type]
    ascending = [item for item in stateful.client.responses.input_items.list(response.id, order="asc", limit=3)]
    descending = [item for item in stateful.client.responses.input_items.list(response.id, order="desc", limit=2)]
    assert [item.content[0].text for item in ascending] == [f"message {n}" for n in range(7)]  # type: ignore[union-attr]
    assert [item.id for item in descending] == [item.id for item in reversed(ascending)]
    first_page = stateful.client.responses.input_items.list(response.id, order="asc", limit=3)
    assert first_page.has_more and len(first_page.data) == 3


def test_stored_responses_survive_a_restart(tokenizer: Any, store_url: str) -> None:
    engine, server = served(tokenizer, store_url)
    engine.scripts = [say(tokenizer, "Before the restart.")]
    with server as base_url:
        first = Harness(engine, base_url).client.responses.create(model=MODEL, input="Remember me.")
    engine, server = served(tokenizer, store_url)
    engine.scripts = [say(tokenizer, "After the restart.")]
    with server as base_url:
        harness = Harness(engine, base_url)
        assert harness.client.responses.retrieve(first.id).output_text == "Before the restart."
        harness.client.responses.create(model=MODEL, input="Still there?", previous_response_id=first.id)
        prompt = tokenizer.decode(engine.requests[-1].prompt_token_ids)
        assert "Remember me." in prompt and "Before the restart." in prompt


# -- background responses --------------------------------------------------------------------


def slow(harness: Harness, tokenizer: Any, words: int = 40, delay: float = 0.03) -> None:
    harness.engine.step_delay = delay
    text = " ".join(f"word{n}" for n in range(words))
    harness.play(steps_from_tokens(tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id],
                                   cuts=list(range(1, 400))))


def wait_for_status(harness: Harness, response_id: str, statuses: set[str], within: float = 20) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        response = harness.client.responses.retrieve(response_id)
        if response.status in statuses:
            return response
        time.sleep(0.05)
    raise AssertionError(f"{response_id} never reached {statuses}")


def test_background_returns_at_once_and_completes(stateful: Harness, tokenizer: Any) -> None:
    slow(stateful, tokenizer)
    started = stateful.client.responses.create(model=MODEL, input="x", background=True)
    assert started.status in ("queued", "in_progress") and started.background
    running = stateful.client.responses.retrieve(started.id)
    assert running.status == "in_progress"
    final = wait_for_status(stateful, started.id, {"completed"})
    assert final.output_text.startswith("word0 word1")
    assert stateful.engine.requests[-1].request_id in stateful.engine.finished


def test_background_stream_survives_a_disconnect_and_resumes(stateful: Harness, tokenizer: Any) -> None:
    slow(stateful, tokenizer)
    with httpx.stream("POST", f"{stateful.base_url}/responses", timeout=30,
                      json={"model": MODEL, "input": "x", "stream": True, "background": True}) as response:
        frames = []
        for line in response.iter_lines():
            frames.append(line)
            if sum(f.startswith("data:") for f in frames) == 6:
                break
    first = events_of(parse_frames(frames + [""]))
    response_id = first[0]["response"]["id"]
    with httpx.stream("GET", f"{stateful.base_url}/responses/{response_id}", timeout=30,
                      params={"stream": "true", "starting_after": first[-1]["sequence_number"]}) as response:
        rest = events_of(parse_frames(response.iter_lines()))
    events = validate_events(first + rest)
    assert events.status == "completed" and events.output_text.startswith("word0 word1")
    assert stateful.engine.requests[-1].request_id in stateful.engine.finished  # never aborted


def test_cancel_a_background_response(stateful: Harness, tokenizer: Any) -> None:
    slow(stateful, tokenizer, words=400, delay=0.05)
    started = stateful.client.responses.create(model=MODEL, input="x", background=True)
    time.sleep(0.3)
    cancelled = stateful.client.responses.cancel(started.id)
    assert cancelled.status == "cancelled"
    assert stateful.engine_aborted_last_request()
    assert stateful.client.responses.retrieve(started.id).status == "cancelled"
    with httpx.stream("GET", f"{stateful.base_url}/responses/{started.id}", params={"stream": "true"},
                      timeout=30) as response:
        events = events_of(parse_frames(response.iter_lines()))
    validate_events(events)
    assert events[-1]["response"]["status"] == "cancelled"


def test_background_needs_store_and_only_background_can_be_cancelled(stateful: Harness, tokenizer: Any) -> None:
    response = stateful.post(input="x", background=True, store=False)
    assert response.status_code == 400 and response.json()["error"]["param"] == "background"
    stateful.play(say(tokenizer, "done"))
    finished = stateful.client.responses.create(model=MODEL, input="x")
    refused = httpx.post(f"{stateful.base_url}/responses/{finished.id}/cancel")
    assert refused.status_code == 400


def test_writes_of_an_owner_land_only_while_the_response_is_still_theirs(store_url: str) -> None:
    """Integrity point 2: a replica that stalled past its lease finished and overwrote the failed response, and its
    events went into the log after the other replica's terminal event."""
    async def scenario() -> None:
        records = open_url(store_url)
        store = records.responses
        await store.start_owned(running(1, "replica-a"), lease_seconds=60)
        assert await store.append_events("resp_1", [event(0, "response.created")], "replica-a")
        assert not await store.append_events("resp_1", [event(1)], "replica-b")  # not b's
        await store.renew_leases("replica-a", ["resp_1"], lease_seconds=-1)  # a stalls past its lease
        assert await store.fail_interrupted(interrupt_with("gone")) == ["resp_1"]  # b fails it
        assert not await store.append_events("resp_1", [event(1)], "replica-a")
        assert not await store.finish_owned(replace(running(1, "replica-a"), status="completed"),
                                            [event(1), event(2, "response.completed")])
        stored = await store.get("resp_1", "default")
        assert stored is not None and stored.status == "failed"
        assert [json.loads(e)["type"] for e in await store.events_after("resp_1", -1, "default")] == [
            "response.created", "response.failed"]
        await store.start_owned(running(2, "replica-a"), lease_seconds=60)
        assert await store.delete("resp_2", "default")  # deleted while running: the owner's end does not bring it back
        assert not await store.finish_owned(replace(running(2, "replica-a"), status="completed"), [event(0)])
        assert not await store.append_events("resp_2", [event(0)], "replica-a")
        assert await store.get("resp_2", "default") is None
        await records.close()

    asyncio.run(scenario())


def test_an_event_log_written_again_from_an_earlier_point_keeps_each_event_once(store_url: str) -> None:
    """A write whose commit reached the database but whose answer was lost is written again from the same first
    event, with whatever came since: the log then holds every event once, in order, and a follower reading from
    the middle of a write gets only what follows."""
    async def scenario() -> None:
        records = open_url(store_url)
        store = records.responses
        await store.start_owned(running(1, "replica-a"), lease_seconds=60)
        assert await store.append_events("resp_1", [event(0, "response.created"), event(1)], "replica-a")
        assert await store.append_events("resp_1", [event(0, "response.created"), event(1), event(2)], "replica-a")
        assert await store.append_events("resp_1", [event(0, "response.created"), event(1)], "replica-a")  # late
        assert await store.append_events("resp_1", [event(3), event(4)], "replica-a")
        assert await store.finish_owned(replace(running(1, "replica-a"), status="completed"),
                                        [event(5, "response.completed")])
        numbers = [json.loads(e)["sequence_number"] for e in await store.events_after("resp_1", -1, "default")]
        assert numbers == [0, 1, 2, 3, 4, 5]
        assert [json.loads(e)["sequence_number"] for e in await store.events_after("resp_1", 3, "default")] == [4, 5]
        assert [json.loads(e)["sequence_number"] for e in await store.events_after("resp_1", 1, "default")] == [2, 3, 4, 5]
        assert await store.events_after("resp_1", 5, "default") == []
        await records.close()

    asyncio.run(scenario())


def test_saving_a_long_event_log_costs_no_more_statements_than_a_short_one(tmp_path: Path) -> None:
    """A response's log is written at its end (or as a background response grows): the statements that write it
    do not grow with the number of events (one per event cost about 6 µs per streamed token)."""
    def statements_to_save(events: int, name: str) -> int:
        async def scenario() -> int:
            records = open_url(f"sqlite:///{tmp_path / name}")
            store = records.responses
            await store.get("resp_0", "default")  # opens the file and migrates it
            executed: list[str] = []
            records.database._connection.set_trace_callback(executed.append)  # type: ignore[attr-defined, union-attr]
            await store.save(record(1), events=[event(n) for n in range(events)])
            await records.close()
            return len(executed)

        return asyncio.run(scenario())

    assert statements_to_save(1000, "long.db") == statements_to_save(10, "short.db")


def test_a_log_kept_before_the_event_log_was_batched_is_read_after_the_upgrade(store_url: str) -> None:
    """A database from before the batched log (SQLite schema 2, PostgreSQL schema 1) opens with its events readable
    as they were."""
    old_rows = [
        "INSERT INTO responses (id, created_at, status, response) VALUES ('resp_1', 1, 'completed', '{}')",
        *(f"INSERT INTO events (response_id, sequence_number, event) VALUES ('resp_1', {n}, '{event(n)}')"
          for n in range(3))]
    if store_url.startswith("sqlite:///"):
        import sqlite3

        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as db:
            for number, scripts in MIGRATIONS.of("sqlite")[:2]:
                db.executescript(f"BEGIN; {' '.join(scripts)}; PRAGMA user_version = {number}; COMMIT;")
            for statement in old_rows:
                db.execute(statement)
    else:
        import psycopg

        with psycopg.connect(store_url, autocommit=True) as db:
            db.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, "
                       "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
            number, (script,) = MIGRATIONS.of("postgresql")[0]
            db.execute(script)  # type: ignore[arg-type]
            db.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (number,))
            for statement in old_rows:
                db.execute(statement)  # type: ignore[arg-type]

    async def scenario() -> list[int]:
        records = open_url(store_url)
        store = records.responses
        numbers = [json.loads(e)["sequence_number"] for e in await store.events_after("resp_1", 0, "default")]
        await records.close()
        return numbers

    assert asyncio.run(scenario()) == [1, 2]


def test_every_store_read_and_change_of_a_named_object_filters_by_its_project(store_url: str) -> None:
    """Issue 43, in the store itself: a response, conversation or item named with another project finds nothing
    and changes nothing, on both backends (each query filters by the project; no check is left to the caller)."""
    from dataclasses import replace

    async def scenario() -> None:
        records = open_url(store_url)
        store = records.responses
        await store.save(replace(record(1, items=2, status="in_progress"), background=True),
                         events=[json.dumps({"sequence_number": 0, "type": "x"})])
        await records.conversations.create_conversation(StoredConversation("conv_1", 7, {"k": "v"}),
                                        [{"id": "msg_a", "type": "message"}])
        other = "another-project"
        assert await store.get("resp_1", other) is None
        assert await store.events_after("resp_1", -1, other) == []
        assert await store.input_items("resp_1", None, 10, "asc", other) == ([], False)
        assert not await store.request_cancel("resp_1", other)
        assert await store.response_home("resp_1", other) is None
        assert await records.conversations.get_conversation("conv_1", other) is None
        assert await records.conversations.update_conversation("conv_1", {"a": "b"}, other) is None
        assert not await records.conversations.add_conversation_items("conv_1", [{"id": "msg_b", "type": "message"}], None, other)
        assert await records.conversations.conversation_items("conv_1", None, None, "asc", other) == ([], False)
        assert await records.conversations.count_conversation_items("conv_1", other) == 0
        assert await records.conversations.conversation_item("conv_1", "msg_a", other) is None
        assert not await records.conversations.delete_conversation_item("conv_1", "msg_a", other)
        assert await records.conversations.conversation_home("conv_1", other) is None
        # and all of it is still there for its own project
        assert (await store.get("resp_1", "default")) is not None
        assert (await records.conversations.get_conversation("conv_1", "default")).metadata == {"k": "v"}  # type: ignore[union-attr]
        assert [item["id"] for item in (await records.conversations.conversation_items("conv_1", None, None, "asc", "default"))[0]] \
            == ["msg_a"]
        await records.close()

    asyncio.run(scenario())


def test_item_references_bring_back_stored_input_output_and_conversation_items(stateful: Harness,
                                                                               tokenizer: Any) -> None:
    """OpenAI's conversation-state guide sends earlier items back by id: each is found in the project's stored
    responses (their input and output items) and conversations, and the model reads it; an unknown id is a 404."""
    stateful.play(say(tokenizer, "Teal is a color."))
    first = stateful.client.responses.create(model=MODEL, input="Name a color.")
    asked = stateful.client.responses.input_items.list(first.id).data[0]
    conversation = stateful.client.conversations.create(items=[{"role": "user", "content": "Remember the word kiwi."}])
    kept = stateful.client.conversations.items.list(conversation.id).data[0]
    stateful.play(say(tokenizer, "Because."))
    second = stateful.client.responses.create(model=MODEL, store=False, input=[
        {"type": "item_reference", "id": asked.id}, {"type": "item_reference", "id": first.output[0].id},
        {"type": "item_reference", "id": kept.id}, {"role": "user", "content": "Why?"}])
    assert second.output_text == "Because."
    prompt = tokenizer.decode(stateful.engine.requests[-1].prompt_token_ids)
    assert prompt.index("Name a color.") < prompt.index("Teal is a color.") < prompt.index("kiwi") < prompt.index("Why?")
    missing = stateful.post(input=[{"type": "item_reference", "id": "msg_" + "0" * 48}])
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "input[0].id", missing.json()
