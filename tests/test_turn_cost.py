"""A turn costs the server what it adds (issue 42): a chain is read from the store and validated once, sealed items
open once, and a turn that extends a known prompt tokenizes only what it adds; what the model sees is unchanged."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.bundled_model import BUNDLED_MODEL_NAME, ensure_bundled_model
from server.config import ServerConfig
from server.engine.recording import Recording
from server.history.sealing import Sealer
from server.http.app import create_app
from server.metrics import PROMPT_RENDERS, PROMPT_TOKENS
from server.runs.context import ServingContext
from tests.stores import CountingDatabase, sqlite_database, sqlite_records
from tests.conftest import serve_in_thread
from tests.scripted_engine import ScriptedEngine
from tests.servers import RunningServer
from tests.test_server import MODEL, Harness
from tests.test_store import open_url, say


def _served(tokenizer: Any, records: Any) -> tuple[ScriptedEngine, Any, ServingContext]:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    context = ServingContext(config=ServerConfig(served_model_name=MODEL), engine_factory=lambda: engine, records=records)
    return engine, serve_in_thread(create_app(context)), context


def _chain(harness: Harness, store: CountingDatabase, tokenizer: Any, turns: int) -> tuple[list[str], list[int]]:
    """`turns` chained turns; the ids, and the store reads (`get`) each turn's request made."""
    ids: list[str] = []
    reads = []
    for turn in range(turns):
        harness.play(say(tokenizer, f"Answer {turn}."))
        before = store.calls["get"]
        body: dict[str, Any] = {"input": f"Question {turn}?"}
        if ids:
            body["previous_response_id"] = ids[-1]
        response = harness.post(**body)
        assert response.status_code == 200, response.text
        reads.append(store.calls["get"] - before)
        ids.append(response.json()["id"])
    return ids, reads


def test_a_chained_turn_reads_only_the_response_before_it(tokenizer: Any, tmp_path: Path) -> None:
    """Each turn reads its previous response (one row), not the whole chain again; the prompt the model gets is
    the one a server that knew nothing reads from the store."""
    store = CountingDatabase(sqlite_database(tmp_path / "responses.db"))
    engine, server, _ = _served(tokenizer, store.records)
    with server as base_url:
        harness = Harness(engine, base_url)
        ids, reads = _chain(harness, store, tokenizer, 8)
        assert reads[2:] == [1] * 6, reads  # read whole, the 8th turn alone read 7 responses
        harness.play(say(tokenizer, "Last."))
        assert harness.post(input="And now?", previous_response_id=ids[-1]).status_code == 200
        warm_prompt = engine.requests[-1].prompt_token_ids
    cold_engine, cold_server, _ = _served(tokenizer, sqlite_records(tmp_path / "responses.db"))
    with cold_server as base_url:
        cold = Harness(cold_engine, base_url)
        cold.play(say(tokenizer, "Last."))
        assert cold.post(input="And now?", previous_response_id=ids[-1]).status_code == 200
        assert cold_engine.requests[-1].prompt_token_ids == warm_prompt


def test_a_known_chain_with_a_deleted_response_is_not_continued(tokenizer: Any, store_url: str) -> None:
    """A response deleted from the middle of a known chain ends it as it does when the chain is read whole: 404
    (on both stores: the check is one query)."""
    store = CountingDatabase(open_url(store_url).database)
    engine, server, _ = _served(tokenizer, store.records)
    with server as base_url:
        harness = Harness(engine, base_url)
        ids, _ = _chain(harness, store, tokenizer, 4)
        assert harness.client.responses.delete(ids[1]) is None
        harness.play(say(tokenizer, "Never."))
        refused = harness.post(input="more", previous_response_id=ids[-1])
        assert refused.status_code == 404, refused.text
        assert ids[1] in refused.json()["error"]["message"]


def test_a_conversation_turn_reads_only_the_items_added_since(tokenizer: Any, store_url: str) -> None:
    """Each turn of a conversation reads the items added since the last (its previous turn's input and output),
    not all of them; an item deleted meanwhile is read around, as a server that knew nothing reads it."""
    store = CountingDatabase(open_url(store_url).database)
    engine, server, _ = _served(tokenizer, store.records)
    with server as base_url:
        harness = Harness(engine, base_url)
        conversation = harness.client.conversations.create().id
        reads = []
        for turn in range(6):
            harness.play(say(tokenizer, f"Answer {turn}."))
            before = store.items_read
            assert harness.post(input=f"Question {turn}?", conversation=conversation).status_code == 200
            reads.append(store.items_read - before)
        assert reads[2:] == [2] * 4, reads  # the turn before's question and answer (read whole: 2, 4, ... 10)
        items = harness.client.conversations.items.list(conversation, order="asc").data
        harness.client.conversations.items.delete(items[2].id, conversation_id=conversation)
        harness.play(say(tokenizer, "Last."))
        assert harness.post(input="And now?", conversation=conversation).status_code == 200
        warm_prompt = engine.requests[-1].prompt_token_ids
        harness.play(say(tokenizer, "Again."))
    cold_engine, cold_server, _ = _served(tokenizer, open_url(store_url))
    with cold_server as base_url:
        cold = Harness(cold_engine, base_url)
        cold.play(say(tokenizer, "Last."))
        items = cold.client.conversations.items.list(conversation, order="asc").data
        cold.client.conversations.items.delete(items[-1].id, conversation_id=conversation)  # the answer "Last."
        cold.client.conversations.items.delete(items[-2].id, conversation_id=conversation)  # and "And now?"
        assert cold.post(input="And now?", conversation=conversation).status_code == 200
        assert cold_engine.requests[-1].prompt_token_ids == warm_prompt


def test_a_sealed_item_sent_every_turn_is_opened_once(tokenizer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []
    decrypt = Sealer._decrypt

    def counted(self: Sealer, purpose: str, value: str) -> dict[str, Any]:
        opened.append(value)
        return decrypt(self, purpose, value)

    monkeypatch.setattr(Sealer, "_decrypt", counted)
    engine, server, context = _served(tokenizer, None)
    sealed = context.sealer.seal("reasoning", {"text": "I thought about it."})
    reasoning = {"type": "reasoning", "summary": [], "encrypted_content": sealed}
    with server as base_url:
        harness = Harness(engine, base_url)
        history: list[dict[str, Any]] = [{"role": "user", "content": "Go."}, reasoning]
        for turn in range(5):
            harness.play(say(tokenizer, f"Step {turn}."))
            history += [{"role": "assistant", "content": f"Step {turn}."}, {"role": "user", "content": "Next."}]
            assert harness.post(input=history, store=False).status_code == 200
    assert opened == [sealed]


def _counted(outcome: str) -> float:
    return PROMPT_RENDERS.labels(outcome)._value.get()


def test_a_stateless_turn_with_a_prompt_cache_key_tokenizes_what_it_adds(tokenizer: Any) -> None:
    """Codex over HTTP resends its whole history with one prompt_cache_key: from the second turn on, the known
    prompt is extended (counted in /metrics), and the prompt is the one a server that knew nothing renders."""
    engine, server, _ = _served(tokenizer, None)
    history: list[dict[str, Any]] = [{"role": "user", "content": "Read the handler. " * 400}]
    with server as base_url:
        harness = Harness(engine, base_url)
        extended, reused = _counted("extended"), PROMPT_TOKENS.labels("reused")._value.get()
        for turn in range(3):
            harness.play(say(tokenizer, f"Looked {turn}."))
            assert harness.post(input=history, store=False, prompt_cache_key="session-1").status_code == 200
            history += [{"role": "assistant", "content": f"Looked {turn}."}, {"role": "user", "content": "Again."}]
        prompts = [request.prompt_token_ids for request in engine.requests[-3:]]
        assert _counted("extended") - extended == 2
        assert PROMPT_TOKENS.labels("reused")._value.get() - reused >= len(prompts[0]) + len(prompts[1]) - 10
        metrics = harness.client._client.get(base_url.removesuffix("/v1") + "/metrics").text
        assert 'responses_server_prompt_renders_total{outcome="extended"}' in metrics
    cold_engine, cold_server, _ = _served(tokenizer, None)
    with cold_server as base_url:
        cold = Harness(cold_engine, base_url)
        cold.play(say(tokenizer, "Looked."))
        assert cold.post(input=history[:-2], store=False).status_code == 200
        assert cold_engine.requests[-1].prompt_token_ids == prompts[-1]


LINE = "    value_{a} = compute_{b}(item_{c}, limit={d})  # step {e} of the loop\n"


def _long_history(calls: int, lines: int) -> list[dict[str, Any]]:
    """A Codex-like stateless input of `calls` shell calls whose outputs are pseudo-code (~`lines` * 26 tokens)."""
    rng = random.Random(7)
    items: list[dict[str, Any]] = [{"role": "user", "content": "Find the bug."}]
    for n in range(calls):
        output = "".join(LINE.format(a=rng.randrange(10**4), b=rng.randrange(10**3), c=rng.randrange(10**4),
                                     d=rng.randrange(100), e=rng.randrange(10**5)) for _ in range(lines))
        items += [{"type": "function_call", "call_id": f"call_{n}", "name": "shell", "arguments": "{}"},
                  {"type": "function_call_output", "call_id": f"call_{n}", "output": output}]
    return items


# A stream watched from a process of its own (the test's threads would hold the watcher up with their own work):
# the arrival time of every event, on the clock processes share, one per line.
WATCHER = """
import sys, time, httpx
url, model, out = sys.argv[1:4]
with open(out, "w", buffering=1) as arrivals:
    while True:
        with httpx.stream("POST", url, timeout=120, json={"model": model, "input": "Count.", "stream": True,
                                                          "store": False, "max_output_tokens": 40000}) as reply:
            for line in reply.iter_lines():
                if line.startswith("data:"):
                    arrivals.write(f"{time.monotonic()}\\n")
"""


def test_a_long_turn_being_prepared_does_not_stall_another_stream(tmp_path: Path) -> None:
    """While a fresh ~180k-token turn is read, validated, rendered and tokenized, a stream already running on the
    same process keeps sending: its slowest gap between two events is a small part of the preparation (on the event
    loop it would be all of it), whatever the machine's load does to both."""
    recording = tmp_path / "replay.jsonl"
    recording.write_text(Recording([], [[28]] * 40_000, "stop").to_json() + "\n")
    server = RunningServer(["--model", str(ensure_bundled_model()), "--served-model-name", BUNDLED_MODEL_NAME,
                            "--replay-engine-output", str(recording), "--max-model-len", "262144"],
                           tmp_path / "server.log")
    body = json.dumps({"model": BUNDLED_MODEL_NAME, "input": _long_history(calls=36, lines=190), "stream": True,
                       "store": False, "max_output_tokens": 2}).encode()
    arrivals = tmp_path / "arrivals"
    watcher = subprocess.Popen([sys.executable, "-c", WATCHER, f"{server.base_url}/responses", BUNDLED_MODEL_NAME,
                                str(arrivals)])
    try:
        while not arrivals.exists() or len(arrivals.read_text().splitlines()) < 50:
            time.sleep(0.01)
        started = time.monotonic()
        with httpx.stream("POST", f"{server.base_url}/responses", content=body, timeout=120,
                          headers={"content-type": "application/json"}) as reply:
            lines = [line for line in reply.iter_lines() if line.startswith("data:")]
        prepared = time.monotonic() - started  # an upper bound on the preparation: the turn's whole exchange
    finally:
        watcher.kill()
        watcher.wait()
        server.stop()
    events = [json.loads(line[5:]) for line in lines]
    assert events[0]["type"] == "response.created" and events[-1]["response"]["usage"]["input_tokens"] > 170_000
    moments = [float(line) for line in arrivals.read_text().splitlines()[:-1]]
    window = [moment for moment in moments if started <= moment <= started + prepared]
    gaps = [later - earlier for earlier, later in zip(window, window[1:])]
    assert len(window) > 20, f"{len(window)} events of the running stream in {prepared:.2f} s"
    assert max(gaps) < prepared / 4, f"slowest gap {max(gaps):.3f} s of {prepared:.3f} s"
