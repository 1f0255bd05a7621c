"""A turn costs the server what it adds (issue 42): a chain is read from the store and validated once, sealed items
open once, and a turn that extends a known prompt tokenizes only what it adds; what the model sees is unchanged."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from server.config import ServerConfig
from server.history.sealing import Sealer
from server.http.app import create_app
from server.metrics import PROMPT_RENDERS, PROMPT_TOKENS
from server.serving import ServingContext
from server.store.sqlite import SqliteStore
from tests.conftest import serve_in_thread
from tests.scripted_engine import ScriptedEngine
from tests.test_server import MODEL, Harness
from tests.test_store import open_url, say


@dataclass
class CountingStore:
    """A real store that counts the calls made to it, by method."""

    inner: Any
    calls: Counter[str] = field(default_factory=Counter)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return await method(*args, **kwargs)

        return call


def _served(tokenizer: Any, store: Any) -> tuple[ScriptedEngine, Any, ServingContext]:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    context = ServingContext(config=ServerConfig(served_model_name=MODEL), engine_factory=lambda: engine, store=store)
    return engine, serve_in_thread(create_app(context)), context


def _chain(harness: Harness, store: CountingStore, tokenizer: Any, turns: int) -> tuple[list[str], list[int]]:
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
    store = CountingStore(SqliteStore(tmp_path / "responses.db"))
    engine, server, _ = _served(tokenizer, store)
    with server as base_url:
        harness = Harness(engine, base_url)
        ids, reads = _chain(harness, store, tokenizer, 8)
        assert reads[2:] == [1] * 6, reads  # read whole, the 8th turn alone read 7 responses
        harness.play(say(tokenizer, "Last."))
        assert harness.post(input="And now?", previous_response_id=ids[-1]).status_code == 200
        warm_prompt = engine.requests[-1].prompt_token_ids
    cold_engine, cold_server, _ = _served(tokenizer, SqliteStore(tmp_path / "responses.db"))
    with cold_server as base_url:
        cold = Harness(cold_engine, base_url)
        cold.play(say(tokenizer, "Last."))
        assert cold.post(input="And now?", previous_response_id=ids[-1]).status_code == 200
        assert cold_engine.requests[-1].prompt_token_ids == warm_prompt


def test_a_known_chain_with_a_deleted_response_is_not_continued(tokenizer: Any, store_url: str) -> None:
    """A response deleted from the middle of a known chain ends it as it does when the chain is read whole: 404
    (on both stores: the check is one query)."""
    store = CountingStore(open_url(store_url))
    engine, server, _ = _served(tokenizer, store)
    with server as base_url:
        harness = Harness(engine, base_url)
        ids, _ = _chain(harness, store, tokenizer, 4)
        assert harness.client.responses.delete(ids[1]) is None
        harness.play(say(tokenizer, "Never."))
        refused = harness.post(input="more", previous_response_id=ids[-1])
        assert refused.status_code == 404, refused.text
        assert ids[1] in refused.json()["error"]["message"]


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
