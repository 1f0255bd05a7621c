"""End to end: two server processes on the real CPU engine share one real PostgreSQL database. A response created
on A is read, chained, followed live and cancelled on B; A aborts the cancelled engine request. An agent's turns sent
alternately to A and B find their prefix in the cache of the replica that holds it, and go on when it is killed.

Chaos, on the same two replicas: background responses and streams run while PostgreSQL stops for longer than the
lease and comes back; then A is killed (SIGKILL) mid-run. B's clock runs two hours ahead (libfaketime), which
leases and heartbeats, timed by the database's clock, must not notice. Afterwards the store keeps its invariants,
and every background response a client saw end is stored with that ending."""

from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path
from typing import Any, Iterator

import httpx
import psycopg
import pytest

from tests.chaos_clients import LEASE, Clients, running_rows, skewed_clock
from tests.invariants import violations
from tests.sse import events_of, parse_frames
from tests.servers import MODEL, UNPENALIZED, RunningServer, start_together
from tests.test_metrics import scrape, value
from conformance.contract import validate_events

pytestmark = pytest.mark.e2e
BLOCK = 128  # vLLM's cache block on CPU: prefixes are cached in whole blocks
# Asked with no frequency penalty (the bundled model's serving default): counting repeats its commas to the end.
COUNT = {"input": "Count from 1 to 300, separated by commas.", "temperature": 0}


@pytest.fixture(scope="module")
def store(postgres: Any) -> str:
    """The replicas' database."""
    return str(postgres.new_database())


@pytest.fixture(scope="module")
def replicas(store: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, RunningServer]]:
    logs = tmp_path_factory.mktemp("replicas")
    servers = start_together(*(partial(  # both or neither: a failed start stops the other
        RunningServer, ["--store", store, "--replica-id", name, "--max-model-len", "2048", "--lease-seconds", str(LEASE)],
        logs / f"{name}.log", data_dir=logs / name, advertise=True,
        env=skewed_clock() if name == "b" else None) for name in "ab"))
    see_each_other(servers)
    yield servers[0], servers[1]
    for server in servers:
        if server.process.poll() is None:
            server.stop()


def see_each_other(servers: list[RunningServer]) -> None:
    deadline = time.monotonic() + 30  # each sees the other once both have beaten
    while not all(value(scrape(server.base_url), "responses_server_live_replicas") == 2 for server in servers):
        assert time.monotonic() < deadline, "the replicas never saw each other"
        time.sleep(0.5)


def test_created_on_a_read_and_chained_on_b(replicas: tuple[RunningServer, RunningServer]) -> None:
    a, b = replicas
    first = a.client.responses.create(model=MODEL, input="What is the capital of France?", temperature=0,
                                      max_output_tokens=32)
    assert b.client.responses.retrieve(first.id).output_text == first.output_text
    second = b.client.responses.create(model=MODEL, input="And of Italy?", previous_response_id=first.id,
                                       temperature=0, max_output_tokens=32)
    assert [i.type for i in a.client.responses.input_items.list(second.id).data] == ["message"]
    assert "Rome" in second.output_text or "rome" in second.output_text.lower()


def test_followed_live_on_b(replicas: tuple[RunningServer, RunningServer]) -> None:
    a, b = replicas
    started = a.client.responses.create(model=MODEL, background=True, max_output_tokens=120, **COUNT,
                                        extra_body=UNPENALIZED)
    time.sleep(1.0)
    with httpx.stream("GET", f"{b.base_url}/responses/{started.id}", timeout=300,
                      params={"stream": "true"}) as response:
        arrivals: list[float] = []
        frames = []
        for line in response.iter_lines():
            frames.append(line)
            if line.startswith("data:"):
                arrivals.append(time.monotonic())
    events = events_of(parse_frames(frames + [""]))
    final = validate_events(events)
    assert final.status == "incomplete" and final.output_text.startswith("1")
    assert arrivals[-1] - arrivals[0] > 1.0  # live: deltas kept arriving as A generated them, not all at once
    assert a.client.responses.retrieve(started.id).output_text == final.output_text


def test_cancelled_on_b_aborts_on_a(replicas: tuple[RunningServer, RunningServer]) -> None:
    a, b = replicas
    started = a.client.responses.create(model=MODEL, background=True, max_output_tokens=1500, **COUNT,
                                        extra_body=UNPENALIZED)
    time.sleep(2)  # generating on A
    cancelled = b.client.responses.cancel(started.id)
    assert cancelled.status == "cancelled"
    assert a.client.responses.retrieve(started.id).status == "cancelled"
    deadline = time.monotonic() + 10
    while f"response {started.id} cancelled" not in a.log.read_text():
        assert time.monotonic() < deadline, "A did not abort its engine request"
        time.sleep(0.2)
    with httpx.stream("GET", f"{b.base_url}/responses/{started.id}", params={"stream": "true"}, timeout=60) as reply:
        replayed = events_of(parse_frames(reply.iter_lines()))
    validate_events(replayed)
    assert replayed[-1]["response"]["status"] == "cancelled"


# An agent's turn: a paragraph of about 300 tokens, so each prompt spans more cache blocks than the last.
def paragraph(turn: int) -> str:
    return f"Note {turn}: " + " ".join(f"the {word} of turn {turn} is kept in the agent's log" for word in
                                         ("first", "second", "third", "fourth", "fifth", "sixth", "seventh",
                                          "eighth", "ninth", "tenth", "eleventh", "twelfth", "thirteenth",
                                          "fourteenth", "fifteenth", "sixteenth", "seventeenth", "eighteenth",
                                          "nineteenth", "twentieth", "last", "final", "closing", "ending"))


def cached(response: Any) -> int:
    return response.usage.input_tokens_details.cached_tokens


def test_chained_turns_sent_alternately_find_their_prefix(replicas: tuple[RunningServer, RunningServer]) -> None:
    a, b = replicas
    previous, found = None, []
    for turn, server in enumerate([a, b, a, b], start=1):
        reply = server.client.responses.create(model=MODEL, input=paragraph(turn), previous_response_id=previous,
                                               max_output_tokens=8, temperature=0)
        previous = reply.id
        found.append((cached(reply), reply.usage.input_tokens))
    # each turn finds (to a cache block of 128 tokens) the whole of the previous prompt, on either replica
    assert all(hit >= before - BLOCK for (hit, _), (_, before) in zip(found[1:], found)), found


def test_stateless_turns_with_a_prompt_cache_key_find_their_prefix(
        replicas: tuple[RunningServer, RunningServer]) -> None:
    a, b = replicas
    history: list[Any] = []
    found: list[tuple[int, int]] = []
    for turn, server in enumerate([b, a, b, a], start=1):
        history.append({"role": "user", "content": paragraph(turn + 10)})
        reply = server.client.responses.create(model=MODEL, input=history, store=False, max_output_tokens=8,
                                               temperature=0, prompt_cache_key="codex-session-1")
        history.append({"role": "assistant", "content": reply.output_text})
        found.append((cached(reply), reply.usage.input_tokens))
    assert all(hit >= before - BLOCK for (hit, _), (_, before) in zip(found[1:], found)), found


def test_a_forwarded_stream_is_the_homes_stream_and_a_leaving_client_aborts_it(
        replicas: tuple[RunningServer, RunningServer]) -> None:
    a, b = replicas
    first = a.client.responses.create(model=MODEL, input=paragraph(20), max_output_tokens=8, temperature=0)
    with httpx.stream("POST", f"{b.base_url}/responses", timeout=300, json={
            "model": MODEL, "input": "Go on.", "previous_response_id": first.id, "stream": True,
            "max_output_tokens": 16, "temperature": 0}) as response:
        lines = list(response.iter_lines())
    final = validate_events(events_of(parse_frames(lines)))
    with httpx.stream("GET", f"{a.base_url}/responses/{final.id}", params={"stream": "true"}, timeout=60) as reply:
        stored = list(reply.iter_lines())
    assert [line for line in lines if line.startswith("data:")] == [line for line in stored if line.startswith("data:")]
    assert final.usage is not None and final.usage.input_tokens_details.cached_tokens > 0

    disconnects = value(scrape(a.base_url), "responses_server_client_disconnects_total")
    with httpx.stream("POST", f"{b.base_url}/responses", timeout=300, json={
            "model": MODEL, "stream": True, "previous_response_id": first.id, "max_output_tokens": 1500,
            **COUNT, **UNPENALIZED}) as response:
        for line in response.iter_lines():
            if "output_text.delta" in line:
                break
    deadline = time.monotonic() + 30
    while value(scrape(a.base_url), "responses_server_client_disconnects_total") == disconnects:
        assert time.monotonic() < deadline, "the home did not abort its engine request"
        time.sleep(0.2)
    forwarded = scrape(b.base_url)
    assert value(forwarded, "responses_server_forwarding_total", key="previous_response", outcome="forwarded") >= 2


def test_a_store_outage_longer_than_the_lease_leaves_the_store_consistent(
        replicas: tuple[RunningServer, RunningServer], store: str, postgres: Any) -> None:
    """PostgreSQL stops for twice the lease while both replicas generate, then comes back."""
    a, b = replicas
    ahead = b.client.responses.create(model=MODEL, input="hi", max_output_tokens=1)
    assert ahead.created_at > time.time() + 3600  # B's clock is skewed indeed
    clients = Clients()
    for server in (a, b):
        clients.start(clients.background_followed, server, server, 60)
        clients.start(clients.background_followed, server, server, 30)
        clients.start(clients.stream, server, 40)
    time.sleep(1.5)
    postgres.pause()
    time.sleep(2 * LEASE)
    postgres.resume()
    clients.join(within=300)
    assert_consistent(store, clients, at_least=4)
    see_each_other([a, b])  # the next tests forward between them again


def assert_consistent(store: str, clients: Clients, at_least: int) -> None:
    """The store's invariants hold, and every background response a client saw end is stored with that ending."""
    assert violations(store, clients.seen) == []
    with psycopg.connect(store) as db:
        stored = dict(db.execute("SELECT id, status FROM responses").fetchall())
    seen_background = {i: status for i, status in clients.seen.items() if i in clients.background}
    assert len(seen_background) >= at_least, f"too few background responses reached their end: {clients.seen}"
    assert all(stored.get(i) == status for i, status in seen_background.items()), (seen_background, stored)
    assert json.dumps(sorted(set(stored.values()))) != "[]"


def test_the_home_killed_mid_session_the_next_turn_is_served_by_the_other(
        replicas: tuple[RunningServer, RunningServer], store: str) -> None:
    """Last in the module: A is killed (SIGKILL) mid-run; B serves the session's next turns, and fails A's running
    background responses once their lease lapses, which the clients following them on B see."""
    a, b = replicas
    first = a.client.responses.create(model=MODEL, input=paragraph(30), max_output_tokens=8, temperature=0)
    second = b.client.responses.create(model=MODEL, input=paragraph(31), previous_response_id=first.id,
                                       max_output_tokens=8, temperature=0)
    assert cached(second) > 0  # served by its home, A
    clients = Clients()
    for _ in range(2):
        clients.start(clients.background_followed, a, b, 400)
    time.sleep(4)
    a.kill()
    third = b.client.responses.create(model=MODEL, input=paragraph(32), previous_response_id=second.id,
                                      max_output_tokens=8, temperature=0)
    assert third.status in ("completed", "incomplete") and third.error is None  # B never saw the chain: a miss
    fourth = b.client.responses.create(model=MODEL, input=paragraph(33), previous_response_id=third.id,
                                       max_output_tokens=8, temperature=0)
    assert cached(fourth) > 0  # B is the chain's home now
    samples = scrape(b.base_url)
    assert value(samples, "responses_server_forwarding_total", key="previous_response", outcome="unreachable") >= 1
    deadline = time.monotonic() + 120
    while running_rows(store):
        assert time.monotonic() < deadline, "responses of the killed replica were never failed"
        time.sleep(0.5)
    clients.join(within=120)
    assert_consistent(store, clients, at_least=2)
