"""Fuzzing in the suite: a hundred or so cases of each kind (`make fuzz` runs 10,000), every invariant checked on each."""

from __future__ import annotations

from typing import Iterator

import pytest
import schemathesis.specs.openapi.schemas  # noqa: F401  loaded now, while no server thread runs (see below)

from tests.fuzz import Counts, fuzz_server, healthy, run_queries, run_raw, run_schemathesis, run_websocket


# CPython 3.11's AST construction keeps a recursion count that a compile in another thread can upset (gh-106905):
# schemathesis loaded its OpenAPI module lazily, through pytest's assertion rewriting, while the fuzz server's thread
# ran, and the parse failed once with "SystemError: AST constructor recursion depth mismatch". It is imported above,
# at collection, before any server thread starts.


@pytest.fixture(scope="module")
def root() -> Iterator[str]:
    with fuzz_server() as base:
        yield base


def test_schemathesis_over_every_operation(root: str) -> None:
    counts = Counts()
    run_schemathesis(root, 8, counts)
    assert counts.cases >= 150 and not counts.violations, "\n".join(counts.violations)
    assert healthy(root)


def test_raw_bodies_bent_every_way(root: str) -> None:
    counts = Counts()
    run_raw(root, 150, counts)
    assert counts.cases == 150 and not counts.violations, "\n".join(counts.violations)
    assert healthy(root)


def test_query_values_of_any_size_and_type(root: str) -> None:
    counts = Counts()
    run_queries(root, 80, counts)
    assert counts.cases == 80 and not counts.violations, "\n".join(counts.violations)
    assert healthy(root)


def test_websocket_frames_of_every_shape(root: str) -> None:
    counts = Counts()
    run_websocket(root, 100, counts)
    assert counts.cases >= 100 and not counts.violations, "\n".join(counts.violations)
    assert counts.server_errors == 0 and healthy(root)
