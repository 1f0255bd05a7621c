"""Integrity: nothing lost, nothing told twice (issue points named in each test), with a scripted engine and real
stores."""

from __future__ import annotations

import logging
import multiprocessing
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.config import ServerConfig
from server.http.app import create_app
from server.http.auth import api_keys
from server.history.sealing import Sealer, sealer_from
from server.runs.context import ServingContext
from tests.stores import faulty_sqlite, sqlite_records
from tests.conftest import serve_in_thread
from tests.scripted_engine import ScriptedEngine, steps_from_tokens
from tests.sse import events_of, parse_frames
from tests.test_server import MODEL, Harness, answer_tokens
from tests.test_store import say
from conformance.contract import validate_events


def serve(tokenizer: Any, records: Any = None, **config: Any) -> tuple[ScriptedEngine, Any, ServingContext]:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    context = ServingContext(config=ServerConfig(served_model_name=MODEL, **config), engine_factory=lambda: engine,
                             records=records)
    return engine, serve_in_thread(create_app(context)), context


def test_a_background_start_the_store_refused_gives_its_place_back(tokenizer: Any, tmp_path: Path) -> None:
    """Point 1: a failed background start held its concurrency slot forever (every later request a 429)."""
    store = faulty_sqlite(tmp_path / "responses.db")
    engine, server, context = serve(tokenizer, store.records, max_concurrent_requests=2)
    with server as base_url:
        harness = Harness(engine, base_url)
        store.broken = True
        for _ in range(3):
            assert harness.post(input="x", background=True).status_code == 503
        store.broken = False
        harness.play(say(tokenizer, "Still served."))
        answered = harness.post(input="y")
        assert answered.status_code == 200, answered.text
        assert context.admission.active == 0


def test_a_chain_survives_a_new_reasoning_key(tokenizer: Any, tmp_path: Path) -> None:
    """Point 9: the history behind previous_response_id was re-opened from the old key's encrypted_content."""
    db = tmp_path / "responses.db"
    thinking = tokenizer.encode("<think>I recall Paris.</think>Paris.", add_special_tokens=False)
    for key in ("first key", "second key"):
        engine = ScriptedEngine(tokenizer=tokenizer, scripts=[steps_from_tokens(thinking + [tokenizer.eos_token_id],
                                                                                 cuts=[3])])
        config = ServerConfig(served_model_name=MODEL, reasoning_parser="qwen3")
        context = ServingContext(config=config, engine_factory=lambda: engine, records=sqlite_records(db),
                                 sealer=sealer_from(key, tmp_path))
        with serve_in_thread(create_app(context)) as base_url:
            harness = Harness(engine, base_url)
            if key == "first key":
                first = harness.post(input="Capital?", include=["reasoning.encrypted_content"]).json()
                assert first["output"][0]["type"] == "reasoning" and first["output"][0]["encrypted_content"]
            else:
                chained = harness.post(input="And of Italy?", previous_response_id=first["id"])
                assert chained.status_code == 200, chained.text
                prompt = tokenizer.decode(engine.requests[-1].prompt_token_ids)
                assert "Capital?" in prompt and "Paris." in prompt


def _first_start(directory: str, barrier: Any, out: Any) -> None:
    barrier.wait()
    out.put(sealer_from(None, Path(directory)).keys[0].hex())


def test_first_starts_at_once_agree_on_one_private_key(tmp_path: Path) -> None:
    """Point 10: two first starts raced on one temp file and could each keep another key."""
    for attempt in range(5):
        directory = tmp_path / f"data{attempt}"
        context = multiprocessing.get_context("fork")
        barrier, out = context.Barrier(6), context.Queue()
        workers = [context.Process(target=_first_start, args=(str(directory), barrier, out)) for _ in range(6)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(30)
        keys = {out.get(timeout=5) for _ in workers}
        assert len(keys) == 1
        assert (directory / "reasoning.key").stat().st_mode & 0o777 == 0o600
        assert sorted(p.name for p in directory.iterdir()) == ["reasoning.key"]  # no temp file left


def test_the_key_file_key_can_be_given_as_reasoning_key(tmp_path: Path) -> None:
    """Point 10: a raw key could not be carried from the key file to --reasoning-key (it was derived again)."""
    from_file = sealer_from(None, tmp_path)
    raw = (tmp_path / "reasoning.key").read_text().strip()
    given = sealer_from(f"hex:{raw}", tmp_path / "elsewhere")
    assert given.open("reasoning", from_file.seal("reasoning", {"text": "t"})) == {"text": "t"}
    assert sealer_from("a passphrase", tmp_path).keys != Sealer.ephemeral().keys


def test_a_json_client_that_goes_away_is_no_server_error(tokenizer: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Point 11: a non-streaming client that disconnected was a 500 ("Exception in ASGI application")."""
    engine, server, _ = serve(tokenizer)
    caplog.set_level(logging.ERROR)
    with server as base_url:
        harness = Harness(engine, base_url)
        engine.step_delay = 0.1
        harness.play(steps_from_tokens(answer_tokens(tokenizer) * 3, cuts=list(range(1, 60))))
        with pytest.raises(httpx.TimeoutException):
            httpx.post(f"{base_url}/responses", json={"model": MODEL, "input": "slow"}, timeout=0.5)
        assert harness.engine_aborted_last_request()
        time.sleep(0.3)
        metrics = httpx.get(base_url.removesuffix("/v1") + "/metrics").text
    assert 'route="/v1/responses",status="500"' not in metrics
    assert not [r for r in caplog.records if "Exception in ASGI application" in r.getMessage()]


@pytest.mark.parametrize("body", [
    {"input": "x", "tools": [{"type": "function", "name": "f", "parameters": "a string"}]},
    {"input": "x", "tools": [{"type": "function", "name": "f", "parameters": {"properties": "no"}}]},
    {"input": "x", "tools": [{"type": "namespace", "name": "ns", "tools": ["f", "g"]}]},
    {"input": "x", "tools": [{"type": "namespace", "name": "ns", "tools": "f"}]},
], ids=["parameters a string", "properties a string", "namespace of strings", "namespace tools a string"])
def test_malformed_tool_shapes_are_a_400(tokenizer: Any, body: dict[str, Any]) -> None:
    """Point 12: tools whose parameters is a string, or a namespace holding strings, were 500s."""
    engine, server, _ = serve(tokenizer)
    with server as base_url:
        Harness(engine, base_url).play(say(tokenizer, "ok"))
        for stream in (False, True):
            answer = httpx.post(f"{base_url}/responses", json={"model": MODEL, "stream": stream, **body}, timeout=30)
            assert answer.status_code == 400, answer.text
            assert answer.json()["error"]["param"].startswith("tools")


def test_a_huge_starting_after_is_a_400(tokenizer: Any, tmp_path: Path) -> None:
    """Point 12: `?stream=true&starting_after=99999999999999999999` was a 500."""
    engine, server, _ = serve(tokenizer, sqlite_records(tmp_path / "responses.db"))
    with server as base_url:
        harness = Harness(engine, base_url)
        harness.play(say(tokenizer, "Stored."))
        response_id = harness.raw_stream(input="x")[-1]["response"]["id"]
        answer = httpx.get(f"{base_url}/responses/{response_id}",
                           params={"stream": "true", "starting_after": "99999999999999999999"})
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["param"] == "starting_after"


def test_an_api_key_file_comment_is_not_part_of_a_key(tmp_path: Path) -> None:
    """Point 13: `--api-key-file` kept an inline `# comment` as part of the key."""
    key_file = tmp_path / "keys"
    key_file.write_text("# the team's keys\nsk-one  # the CI runner\nsk-two\n\n")
    assert api_keys(None, key_file) == ("sk-one", "sk-two")


def test_stream_events_stay_valid_when_the_run_fails(tokenizer: Any) -> None:
    """Guard for the tests above: a scripted failure still ends a valid stream."""
    engine, server, _ = serve(tokenizer)
    with server as base_url:
        harness = Harness(engine, base_url)
        harness.play(steps_from_tokens(answer_tokens(tokenizer)[:3], cuts=[1]) + [RuntimeError("engine died")])
        assert validate_events(harness.raw_stream(input="x")).status == "failed"


class _TextThenArguments:
    """A parser that sends text and then more arguments of the open call in one step (as vLLM's adapter could)."""

    reasoning_tokens = 0
    error = None

    def __init__(self) -> None:
        self.steps = 0

    def feed(self, token_ids: Any, text: str = "", token_ends: Any = None) -> list[Any]:
        from parsers.deltas import OutputText, ToolCallArguments, ToolCallStarted

        self.steps += 1
        if self.steps == 1:
            return [ToolCallStarted("get_weather"), ToolCallArguments('{"city": ')]
        return [OutputText("Let me check."), ToolCallArguments('"Paris"}')]

    def finish(self) -> list[Any]:
        return []


def test_an_invalid_delta_ends_the_run_failed_without_a_gap(tokenizer: Any) -> None:
    """Point 14: an exception inside ResponseBuilder.feed left a gap in sequence numbers."""
    import asyncio

    from server.engine.interface import EngineRequest, EngineStep, SamplingSettings
    from server.runs.generation import ResponseRun
    from streaming.builder import ResponseBuilder

    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[EngineStep([1]), EngineStep([2]), EngineStep([3], "stop")]])
    builder = ResponseBuilder({"model": MODEL})
    run = ResponseRun(engine, EngineRequest(builder.response_id, [1], SamplingSettings(max_tokens=8)),
                      _TextThenArguments(), None, builder)

    async def events() -> list[dict[str, Any]]:
        return [event.model_dump(mode="json", exclude_unset=True) async for event in run.events()]

    streamed = asyncio.run(events())
    final = validate_events(streamed)
    assert final.status == "failed" and final.error is not None
    assert "arguments" in final.error.message
    assert engine.aborted == [builder.response_id]  # the rest of the output is not wanted


def test_shutdown_ends_a_run_still_waiting_for_its_first_step(tokenizer: Any) -> None:
    """Point 6: stop() was looked at only when a step arrived, so a long prefill kept a draining server waiting."""
    import asyncio

    from server.engine.interface import EngineRequest, EngineStep, SamplingSettings
    from server.runs.generation import ResponseRun
    from streaming.builder import ResponseBuilder

    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[EngineStep([1], "stop")]], step_delay=3600)
    builder = ResponseBuilder({"model": MODEL})
    run = ResponseRun(engine, EngineRequest(builder.response_id, [1], SamplingSettings(max_tokens=8)),
                      _TextThenArguments(), None, builder)

    async def waiting(events: list[dict[str, Any]]) -> None:
        while len(events) < 2:  # created, in_progress: the run now waits for its first step
            await asyncio.sleep(0.01)

    events = asyncio.run(_stopped_once(run, waiting))  # before the fix: never (the step comes in an hour)
    final = validate_events(events)
    assert final.status == "failed" and final.error is not None and "shutting down" in final.error.message
    assert engine.aborted == [builder.response_id]


async def _stopped_once(run: Any, ready: Any) -> list[dict[str, Any]]:
    """The run's events, stopped as a shutdown stops it once `ready(events so far)` has returned."""
    import asyncio

    events: list[dict[str, Any]] = []

    async def consume() -> None:
        async for event in run.events():
            events.append(event.model_dump(mode="json", exclude_unset=True))

    task = asyncio.ensure_future(consume())
    await ready(events)
    run.stop("The server is shutting down.")
    await asyncio.wait_for(task, timeout=60)
    return events


def _wait_for(condition: Any, within: float = 20.0) -> bool:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _stored(base_url: str, response_id: str) -> dict[str, Any] | None:
    answer = httpx.get(f"{base_url}/responses/{response_id}")
    return answer.json() if answer.status_code == 200 else None


def test_a_background_terminal_save_is_retried_until_the_store_takes_it(tokenizer: Any, tmp_path: Path) -> None:
    """Point 7: the client saw `completed` while the store kept `in_progress` (until the lease expired: failed)."""
    store = faulty_sqlite(tmp_path / "responses.db")
    engine, server, context = serve(tokenizer, store.records)
    with server as base_url:
        harness = Harness(engine, base_url)
        engine.step_delay = 0.02
        harness.play(steps_from_tokens(answer_tokens(tokenizer), cuts=list(range(1, 30))))
        response_id = harness.post(input="x", background=True).json()["id"]
        store.broken = True  # the outage begins after the start was saved
        assert _wait_for(lambda: response_id in engine.finished)
        time.sleep(0.5)  # the terminal save has failed by now
        store.broken = False
        assert _wait_for(lambda: (_stored(base_url, response_id) or {}).get("status") == "completed")
        with httpx.stream("GET", f"{base_url}/responses/{response_id}", params={"stream": "true"}) as replay:
            replayed = events_of(parse_frames(replay.iter_lines()))
        assert validate_events(replayed).status == "completed"


class GatedResponses:
    """Real response records whose terminal saves wait while `gate` is closed (the test opens it)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.gate = threading.Event()
        self.holding = threading.Event()

    def __getattr__(self, name: str) -> Any:
        call = getattr(self.inner, name)
        if name not in ("save", "finish_owned"):
            return call

        async def save(record: Any, events: Any = None) -> Any:
            import asyncio

            if record.status not in ("queued", "in_progress"):
                self.holding.set()
                while not self.gate.is_set():
                    await asyncio.sleep(0.01)
            return await call(record, events)

        return save


def test_a_cancel_during_the_terminal_save_keeps_the_ending_the_client_saw(tokenizer: Any, tmp_path: Path) -> None:
    """Point 5: the cancel answered `completed`, the follower's stream had no terminal event, the row stayed
    in_progress."""
    records = sqlite_records(tmp_path / "responses.db")
    store = GatedResponses(records.responses)
    engine, server, _ = serve(tokenizer, replace(records, responses=store))
    with server as base_url:
        harness = Harness(engine, base_url)
        harness.play(say(tokenizer, "Done before the cancel."))
        response_id = harness.post(input="x", background=True).json()["id"]
        followed: list[dict[str, Any]] = []

        def follow() -> None:
            with httpx.stream("GET", f"{base_url}/responses/{response_id}", params={"stream": "true"},
                              timeout=30) as stream:
                followed.extend(events_of(parse_frames(stream.iter_lines())))

        follower = threading.Thread(target=follow)
        follower.start()
        assert store.holding.wait(10)  # the terminal event is made; its save is under way
        cancelled = httpx.post(f"{base_url}/responses/{response_id}/cancel", timeout=30).json()
        store.gate.set()
        follower.join(30)
        assert cancelled["status"] == "completed"
        assert validate_events(followed).status == "completed"
        assert _wait_for(lambda: (_stored(base_url, response_id) or {}).get("status") == "completed")


def test_a_replica_that_stalled_past_its_lease_does_not_overwrite_the_failure(tokenizer: Any,
                                                                             tmp_path: Path) -> None:
    """Point 2: after another replica failed a stalled owner's response, the owner overwrote it as completed and
    its log held two terminal events."""
    from server.runs.background import BackgroundRuns
    from tests.invariants import violations

    db = tmp_path / "responses.db"
    store_a = faulty_sqlite(db)
    engine_a = ScriptedEngine(tokenizer=tokenizer, scripts=[steps_from_tokens(answer_tokens(tokenizer) * 2,
                                                                               cuts=list(range(1, 40)))],
                              step_delay=0.1)
    engine_b = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    runs = {name: BackgroundRuns(owner=name, lease_seconds=1.0, poll_seconds=0.05) for name in "ab"}
    context_a = ServingContext(config=ServerConfig(served_model_name=MODEL), engine_factory=lambda: engine_a,
                               records=store_a.records, background=runs["a"])
    context_b = ServingContext(config=ServerConfig(served_model_name=MODEL), engine_factory=lambda: engine_b,
                               records=sqlite_records(db), background=runs["b"])
    with serve_in_thread(create_app(context_a)) as a, serve_in_thread(create_app(context_b)) as b:
        response_id = httpx.post(f"{a}/responses", json={"model": MODEL, "input": "x", "background": True}).json()["id"]
        followed: list[dict[str, Any]] = []

        def follow() -> None:
            with httpx.stream("GET", f"{a}/responses/{response_id}", params={"stream": "true"}, timeout=60) as s:
                followed.extend(events_of(parse_frames(s.iter_lines())))

        follower = threading.Thread(target=follow)
        follower.start()
        time.sleep(0.3)
        store_a.broken = True  # a cannot reach the store for longer than its lease: b fails its response
        assert _wait_for(lambda: (_stored(b, response_id) or {}).get("status") == "failed")
        store_a.broken = False
        follower.join(60)
        assert _wait_for(lambda: response_id in engine_a.finished + engine_a.aborted)
        time.sleep(0.5)
        seen = {response_id: followed[-1]["response"]["status"]} if followed else {}
    assert followed and followed[-1]["type"] == "response.failed"
    assert violations(f"sqlite:///{db}", seen) == []


def test_deleting_a_running_background_response_cancels_it_and_it_stays_deleted(
        tokenizer: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Point 3: DELETE did not cancel the run; its writer hit foreign-key errors (logged as a store outage) and its
    terminal save recreated the row as completed, with a log starting mid-way."""
    engine, server, _ = serve(tokenizer, sqlite_records(tmp_path / "responses.db"))
    caplog.set_level(logging.ERROR)
    with server as base_url:
        harness = Harness(engine, base_url)
        engine.step_delay = 0.05
        harness.play(steps_from_tokens(answer_tokens(tokenizer) * 2, cuts=list(range(1, 40))))
        response_id = harness.post(input="x", background=True).json()["id"]
        time.sleep(0.3)
        deleted = httpx.delete(f"{base_url}/responses/{response_id}", timeout=30)
        assert deleted.status_code == 200 and deleted.json()["deleted"]
        assert harness.engine_aborted_last_request()
        time.sleep(1.0)  # were it still running, it would have ended and been saved by now
        assert httpx.get(f"{base_url}/responses/{response_id}").status_code == 404
    assert not [r for r in caplog.records if "store" in r.getMessage()]


def test_bad_data_is_a_400_not_a_store_outage_on_both_backends(tokenizer: Any, store_url: str,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """Point 8: on PostgreSQL every psycopg.Error was a 503 store outage (and logged as one), including errors that
    the client's data caused: a NUL in an item id, duplicate item ids breaking `?after=`."""
    from tests.test_store import open_url

    engine, server, _ = serve(tokenizer, open_url(store_url))
    caplog.set_level(logging.ERROR)
    with server as base_url:
        harness = Harness(engine, base_url)
        harness.play(say(tokenizer, "Kept."))
        nul = harness.post(input=[{"type": "message", "role": "user", "content": "hi", "id": "msg_a\u0000b"}])
        assert nul.status_code == 400, nul.text
        assert "\u0000" not in nul.json()["error"]["message"] and "psycopg" not in nul.json()["error"]["message"]
        twice = [{"type": "message", "role": "user", "content": text, "id": "msg_same"} for text in ("a", "b")]
        response_id = harness.post(input=twice + [{"type": "message", "role": "user", "content": "c"}]).json()["id"]
        page = httpx.get(f"{base_url}/responses/{response_id}/input_items", params={"after": "msg_same",
                                                                                     "order": "asc"})
        assert page.status_code == 200, page.text
        assert [item["content"][0]["text"] for item in page.json()["data"]] == ["b", "c"]
    assert not [r for r in caplog.records if "response store" in r.getMessage()]


def test_failures_are_told_in_the_clients_terms(tokenizer: Any) -> None:
    """The issue's last point: response.failed messages and 500s passed internal exception text to clients."""
    engine, server, _ = serve(tokenizer)
    with server as base_url:
        harness = Harness(engine, base_url)
        harness.play(steps_from_tokens(answer_tokens(tokenizer)[:3], cuts=[1])
                     + [RuntimeError("CUDA error at /opt/vllm/worker.py:812")])
        final = validate_events(harness.raw_stream(input="x"))
    assert final.status == "failed" and final.error is not None
    assert "RuntimeError" not in final.error.message and "worker.py" not in final.error.message
    assert "could not be generated" in final.error.message


def test_a_stream_that_ended_during_an_outage_is_stored_once_the_store_is_back(tokenizer: Any,
                                                                              tmp_path: Path) -> None:
    """What a client was told is what the store keeps: a stored stream whose save failed was never stored."""
    store = faulty_sqlite(tmp_path / "responses.db")
    engine, server, _ = serve(tokenizer, store.records)
    with server as base_url:
        harness = Harness(engine, base_url)
        harness.play(say(tokenizer, "Told during the outage."))
        store.broken = True
        final = validate_events(harness.raw_stream(input="x"))
        assert final.status == "completed"
        store.broken = False
        assert _wait_for(lambda: (_stored(base_url, final.id) or {}).get("status") == "completed")
        assert (_stored(base_url, final.id) or {}).get("output") == final.model_dump(mode="json", exclude_unset=True)["output"]


def test_shutdown_ends_a_run_during_its_automatic_compaction(tokenizer: Any) -> None:
    """Issue 32 (suspected 13): stop() could not interrupt the step before generation (a compaction's summary),
    which could outlast the drain; now the step is cancelled (its summary's engine request with it)."""
    import asyncio

    from server.engine.interface import EngineRequest, EngineStep, SamplingSettings
    from server.runs.generation import ResponseRun
    from streaming.builder import ResponseBuilder

    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[EngineStep([1], "stop")]])
    builder = ResponseBuilder({"model": MODEL})
    summarizing = asyncio.Event()
    summary_cancelled = False

    async def summarize() -> Any:
        nonlocal summary_cancelled
        summarizing.set()
        try:
            await asyncio.sleep(3600)  # a summary that takes longer than any drain
        except asyncio.CancelledError:
            summary_cancelled = True
            raise

    run = ResponseRun(engine, EngineRequest(builder.response_id, [1], SamplingSettings(max_tokens=8)),
                      _TextThenArguments(), None, builder, before=summarize)

    async def compacting(_: list[dict[str, Any]]) -> None:
        await summarizing.wait()

    final = validate_events(asyncio.run(_stopped_once(run, compacting)))  # before the fix: an hour
    assert final.status == "failed" and final.error is not None and "shutting down" in final.error.message
    assert summary_cancelled and engine.requests == []  # the answer was never generated
