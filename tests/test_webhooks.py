"""Webhooks for background responses: each ending written to the store's outbox with it, claimed by one replica per
attempt, posted signed as OpenAI signs them (the SDK's `webhooks.unwrap` verifies), retried until it arrives."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import httpx
import openai
import pytest
from openai import OpenAI

from server.config import ServerConfig
from server.http.app import create_app
from server.runs.background import BackgroundRuns
from server.runs.context import ServingContext
from server.records import open_records
from server.responses.records import RetentionPolicy
from server.webhooks.sender import WebhookSettings
from server.webhooks.signing import WebhookSecret
from streaming.ids import counting_ids
from tests.conftest import free_port, serve_in_thread
from tests.scripted_engine import ScriptedEngine, steps_from_tokens
from tests.test_store import interrupt_with, running

MODEL = "m"
SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def test_a_signed_event_is_verified_by_the_sdk_and_a_changed_one_is_not() -> None:
    body = json.dumps({"id": "evt_1", "object": "event", "created_at": int(time.time()), "type": "response.completed",
                       "data": {"id": "resp_1"}})
    headers = WebhookSecret.parse(SECRET).headers("evt_1", int(time.time()), body)
    event = OpenAI(api_key="unused").webhooks.unwrap(body, headers, secret=SECRET)
    assert event.type == "response.completed" and event.data.id == "resp_1"
    with pytest.raises(openai.InvalidWebhookSignatureError):
        OpenAI(api_key="unused").webhooks.unwrap(body.replace("resp_1", "resp_2"), headers, secret=SECRET)
    with pytest.raises(ValueError):
        WebhookSecret.parse("not-a-secret")


def test_the_outbox_holds_each_ending_and_one_replica_claims_each_attempt(store_url: str) -> None:
    async def scenario() -> None:
        records = open_records(store_url, RetentionPolicy(), Path("unused"), webhooks=True)
        assert records is not None
        store, outbox = records.responses, records.webhooks
        await store.start_owned(running(1, "replica-a"), lease_seconds=60)
        assert await outbox.claim("replica-a", 30, 10) == []  # nothing has ended
        assert await store.finish_owned(replace(running(1, "replica-a"), status="completed"), [])
        [delivery] = await outbox.claim("replica-a", 30, 10)
        assert (delivery.type, delivery.response_id, delivery.attempts) == ("response.completed", "resp_1", 0)
        assert delivery.id.startswith("evt_") and abs(delivery.created_at - time.time()) < 60
        assert await outbox.claim("replica-b", 30, 10) == []  # a's, while its claim lasts
        await outbox.failed(delivery.id, "replica-a", retry_in=0)
        [again] = await outbox.claim("replica-b", -1, 10)  # any replica's, once due; b's claim lapses at once
        assert again.id == delivery.id and again.attempts == 1
        [lapsed] = await outbox.claim("replica-a", 30, 10)  # b went quiet: another replica takes it
        await outbox.sent(lapsed.id, "replica-b")  # b's word no longer counts
        await outbox.sent(lapsed.id, "replica-a")
        assert await outbox.claim("replica-a", 30, 10) == []
        await store.start_owned(running(2, "replica-c"), lease_seconds=-1)  # c is gone
        assert await store.fail_interrupted(interrupt_with("gone")) == ["resp_2"]
        [failed] = await outbox.claim("replica-a", 30, 10)
        assert (failed.type, failed.response_id) == ("response.failed", "resp_2")
        await records.close()
        quiet_records = open_records(store_url, RetentionPolicy(), Path("unused"))  # no webhooks: no outbox rows
        assert quiet_records is not None
        quiet = quiet_records.responses
        await quiet.start_owned(running(3, "replica-a"), lease_seconds=60)
        assert await quiet.finish_owned(replace(running(3, "replica-a"), status="completed"), [])
        assert [d.response_id for d in await quiet_records.webhooks.claim("replica-a", 30, 10)] == []
        await quiet_records.close()

    asyncio.run(scenario())


class Receiver:
    """A real HTTP server taking webhook posts: it answers `failures` 503s first, then 200s; it keeps every post."""

    def __init__(self, failures: int = 0) -> None:
        self.failures, self.posts = failures, []  # type: ignore[var-annotated]

    def app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import Response
        from starlette.routing import Route

        async def hook(request: Request) -> Response:
            self.posts.append((await request.body(), dict(request.headers)))
            if len(self.posts) <= self.failures:
                return Response(status_code=503)
            return Response(status_code=200)

        return Starlette(routes=[Route("/hook", hook, methods=["POST"])])

    def events(self) -> list[Any]:
        """Each post, verified and parsed by the SDK."""
        client = OpenAI(api_key="unused")
        return [client.webhooks.unwrap(body, headers, secret=SECRET) for body, headers in self.posts]


def _serve_on(app: Any, port: int) -> Any:
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.02)
    return server


@pytest.fixture
def server_with_webhooks(tokenizer: Any, tmp_path: Path) -> Iterator[tuple[str, int, Any]]:
    """A server whose background endings go to port P's /hook (nothing listens there until a test starts it)."""
    port = free_port()
    settings = WebhookSettings(f"http://127.0.0.1:{port}/hook", WebhookSecret.parse(SECRET), first_retry_seconds=0.2,
                               timeout_seconds=2, poll_seconds=0.1)
    answer = tokenizer.encode("Done.", add_special_tokens=False) + [tokenizer.eos_token_id]
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[steps_from_tokens(answer, cuts=[1])])
    store = open_records(f"sqlite:///{tmp_path / 'responses.db'}", RetentionPolicy(), Path("unused"), webhooks=True)
    context = ServingContext(config=ServerConfig(served_model_name=MODEL, webhooks=settings),
                             engine_factory=lambda: engine, ids=counting_ids(), records=store,
                             background=BackgroundRuns(owner="replica-test"))
    with serve_in_thread(create_app(context)) as base_url:
        yield base_url, port, store


def _until(condition: Any, within: float = 60) -> bool:
    deadline = time.monotonic() + within
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return bool(condition())


def test_a_background_ending_is_posted_signed_through_a_receiver_outage(
        server_with_webhooks: tuple[str, int, Any]) -> None:
    base_url, port, _ = server_with_webhooks
    client = OpenAI(base_url=base_url, api_key="unused", max_retries=0)
    made = client.responses.create(model=MODEL, input="Go.", background=True)
    assert _until(lambda: client.responses.retrieve(made.id).status == "completed")
    time.sleep(1.0)  # the receiver is down (nothing listens): attempts fail to connect, and are tried again
    receiver = Receiver(failures=2)  # then it is up, but answers 503 twice
    server = _serve_on(receiver.app(), port)
    try:
        assert _until(lambda: len(receiver.posts) >= 3), len(receiver.posts)
        time.sleep(0.5)  # nothing more comes once delivered
        events = receiver.events()
    finally:
        server.should_exit = True
    assert len(events) == 3 and {event.id for event in events} == {events[0].id}  # one event, tried until it arrived
    assert events[0].type == "response.completed" and events[0].data.id == made.id
    metrics = httpx.get(base_url.removesuffix("/v1") + "/metrics", timeout=30).text
    assert 'responses_server_webhook_deliveries_total{outcome="delivered"}' in metrics


def test_a_background_ending_is_posted_once_and_other_responses_not_at_all(
        server_with_webhooks: tuple[str, int, Any]) -> None:
    base_url, port, _ = server_with_webhooks
    receiver = Receiver()
    server = _serve_on(receiver.app(), port)
    try:
        client = OpenAI(base_url=base_url, api_key="unused", max_retries=0)
        made = client.responses.create(model=MODEL, input="Go.", background=True)
        assert _until(lambda: client.responses.retrieve(made.id).status != "in_progress")
        assert _until(lambda: len(receiver.posts) >= 1)
        non_background = client.responses.create(model=MODEL, input="Now.")  # not background: no webhook
        time.sleep(0.5)
        [event] = receiver.events()
    finally:
        server.should_exit = True
    assert event.data.id == made.id and event.type == f"response.{client.responses.retrieve(made.id).status}"
    assert non_background.status == "completed"


class HoldingReceiver(Receiver):
    """A receiver that holds its first post open (as a receiver that hangs), answering the later ones."""

    def app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import Response
        from starlette.routing import Route

        async def hook(request: Request) -> Response:
            self.posts.append((await request.body(), dict(request.headers)))
            if len(self.posts) == 1:
                await asyncio.sleep(120)
            return Response(status_code=200)

        return Starlette(routes=[Route("/hook", hook, methods=["POST"])])


def test_a_replica_killed_mid_delivery_leaves_the_delivery_to_another(postgres: Any, tmp_path: Path) -> None:
    """Two replica processes on one PostgreSQL: the one posting a delivery is SIGKILLed while the receiver holds the
    post; once its claim lapses, the other replica posts it again (the same event id: at least once)."""
    import psycopg

    from server.engine.recording import Recording
    from tests.servers import RunningServer
    from tests.test_harmony import FINAL_PROSE

    database = postgres.new_database()
    recording = tmp_path / "engine-output.jsonl"
    recording.write_text(Recording([], [FINAL_PROSE], "stop").to_json() + "\n")
    secret_file = tmp_path / "webhook.secret"
    secret_file.write_text(SECRET + "\n")
    port = free_port()
    receiver = HoldingReceiver()
    hook_server = _serve_on(receiver.app(), port)
    flags = ["--harmony", "--replay-engine-output", str(recording), "--store", database, "--webhook-url",
             f"http://127.0.0.1:{port}/hook", "--webhook-secret-file", str(secret_file), "--webhook-timeout", "1",
             "--webhook-retry-seconds", "0.2"]
    replicas = {name: RunningServer([*flags, "--replica-id", name], tmp_path / f"{name}.log",
                                    data_dir=tmp_path / name) for name in ("a", "b")}
    try:
        made = replicas["a"].client.responses.create(model="gpt-oss", input="Go.", background=True)
        assert _until(lambda: len(receiver.posts) >= 1)  # held by the receiver
        with psycopg.connect(database) as db:
            (sender,) = db.execute("SELECT claimed_by FROM webhook_outbox").fetchone()  # type: ignore[misc]
        replicas[sender].process.kill()
        replicas[sender].process.wait(timeout=30)
        assert _until(lambda: len(receiver.posts) >= 2, within=60), "the other replica did not post it"
        with psycopg.connect(database) as db:
            assert _until(lambda: db.execute("SELECT count(*) FROM webhook_outbox").fetchone() == (0,))
        events = receiver.events()
    finally:
        hook_server.should_exit = True
        for replica in replicas.values():
            if replica.process.poll() is None:
                replica.stop()
    assert len({event.id for event in events}) == 1 and len(events) == 2
    assert events[0].type == "response.completed" and events[0].data.id == made.id


def test_the_sender_outlives_a_fault_of_its_own(server_with_webhooks: tuple[str, int, Any],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """An unexpected error while reading the outbox (not an outage) is logged, and the sender goes on."""
    base_url, port, store = server_with_webhooks
    claim = store.webhooks.claim
    faults = 0

    async def claim_once_faulty(*args: Any, **kwargs: Any) -> Any:
        nonlocal faults
        if faults == 0:
            faults += 1
            raise RuntimeError("a fault of the store's own")
        return await claim(*args, **kwargs)

    monkeypatch.setattr(store.webhooks, "claim", claim_once_faulty)
    receiver = Receiver()
    server = _serve_on(receiver.app(), port)
    try:
        client = OpenAI(base_url=base_url, api_key="unused", max_retries=0)
        made = client.responses.create(model=MODEL, input="Go.", background=True)
        assert _until(lambda: len(receiver.posts) >= 1, within=30), "the sender stopped"
    finally:
        server.should_exit = True
    assert faults == 1 and receiver.events()[0].data.id == made.id
