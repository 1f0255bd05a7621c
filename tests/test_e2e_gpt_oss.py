"""End to end on gpt-oss: the tiny gpt-oss (random weights, the real architecture and o200k_harmony, built by
tests/tiny_gpt_oss.py) on the real CPU engine, through the harmony path, served by two API processes. `responses-server
check` runs every scenario on HTTP, SSE and WebSocket, with content forced by grammars where it matters; then what
the scenarios cannot show: hosted tools, and a shutdown that leaves no engine process behind."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import psutil
import pytest

from parsers.harmony import HarmonyTokens
from server.engine.recording import read_recordings
from server.paths.harmony import harmony_encoding
from tests.mcp_servers import serve_browser, serve_mcp
from tests.servers import RunningServer

pytestmark = pytest.mark.e2e
MODEL = "gpt-oss"
ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}  # GiB; the tiny model needs little
SEEDED = {"seed": 7}  # random weights sample from a fixed sequence: the same tokens every run


def _serve(checkpoint: Path, log: Path, *flags: str) -> RunningServer:
    return RunningServer(["--model", str(checkpoint), "--served-model-name", MODEL, "--max-model-len", "4096",
                          *flags], log, env=ENGINE_ENV)


@pytest.fixture(scope="module")
def gpt_oss(tiny_gpt_oss: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("logs") / "gpt-oss.log"
    with serve_browser() as browser:  # two API processes in front of the engine, as a busy deployment runs it
        running = _serve(tiny_gpt_oss, log, "--record-engine-output", str(log.parent / "engine.jsonl"),
                         "--allowed-mcp-domains", "127.0.0.1", "--tool-server", f"browser={browser.url}",
                         "--api-server-count", "2", "--shutdown-timeout", "2")  # the last test stops it mid-story
        yield running
        running.stop()


def run_check(base_url: str, *flags: str) -> dict[str, Any]:
    """`responses-server check URL --json --parallel`, as a user runs it (each scenario on its transports at once)."""
    done = subprocess.run([sys.executable, "-m", "server", "check", base_url, "--json", "--parallel", "--seed", "7",
                           *flags],
                          capture_output=True, text=True, timeout=1200)
    report = json.loads(done.stdout)
    failures = [r for r in report["results"] if not r["passed"]]
    assert done.returncode == (1 if failures else 0), done.stderr[-2000:]
    assert not failures, json.dumps(failures, indent=1)
    return report


def test_every_scenario_passes_on_every_transport(gpt_oss: RunningServer) -> None:
    report = run_check(gpt_oss.base_url)
    ran = {(r["scenario"], r["transport"]) for r in report["results"]}
    for transport in ("http", "sse", "websocket"):  # the tool-after-JSON failure, in both orders, one server
        assert {("tool_after_json", transport), ("json_after_tool", transport)} <= ran
    assert ("warmup_then_turn", "websocket") in ran and ("background_cancel", "http") in ran
    assert report["passed"] >= 40
    outputs = [token for recording in read_recordings(gpt_oss.log.parent / "engine.jsonl")
               for step in recording.steps for token in step]
    banned = set(HarmonyTokens.of(harmony_encoding()).banned())
    assert outputs and not banned & set(outputs), "a reserved token was sampled"


def test_a_forced_mcp_call_on_the_tiny_gpt_oss(gpt_oss: RunningServer) -> None:
    """The harmony path on the real engine: the grammar holds the call to the MCP tool, the server runs it on a real
    MCP server, and a second engine pass continues from its output (random weights: the answer is noise)."""
    with serve_mcp() as mcp:
        response = gpt_oss.client.responses.create(
            # 256: room for reasoning and a call whose integers take all their 16 digits (96 failed when the
            # random weights reasoned at length and then wrote long numbers: the call was cut by the budget)
            model=MODEL, input="Add 2 and 3.", max_output_tokens=256, tool_choice={"type": "mcp", "server_label": "calc",
                                                                                    "name": "add"},
            tools=[{"type": "mcp", "server_label": "calc", "server_url": mcp.url, "require_approval": "never"}],
            extra_body=SEEDED)
    kinds = [item.type for item in response.output]
    assert kinds[0] == "mcp_list_tools" and "mcp_call" in kinds, kinds
    call = response.output[kinds.index("mcp_call")]
    arguments = json.loads(call.arguments)  # type: ignore[union-attr]
    assert call.output == str(arguments["a"] + arguments["b"]), call  # type: ignore[union-attr]
    passes = [r for r in read_recordings(gpt_oss.log.parent / "engine.jsonl")][-2:]
    assert passes[1].prompt_token_ids[:len(passes[0].prompt_token_ids)] == passes[0].prompt_token_ids, \
        "the second pass extends the first pass's prompt (its prefix is cached)"
    encoding = harmony_encoding()
    assert "namespace calc" in encoding.decode(passes[0].prompt_token_ids), "the server's tools are a namespace"
    assert "to=calc.add" in encoding.decode([token for step in passes[0].steps for token in step])


def test_a_forced_web_search_on_the_tiny_gpt_oss(gpt_oss: RunningServer) -> None:
    """gpt-oss's own browser: in the system message as it was trained, its call held by the grammar, run on the
    operator's browser tool server."""
    response = gpt_oss.client.responses.create(model=MODEL, input="Search for harmony.", max_output_tokens=256,
                                               tools=[{"type": "web_search"}], tool_choice={"type": "web_search"},
                                               extra_body=SEEDED)
    searches = [item for item in response.output if item.type == "web_search_call"]
    assert searches and searches[0].status == "completed", response.output
    recording = [r for r in read_recordings(gpt_oss.log.parent / "engine.jsonl")][-2]
    encoding = harmony_encoding()
    assert "namespace browser" in encoding.decode(recording.prompt_token_ids).split("<|start|>developer")[0]
    assert "to=browser." in encoding.decode([token for step in recording.steps for token in step])


def test_every_constrained_output_closes_within_its_budget_on_the_tiny_gpt_oss(gpt_oss: RunningServer) -> None:
    """As on the bundled model (tests/e2e_one_server): at temperature 1.0, small budgets, fixed seeds, random
    weights, every JSON answer and call (reasoning first, then the final message or the call) parses, validates and
    is complete."""
    from tests.e2e_one_server.test_e2e_requests import check_constrained_outputs_close

    check_constrained_outputs_close(gpt_oss.base_url, MODEL, custom_grammar=True)


def test_a_forced_tool_search_on_the_tiny_gpt_oss(gpt_oss: RunningServer) -> None:
    """The harmony path: deferred tools out of the developer message, `functions.tool_search` called under the
    grammar, the search run by the server (by words: this server has no vector stores), a second pass after it."""
    from tests.test_tool_search import TOOLS, WEATHER_MARK

    response = gpt_oss.client.responses.create(model=MODEL, input="What is the weather?", max_output_tokens=256,
                                               tools=TOOLS, tool_choice={"type": "tool_search"},  # type: ignore[arg-type]
                                               extra_body=SEEDED)
    kinds = [item.type for item in response.output]
    assert kinds[:2] == ["tool_search_call", "tool_search_output"] or \
        kinds[1:3] == ["tool_search_call", "tool_search_output"], kinds  # (after its reasoning)
    call = response.output[kinds.index("tool_search_call")]
    assert call.execution == "server" and call.status == "completed", call  # type: ignore[union-attr]
    recording = [r for r in read_recordings(gpt_oss.log.parent / "engine.jsonl")][-2]
    prompt = harmony_encoding().decode(recording.prompt_token_ids)
    assert "tool_search" in prompt and WEATHER_MARK not in prompt


def test_a_shutdown_mid_generation_leaves_no_engine_process(gpt_oss: RunningServer) -> None:
    """After SIGTERM a VLLM::Worker once kept using CPU for two minutes; every process the server started must end
    with it (bounded by a count of polls, not by a time the test asserts). Last in the module: it stops the server."""
    server = gpt_oss
    children = psutil.Process(server.process.pid).children(recursive=True)
    assert children, "the engine runs in processes of its own"
    body = {"model": MODEL, "input": "Write a long story.", "max_output_tokens": 3000, "stream": True}
    reading = threading.Thread(target=_read_quietly, args=(server.base_url, body), daemon=True)
    reading.start()
    time.sleep(2)  # the request is generating
    server.stop()
    alive = children
    for _ in range(120):
        alive = [child for child in alive if child.is_running() and child.status() != psutil.STATUS_ZOMBIE]
        if not alive:
            break
        time.sleep(0.5)
    assert not alive, f"left running: {[(child.pid, child.name()) for child in alive]}"


def _read_quietly(base_url: str, body: dict[str, Any]) -> None:
    try:
        with httpx.stream("POST", f"{base_url}/responses", json=body, timeout=60) as response:
            for _ in response.iter_lines():
                pass
    except httpx.HTTPError:
        pass

