"""A response's timeline (issue 56 item 4): its phases as it was served, stored with it and read back from
`GET /v1/responses/{id}/timeline` (this server's extension), with no trace collector."""

from __future__ import annotations

from typing import Any, Iterator

import httpx
import pytest

from server.config import ServerConfig
from server.http.app import create_app
from server.runs.context import ServingContext
from server.tools.mcp_servers import McpSettings
from streaming.ids import counting_ids
from tests.conftest import serve_in_thread
from tests.mcp_servers import RunningMcp, mcp  # noqa: F401  (the fixture)
from tests.scripted_engine import ScriptedEngine
from tests.stores import sqlite_records
from tests.test_hosted_tools import call_text, mcp_tool, script
from tests.test_server import MODEL, Harness
from tests.test_store import wait_for_status


@pytest.fixture(scope="module")
def served(tokenizer: Any, mcp: RunningMcp, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:  # noqa: F811
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    settings = McpSettings(servers={"calc": mcp.url}, allowed_domains=("127.0.0.1",), connect_seconds=5,
                           call_seconds=10)
    context = ServingContext(config=ServerConfig(served_model_name=MODEL, tool_call_parser="hermes", mcp=settings),
                             engine_factory=lambda: engine, ids=counting_ids(),
                             records=sqlite_records(tmp_path_factory.mktemp("timeline") / "responses.db"))
    with serve_in_thread(create_app(context)) as base_url:
        yield Harness(engine, base_url)


def timeline(harness: Harness, response_id: str) -> dict[str, Any]:
    answer = httpx.get(f"{harness.base_url}/responses/{response_id}/timeline", timeout=30)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def names(phases: list[dict[str, Any]]) -> list[str]:
    return [phase["name"] for phase in phases]


def test_a_tool_calling_response_keeps_its_phases_in_order(served: Harness, tokenizer: Any) -> None:
    served.play(script(tokenizer, call_text("calc__add", {"a": 2, "b": 3})), script(tokenizer, "The sum is 5."))
    for stream in (False, True):
        response = served.raw_stream(input="2+3?", tools=[mcp_tool()])[-1]["response"] if stream else \
            served.post(input="2+3?", tools=[mcp_tool()]).json()
        kept = timeline(served, response["id"])
        phases = kept["phases"]
        assert (kept["object"], kept["id"], kept["status"]) == ("response.timeline", response["id"], "completed")
        assert names(phases) == ["received", "prepared", "inference", "first_token", "tool_call", "inference", "ended"]
        call = phases[4]
        assert (call["tool"], call["server"], call["status"]) == ("add", "calc", "completed")
        assert phases[-1]["status"] == "completed"
        moments = [phase.get("at_ms", phase.get("start_ms")) for phase in phases]
        assert moments == sorted(moments) and all(phase["end_ms"] >= phase["start_ms"] for phase in phases
                                                  if "start_ms" in phase)
        assert phases[2]["output_tokens"] + phases[5]["output_tokens"] == response["usage"]["output_tokens"]
        served.play(script(tokenizer, call_text("calc__add", {"a": 2, "b": 3})), script(tokenizer, "The sum is 5."))


def test_a_background_response_keeps_its_timeline_and_an_unknown_one_has_none(served: Harness, tokenizer: Any) -> None:
    served.play(script(tokenizer, "Done in the background."))
    made = served.post(input="Slowly.", background=True).json()
    wait_for_status(served, made["id"], {"completed"})
    assert names(timeline(served, made["id"])["phases"])[-1] == "ended"
    assert httpx.get(f"{served.base_url}/responses/resp_unknown/timeline").status_code == 404
