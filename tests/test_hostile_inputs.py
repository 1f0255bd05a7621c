"""The hostile-input harness in the suite (tests/hostile.py; `make fuzz` runs all of it): costly inputs under a
probe of /health and the process's memory, and every SDK input item type bent field by field, on HTTP and on a
WebSocket. No case may get a 5xx or pass a bound."""

from __future__ import annotations

from typing import Iterator

import pytest

import httpx

from tests.fuzz import MODEL, PROJECT_KEYS, fuzz_server, healthy, two_projects
from tests.hostile import (MARKER, Findings, serve_bad_retrieval, serve_bad_uploads, serve_costly, serve_foreign_ids,
                           serve_mutations)


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


def test_another_projects_ids_everywhere_an_id_goes_get_what_an_unknown_id_gets() -> None:
    """Issue 43: alpha names beta's response, conversation and item on every route, in every body field that
    takes an id, and on a WebSocket: each answer is the one an id that names nothing gets, none holds beta's text,
    and beta's objects are unchanged."""
    findings = Findings()
    with two_projects() as (root, key, theirs):
        serve_foreign_ids(root, MODEL, key, theirs, findings)
        with httpx.Client(base_url=root, headers={"Authorization": f"Bearer {PROJECT_KEYS['beta']}"}) as beta:
            assert MARKER in beta.get(f"/v1/responses/{theirs['response']}/input_items").text
            assert theirs["response"] in [listed["id"] for listed in beta.get("/v1/responses?limit=100").json()["data"]]
            assert beta.get(f"/v1/conversations/{theirs['conversation']}").json().get("metadata") in ({}, None)
            items = beta.get(f"/v1/conversations/{theirs['conversation']}/items").json()["data"]
            assert [item["id"] for item in items] == [theirs["item"]]
            assert beta.get(f"/v1/files/{theirs['file']}/content").text == MARKER
            assert beta.get(f"/v1/vector_stores/{theirs['vector_store']}").json()["name"] == MARKER
            found = beta.post(f"/v1/vector_stores/{theirs['vector_store']}/search", json={"query": MARKER}).json()
            assert found["data"] and found["data"][0]["file_id"] == theirs["file"], "beta's store is whole"
    assert findings.cases >= 75 and not findings.problems, "\n".join(findings.problems)


def test_bad_vector_store_requests_are_refused_in_4xx(root: str) -> None:
    """Issue 44: filters nested 20,000 deep or 10,000 wide, bad queries, options, chunking, attributes and batches,
    and unknown ids, on every retrieval route and the file_search tool: each a 4xx with an error body."""
    findings = Findings()
    serve_bad_retrieval(root, MODEL, findings)
    assert findings.cases >= 60 and not findings.problems, "\n".join(findings.problems)
    assert healthy(root)


def test_bad_uploads_are_refused_in_4xx(root: str) -> None:
    findings = Findings()
    serve_bad_uploads(root, findings)
    assert findings.cases >= 14 and not findings.problems, "\n".join(findings.problems)
    assert healthy(root)
