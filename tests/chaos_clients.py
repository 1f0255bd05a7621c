"""Chaos clients for the replicas' end-to-end tests (tests/test_e2e_replicas.py): threads that stream and follow
background responses while PostgreSQL stops or a replica is killed, each recording the ending it was told."""

from __future__ import annotations

import glob
import threading
import time
from typing import Any

import httpx
import psycopg

from tests.invariants import RUNNING
from tests.sse import events_of, parse_frames
from tests.servers import MODEL, UNPENALIZED, RunningServer

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
