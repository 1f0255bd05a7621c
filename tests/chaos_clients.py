"""Chaos, end to end: two server processes on the real CPU engine share one real PostgreSQL. Background responses
and streams run while PostgreSQL stops for longer than the lease and comes back, then one replica is killed
(SIGKILL) mid-run; replica B's clock runs two hours ahead (libfaketime), which leases, timed by the database's
clock, must not notice. Afterwards the store keeps its invariants, and every background response a client saw end
is stored with that ending."""

from __future__ import annotations

import glob
import json
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.invariants import RUNNING, violations
from tests.sse import events_of, parse_frames
from tests.servers import MODEL, UNPENALIZED, RunningServer, start_together

pytestmark = pytest.mark.e2e
LEASE = 4.0
COUNT = "Count from 1 to 300, separated by commas."  # asked with no frequency penalty: it repeats its commas


class Clients:
    """Client threads; each records the ending it was told, if it was told one."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}
        self.background: set[str] = set()
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def start(self, work: Any, *args: Any) -> None:
        thread = threading.Thread(target=self._guarded, args=(work, *args), daemon=True)
        thread.start()
        self.threads.append(thread)

    def join(self, within: float) -> None:
        deadline = time.monotonic() + within
        for thread in self.threads:
            thread.join(max(0.1, deadline - time.monotonic()))
        assert not any(thread.is_alive() for thread in self.threads), "a client never got an answer"
        self.threads = []

    def _guarded(self, work: Any, *args: Any) -> None:
        try:
            work(*args)
        except (httpx.TransportError, httpx.HTTPStatusError):
            pass  # its replica was killed or refused it: it was told nothing

    def saw(self, events: list[dict[str, Any]]) -> None:
        if events and events[-1]["type"] in ("response.completed", "response.incomplete", "response.failed"):
            with self._lock:
                self.seen[events[-1]["response"]["id"]] = events[-1]["response"]["status"]

    def stream(self, server: RunningServer, tokens: int) -> None:
        with httpx.stream("POST", f"{server.base_url}/responses", timeout=300, json={
                "model": MODEL, "input": COUNT, "stream": True, "max_output_tokens": tokens, "temperature": 0,
                **UNPENALIZED}) as r:
            r.raise_for_status()
            self.saw(events_of(parse_frames(r.iter_lines())))

    def background_followed(self, server: RunningServer, follower: RunningServer, tokens: int) -> None:
        started = httpx.post(f"{server.base_url}/responses", timeout=60, json={
            "model": MODEL, "input": COUNT, "background": True, "max_output_tokens": tokens, "temperature": 0,
            **UNPENALIZED})
        started.raise_for_status()
        response_id = started.json()["id"]
        with self._lock:
            self.background.add(response_id)
        with httpx.stream("GET", f"{follower.base_url}/responses/{response_id}", params={"stream": "true"},
                          timeout=300) as r:
            r.raise_for_status()
            self.saw(events_of(parse_frames(r.iter_lines())))


def skewed_clock() -> dict[str, str]:
    """The environment that runs a process (and its children) with its wall clock two hours ahead: libfaketime
    preloaded (Debian's faketime package, installed by scripts/setup.sh); monotonic time stays true."""
    (library,) = glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1") or [""]  # the threads-safe one, as faketime
    assert library, "libfaketime is missing: run scripts/setup.sh (it installs Debian's faketime)"
    return {"LD_PRELOAD": library, "FAKETIME": "+2h", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


def running_rows(url: str) -> int:
    with psycopg.connect(url) as db:
        return db.execute(f"SELECT count(*) FROM responses WHERE status IN {RUNNING}").fetchone()[0]


def test_outage_and_a_killed_replica_leave_the_store_consistent(postgres: Any, tmp_path: Path) -> None:
    store = postgres.new_database()
    servers: list[RunningServer] = []
    clients = Clients()
    try:
        servers += start_together(*(partial(  # both or neither: a failed start stops the other
            RunningServer, ["--store", store, "--replica-id", name, "--max-model-len", "2048", "--lease-seconds",
                            str(LEASE)], tmp_path / f"{name}.log", data_dir=tmp_path / name,
            env=skewed_clock() if name == "b" else None) for name in "ab"))
        a, b = servers
        ahead = httpx.post(f"{b.base_url}/responses", timeout=120,
                           json={"model": MODEL, "input": "hi", "max_output_tokens": 1}).json()
        assert ahead["created_at"] > time.time() + 3600  # B's clock is skewed indeed
        # Wave 1: PostgreSQL stops for twice the lease while both replicas generate, then comes back.
        for server in (a, b):
            clients.start(clients.background_followed, server, server, 60)
            clients.start(clients.background_followed, server, server, 30)
            clients.start(clients.stream, server, 40)
        time.sleep(1.5)
        postgres.pause()
        time.sleep(2 * LEASE)
        postgres.resume()
        clients.join(within=300)
        # Wave 2: A is killed mid-run; B fails A's responses once their lease lapses, and its followers see that.
        for _ in range(2):
            clients.start(clients.background_followed, a, b, 400)
        time.sleep(4)
        a.kill()
        deadline = time.monotonic() + 120
        while running_rows(store):
            assert time.monotonic() < deadline, "responses of the killed replica were never failed"
            time.sleep(0.5)
        clients.join(within=120)
    finally:
        for server in servers:
            if server.process.poll() is None:
                server.stop()
    assert violations(store, clients.seen) == []
    with psycopg.connect(store) as db:
        stored = dict(db.execute("SELECT id, status FROM responses").fetchall())
    seen_background = {i: status for i, status in clients.seen.items() if i in clients.background}
    assert len(seen_background) >= 4, f"too few background responses reached their end: {clients.seen}"
    assert all(stored.get(i) == status for i, status in seen_background.items()), (seen_background, stored)
    assert json.dumps(sorted(set(stored.values()))) != "[]"
