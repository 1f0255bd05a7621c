"""The hostile-input harness in the suite (tests/hostile.py; `make fuzz` runs all of it): costly inputs under a
probe of /health and the process's memory, and every SDK input item type bent field by field, on HTTP and on a
WebSocket. No case may get a 5xx or pass a bound."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.fuzz import MODEL, fuzz_server, healthy
from tests.hostile import Findings, serve_costly, serve_mutations


@pytest.fixture(scope="module")
def root() -> Iterator[str]:
    with fuzz_server() as base:
        yield base


def test_costly_inputs_keep_the_server_responsive_and_bounded(root: str) -> None:
    findings = Findings()
    serve_costly(root, MODEL, findings)
    assert findings.cases >= 16 and not findings.problems, "\n".join(findings.problems)
    assert healthy(root)


def test_every_sdk_item_type_bent_field_by_field_over_http(root: str) -> None:
    findings = Findings()
    serve_mutations(root, MODEL, findings, every=7)
    assert findings.cases >= 900 and not findings.problems, "\n".join(findings.problems)
    assert healthy(root)


def test_every_sdk_item_type_bent_field_by_field_over_a_websocket(root: str) -> None:
    findings = Findings()
    serve_mutations(root, MODEL, findings, every=23, websocket=True)
    assert findings.cases >= 250 and not findings.problems, "\n".join(findings.problems)
    assert healthy(root)
