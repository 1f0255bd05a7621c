"""End to end on a fleet: real vLLM scale-out workers on the CPU build (two of the bundled model, one of the tiny
gpt-oss), the server in front of them with `--fleet`, talked to by the openai SDK, its WebSocket, `responses-server
check` and the real Codex CLI; a model switch mid-chain, a chain on one worker, an abandoned stream, a killed worker,
and vllm-router in front of two workers."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import httpx
import openai
import pytest

from conformance.contract import validate_events
from server.bundled_model import BUNDLED_DEFAULT_MAX_OUTPUT_TOKENS, BUNDLED_MODEL_NAME
from server.engine.remote import WORKER_LOST
from tests.conftest import run_codex
from tests.servers import RunningServer
from tests.sse import events_of, parse_frames
from tests.vllm_workers import VllmRouter, VllmWorker

pytestmark = pytest.mark.e2e
SMOL, OSS = BUNDLED_MODEL_NAME, "gpt-oss-tiny"
SEEDED = {"seed": 7}  # the tiny gpt-oss has random weights: a fixed seed samples the same tokens every run
OSS_WINDOW = 16384  # Codex's prompt (about 5k tokens) fits
# An answer the grammar keeps going past any budget here: the model cannot end it early
LONG_JSON = {"format": {"type": "json_schema", "name": "numbers", "strict": True, "schema": {
    "type": "object", "properties": {"numbers": {"type": "array", "minItems": 500, "items": {"type": "integer"}}},
    "required": ["numbers"], "additionalProperties": False}}}


def fleet_file(path: Path, smol: list[str], oss: list[str], bundled: Path, tiny: Path) -> Path:
    path.write_text(f"""\
health_seconds = 0.5

[[models]]
name = "{SMOL}"
path = "{bundled}"
engines = {json.dumps(smol)}
default_max_output_tokens = {BUNDLED_DEFAULT_MAX_OUTPUT_TOKENS}
sampling_defaults = {{ frequency_penalty = 0.5 }}
""" + (f"""
[[models]]
name = "{OSS}"
path = "{tiny}"
engines = {json.dumps(oss)}
default_max_output_tokens = 256
""" if oss else ""))
    return path


@dataclass
class Fleet:
    smol: list[VllmWorker]
    oss: VllmWorker
    gateway: RunningServer


@pytest.fixture(scope="module")
def fleet(bundled_model: Path, tiny_gpt_oss: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    logs = tmp_path_factory.mktemp("fleet")
    smol = [VllmWorker(bundled_model, SMOL, logs / f"smol-{n}.log", 16384) for n in range(2)]
    # xgrammar's cache confuses harmony's token-only grammars (server/engine/vllm_engine.py): off on its worker
    oss = VllmWorker(tiny_gpt_oss, OSS, logs / "oss.log", OSS_WINDOW,
                     env={"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_XGRAMMAR_CACHE_MB": "0"})
    workers = [*smol, oss]
    try:
        for worker in workers:
            worker.start()
        with ThreadPoolExecutor(len(workers)) as pool:
            list(pool.map(VllmWorker.wait_healthy, workers))
        path = fleet_file(logs / "fleet.toml", [worker.url for worker in smol], [oss.url], bundled_model, tiny_gpt_oss)
        gateway = RunningServer(["--fleet", str(path)], logs / "gateway.log")
        yield Fleet(smol, oss, gateway)
        gateway.stop()
    finally:
        for worker in workers:
            worker.stop()


def _stream(base_url: str, **body: Any) -> list[dict[str, Any]]:
    with httpx.stream("POST", f"{base_url}/responses", json={"stream": True, **body}, timeout=600) as response:
        assert response.status_code == 200, response.read()
        return events_of(parse_frames(response.iter_lines()))


def _served(workers: list[VllmWorker]) -> list[float]:
    return [worker.metric("vllm:request_success_total") for worker in workers]


def _served_since(workers: list[VllmWorker], before: list[float], count: int) -> list[float]:
    """Each worker's requests finished since `before`, once `count` have (a worker records a request's end just
    after its last token has gone out)."""
    deadline = time.monotonic() + 10
    while True:
        since = [after - earlier for after, earlier in zip(_served(workers), before)]
        if sum(since) >= count or time.monotonic() > deadline:
            return since
        time.sleep(0.2)


def _running_on(workers: list[VllmWorker]) -> int:
    """The worker running the one request in flight (its own gauge says so, within a few seconds)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        running = [index for index, worker in enumerate(workers) if worker.metric("vllm:num_requests_running")]
        if running:
            return running[0]
        time.sleep(0.2)
    raise AssertionError("no worker says it runs the request")


def test_every_scenario_passes_for_both_models(fleet: Fleet) -> None:
    """Every scenario on both models, over SSE alone (the transports are the gateway's own code, which the embedded
    servers' checks run on every one, for either path: on the workers, what differs is the engine below)."""
    for model, transports in ((SMOL, ["--transport", "sse"]), (OSS, ["--transport", "sse"])):
        done = subprocess.run([sys.executable, "-m", "server", "check", fleet.gateway.base_url, "--model", model,
                               "--json", "--parallel", "--seed", "7", *transports], capture_output=True, text=True,
                              timeout=1200)
        report = json.loads(done.stdout)
        failures = [result for result in report["results"] if not result["passed"]]
        assert not failures, (model, json.dumps(failures, indent=1))
        assert report["passed"] >= (40 if not transports else 14) and done.returncode == 0


def test_every_constrained_output_closes_within_its_budget_on_the_workers(fleet: Fleet) -> None:
    """The grammars run on the workers (structured outputs over the scale-out API) and close as on the embedded
    engine: every JSON answer and call parses and validates, at small budgets, on both models."""
    from tests.e2e_one_server.test_e2e_requests import check_constrained_outputs_close

    check_constrained_outputs_close(fleet.gateway.base_url, SMOL)
    check_constrained_outputs_close(fleet.gateway.base_url, OSS, custom_grammar=True)


def test_both_models_listed_and_streamed_through_the_strict_sdk_and_the_websocket(fleet: Fleet) -> None:
    client = fleet.gateway.client
    assert [model.id for model in client.models.list()] == [SMOL, OSS]
    assert client.models.retrieve(OSS).id == OSS
    for model in (SMOL, OSS):
        with client.responses.stream(model=model, input="What is the capital of France?", max_output_tokens=48,
                                     extra_body=SEEDED) as stream:
            events = list(stream)
        assert events[-1].type in ("response.completed", "response.incomplete")
        with client.responses.connect() as socket:
            socket.response.create(model=model, input="Hello!", max_output_tokens=24)
            kinds = []
            for event in socket:
                kinds.append(event.type)
                if event.type in ("response.completed", "response.incomplete", "response.failed", "error"):
                    break
        assert kinds[0] == "response.created" and kinds[-1] in ("response.completed", "response.incomplete"), kinds


def test_a_chain_switches_models_and_each_turn_stays_on_one_worker(fleet: Fleet) -> None:
    """SmolLM2, then the tiny gpt-oss, then SmolLM2 again, one chain: each model reads the history as its path renders
    it (gpt-oss's reasoning is dropped for SmolLM2: docs/fleet.md). The SmolLM2 turns run on one worker, and the
    third finds the first's prefix in that worker's cache."""
    before = _served(fleet.smol)
    first = validate_events(_stream(fleet.gateway.base_url, model=SMOL, input="Name a city in France. " * 30,
                                    max_output_tokens=16))
    second = validate_events(_stream(fleet.gateway.base_url, model=OSS, input="And one in Italy?",
                                     previous_response_id=first.id, max_output_tokens=64, **SEEDED))
    assert second.model == OSS and second.status in ("completed", "incomplete")
    third = validate_events(_stream(fleet.gateway.base_url, model=SMOL, input="And one in Spain?",
                                    previous_response_id=second.id, max_output_tokens=16))
    assert third.status in ("completed", "incomplete") and third.model == SMOL
    assert sorted(_served_since(fleet.smol, before, 2)) == [0, 2]  # one worker ran both turns
    assert third.usage is not None and third.usage.input_tokens_details.cached_tokens > 0


def test_an_abandoned_stream_leaves_no_request_running_on_any_worker(fleet: Fleet) -> None:
    with httpx.stream("POST", f"{fleet.gateway.base_url}/responses", timeout=600,
                      json={"model": SMOL, "input": "Count from 1 to 1000.", "stream": True, "text": LONG_JSON,
                            "max_output_tokens": 400}) as response:
        deltas = 0
        for line in response.iter_lines():
            deltas += line.startswith("event: response.output_text.delta")
            if deltas >= 3:
                _running_on(fleet.smol)  # it runs on a worker now
                break  # the client goes away
    workers = [*fleet.smol, fleet.oss]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(worker.metric("vllm:num_requests_running") for worker in workers):
        time.sleep(0.5)
    assert not any(worker.metric("vllm:num_requests_running") for worker in workers)


def _long_stream(base_url: str, **body: Any) -> str:
    """A JSON answer the grammar keeps going to its budget; its final status."""
    events = _stream(base_url, **{"model": SMOL, "input": "Count from 1 to 1000.", "text": LONG_JSON, **body})
    return events[-1]["response"]["status"]


def test_a_stateless_session_without_a_key_keeps_its_worker_while_the_other_is_idle(fleet: Fleet) -> None:
    """A client that stores nothing and sends no `prompt_cache_key` (as Codex with `store: false`): each turn sends
    the same instructions and first message again, and finds the worker that holds them though the other worker is
    idle and this one is busy with the session's own long stream."""
    instructions = "You are a terse assistant of session 3b7e."  # the session's own: no other test's prefix
    history: list[Any] = [{"role": "user", "content": "Name a city in France. " * 20}]
    before = _served(fleet.smol)
    first = fleet.gateway.client.responses.create(model=SMOL, instructions=instructions, input=history, store=False,
                                                  max_output_tokens=8, temperature=0)
    with ThreadPoolExecutor(1) as pool:
        busy = pool.submit(_long_stream, fleet.gateway.base_url, instructions=instructions, input=history,
                           store=False, max_output_tokens=96)
        _running_on(fleet.smol)  # the session's worker is busy now, the other idle
        history += [{"role": "assistant", "content": first.output_text or "Paris."},
                    {"role": "user", "content": "And one in Spain?"}]
        second = fleet.gateway.client.responses.create(model=SMOL, instructions=instructions, input=history,
                                                       store=False, max_output_tokens=8, temperature=0)
        assert busy.result() in ("completed", "incomplete")
    assert sorted(_served_since(fleet.smol, before, 3)) == [0, 3]  # all three on the one worker
    assert second.usage is not None and second.usage.input_tokens_details.cached_tokens > 0


def test_a_hot_key_spills_to_the_next_worker_and_a_cap_queues_the_rest(
        fleet: Fleet, bundled_model: Path, tiny_gpt_oss: Path, tmp_path: Path) -> None:
    """A second gateway over the two real workers, with a tight load bound: two streams of one `prompt_cache_key` at
    once run one on each worker (rendezvous with bounded load), where with no bound both run on the key's worker.
    Then with `max_running_per_worker = 1` (read again on SIGHUP), three at once: no worker ever runs two, the
    third waits in the gateway's queue, and every one completes."""
    path = fleet_file(tmp_path / "fleet.toml", [worker.url for worker in fleet.smol], [], bundled_model, tiny_gpt_oss)
    path.write_text("load_bound = 1\nload_slack = 1\n" + path.read_text())
    gateway = RunningServer(["--fleet", str(path)], tmp_path / "gateway.log")
    try:
        before = _served(fleet.smol)
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(_long_stream, gateway.base_url, prompt_cache_key="hot", max_output_tokens=64)
            _running_on(fleet.smol)  # the key's worker runs it: the next of the same key finds it busy
            second = pool.submit(_long_stream, gateway.base_url, prompt_cache_key="hot", max_output_tokens=64)
            assert [first.result(), second.result()] == ["incomplete", "incomplete"]
        assert _served_since(fleet.smol, before, 2) == [1, 1]

        path.write_text("max_running_per_worker = 1\n" + path.read_text())
        gateway.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while "read again" not in gateway.log.read_text() and time.monotonic() < deadline:
            time.sleep(0.5)
        before = _served(fleet.smol)
        most = 0
        with ThreadPoolExecutor(3) as pool:
            runs = [pool.submit(_long_stream, gateway.base_url, prompt_cache_key="hot", max_output_tokens=64)
                    for _ in range(3)]
            while not all(run.done() for run in runs):
                most = max(most, *(worker.metric("vllm:num_requests_running") for worker in fleet.smol))
                time.sleep(0.1)
            assert [run.result() for run in runs] == ["incomplete"] * 3
        assert most == 1 and sorted(_served_since(fleet.smol, before, 3)) == [1, 2]
    finally:
        gateway.stop()


def test_a_batch_runs_behind_interactive_work_spread_over_the_workers(fleet: Fleet) -> None:
    """A batch on the gateway: its lines (each its own placement) spread over the model's two workers, sent at the
    batch priority, every one answered once in the output file."""
    import io

    client = fleet.gateway.client
    lines = "".join(json.dumps({"custom_id": f"b{n}", "method": "POST", "url": "/v1/responses",
                                "body": {"model": SMOL, "input": f"Name the number {n}.", "max_output_tokens": 4,
                                         "store": False}}) + "\n" for n in range(8))
    before = _served(fleet.smol)
    file_id = client.files.create(file=("lines.jsonl", io.BytesIO(lines.encode())), purpose="batch").id
    batch = client.batches.create(input_file_id=file_id, endpoint="/v1/responses", completion_window="24h")
    deadline = time.monotonic() + 300
    while (done := client.batches.retrieve(batch.id)).status not in ("completed", "failed"):
        assert time.monotonic() < deadline, done
        time.sleep(0.5)
    assert done.status == "completed" and done.request_counts is not None and done.request_counts.completed == 8
    output = client.files.content(done.output_file_id or "").text.splitlines()
    assert sorted(json.loads(line)["custom_id"] for line in output) == sorted(f"b{n}" for n in range(8))
    assert all(count >= 1 for count in _served_since(fleet.smol, before, 8))  # both workers ran some


def test_codex_runs_a_turn_on_the_fleet(fleet: Fleet, codex: Path, tmp_path: Path) -> None:
    run = run_codex(codex, fleet.gateway.base_url, SMOL, tmp_path, "Say hello in one word.", catalog=True)
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    kinds = [event["type"] for event in events]
    assert run.returncode == 0 and "turn.completed" in kinds, run.stdout[-3000:] + run.stderr[-2000:]
    assert "metadata" not in run.stdout + run.stderr  # it read the fleet's catalog
    catalog = httpx.get(f"{fleet.gateway.base_url}/models", params={"client_version": "0.171.0"}).json()
    windows = {entry["slug"]: entry["context_window"] for entry in catalog["models"]}
    assert windows == {SMOL: 16384, OSS: OSS_WINDOW}  # each model's window, from its workers


def test_codex_on_the_gpt_oss_worker_has_every_request_accepted(fleet: Fleet, codex: Path, tmp_path: Path) -> None:
    """Random weights never finish a turn, so Codex ends on the server's honest `incomplete`; every request it made
    on the way (its items sent back after each of the model's calls) was accepted, and its turn ends as Codex says."""
    log = fleet.gateway.log.read_text()
    run = run_codex(codex, fleet.gateway.base_url, OSS, tmp_path, "List the files here, then count them.",
                    "--dangerously-bypass-approvals-and-sandbox", catalog=True)
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    ended = [event for event in events if event["type"] in ("turn.completed", "turn.failed")]
    assert ended, run.stdout[-3000:] + run.stderr[-2000:]
    assert ended[-1]["type"] == "turn.completed" or "max_output_tokens" in json.dumps(ended[-1]), ended[-1]
    answered = re.findall(r'"POST /v1/responses HTTP/1.1" (\d+)', fleet.gateway.log.read_text()[len(log):])
    assert answered and set(answered) == {"200"}, answered


def test_vllm_router_in_front_of_two_workers(fleet: Fleet, bundled_model: Path, tiny_gpt_oss: Path,
                                             tmp_path: Path) -> None:
    """The fleet's own router: `engines` names its one URL; the gateway sees one engine, the router spreads."""
    router = VllmRouter([worker.url for worker in fleet.smol], tmp_path / "router.log")
    try:
        path = fleet_file(tmp_path / "fleet.toml", [router.url], [], bundled_model, tiny_gpt_oss)
        gateway = RunningServer(["--fleet", str(path)], tmp_path / "gateway.log")
        try:
            before = _served(fleet.smol)
            for _ in range(4):
                final = validate_events(_stream(gateway.base_url, model=SMOL, input="Hi!", max_output_tokens=8))
                assert final.status in ("completed", "incomplete")
            # the workers behind the one URL ran them (which one ran each is the router's: its round robin also
            # counts the gateway's health and load reads)
            assert sum(_served_since(fleet.smol, before, 4)) == 4
        finally:
            gateway.stop()
    finally:
        router.stop()


def _gateway_metric(gateway: RunningServer, name: str, **labels: str) -> float:
    text = httpx.get(f"{gateway.base_url.removesuffix('/v1')}/metrics", timeout=10).text
    total = 0.0
    for found in re.finditer(rf"^{re.escape(name)}{{([^}}]*)}} (\S+)$", text, re.M):
        if all(f'{key}="{value}"' in found.group(1) for key, value in labels.items()):
            total += float(found.group(2))
    return total


def test_faults_between_the_gateway_and_real_workers_retry_eject_and_move_streams_through_the_sdk(
        fleet: Fleet, bundled_model: Path, tiny_gpt_oss: Path, tmp_path: Path) -> None:
    """A second gateway reaches the two real workers through fault proxies, talked to by the strict openai SDK:
    a worker answering 503 (a router with no room) costs no turn (each goes to the peer) and is ejected, and when the
    other answers 503 too the client gets a 503 before any event; a worker cut
    off mid-stream (a black hole) has its stream go on on the peer; the fleet file changed and SIGHUP moves every
    turn to the worker it names; a gateway whose `path` is another model's is refused at start, naming the fix."""
    from contextlib import contextmanager

    from tests.fault_proxy import fault_proxy

    with contextmanager(fault_proxy)(fleet.smol[0].port) as first, contextmanager(fault_proxy)(
            fleet.smol[1].port) as second:
        proxies = [first, second]
        path = fleet_file(tmp_path / "fleet.toml", [proxy.url for proxy in proxies], [], bundled_model, tiny_gpt_oss)
        gateway = RunningServer(["--fleet", str(path)], tmp_path / "gateway.log")
        try:
            client = gateway.client
            first.set("status_503")
            for n in range(40):  # until three turns in a row have met the 503s (keys spread at random)
                answer = client.responses.create(model=SMOL, input="Hi!", max_output_tokens=4,
                                                 prompt_cache_key=f"k{n}", store=False)
                assert answer.status in ("completed", "incomplete")
                if _gateway_metric(gateway, "responses_server_engine_worker_ejections_total"):
                    break
            assert _gateway_metric(gateway, "responses_server_engine_retries_total", reason="status") >= 3
            assert _gateway_metric(gateway, "responses_server_engine_worker_ejections_total") == 1
            second.set("status_503")  # and now the other too: no worker takes a turn, which is the client's 503
            with pytest.raises(openai.APIStatusError) as refused:
                client.with_options(max_retries=0).responses.create(model=SMOL, input="Hi!", max_output_tokens=4,
                                                                    stream=True)
            assert refused.value.status_code == 503 and refused.value.response.headers["retry-after"]
            second.set("pass")
            first.set("pass")
            seen, kinds = "", []
            with client.responses.create(model=SMOL, input="Count from 1 to 1000.", max_output_tokens=120,
                                         temperature=0, stream=True) as stream:
                for event in stream:
                    kinds.append(event.type)
                    if event.type == "response.output_text.delta" and kinds.count(event.type) <= 3:
                        seen += event.delta  # what the client had when its worker was cut off
                        if kinds.count(event.type) == 3:
                            proxies[_running_on(fleet.smol)].set("black_hole")
                    final = getattr(event, "response", None)
            assert kinds[-1] in ("response.completed", "response.incomplete"), kinds[-3:]
            assert final is not None and final.output_text.startswith(seen) and len(final.output_text) > len(seen)
            assert _gateway_metric(gateway, "responses_server_engine_streams_moved_total", outcome="resume") == 1
            for proxy in proxies:
                proxy.set("pass")
            path.write_text(path.read_text().replace(json.dumps([first.url, second.url]), json.dumps([second.url])))
            gateway.process.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 30
            while 'responses_server_engine_workers{model="' + SMOL + '"} 1.0' not in httpx.get(
                    f"{gateway.base_url.removesuffix('/v1')}/metrics").text and time.monotonic() < deadline:
                time.sleep(0.5)
            _wait_for_workers_up(gateway, 1)  # the worker the file names, back once its /health answers (if cut off)
            deadline = time.monotonic() + 60
            while any(worker.metric("vllm:num_requests_running") for worker in fleet.smol) and \
                    time.monotonic() < deadline:
                time.sleep(0.5)  # the stream cut off is aborted on its worker once the proxy passes again
            before = _served(fleet.smol)
            for n in range(4):
                client.responses.create(model=SMOL, input="Hi!", max_output_tokens=4, prompt_cache_key=f"j{n}")
            assert _served_since(fleet.smol, before, 4) == [0, 4]  # the one worker the file names now
        finally:
            gateway.stop()
    wrong = fleet_file(tmp_path / "wrong.toml", [fleet.smol[0].url], [], tiny_gpt_oss, tiny_gpt_oss)
    with pytest.raises(RuntimeError, match="tokenizes otherwise than the gateway's `path`"):
        RunningServer(["--fleet", str(wrong)], tmp_path / "wrong.log")


def _streamed_through(base_url: str, fault: Any, **body: Any) -> tuple[list[dict[str, Any]], str]:
    """A stream with `fault(home)` done to its worker once three deltas are out; its events and the text the client
    had seen by then."""
    events: list[dict[str, Any]] = []
    seen = ""
    with httpx.stream("POST", f"{base_url}/responses", timeout=600, json={"stream": True, **body}) as response:
        for line in response.iter_lines():  # as it arrives
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
                if sum(event["type"] == "response.output_text.delta" for event in events) == 3 and not seen:
                    seen = "".join(event["delta"] for event in events if event["type"] == "response.output_text.delta")
                    fault()
    return events, seen


def _resumed_on_the_peer(fleet: Fleet, fault: str) -> None:
    client = fleet.gateway.client
    counting = {"model": SMOL, "input": "Count from 1 to 1000.", "max_output_tokens": 160, "temperature": 0}
    home: list[int] = []

    def strike() -> None:
        home.append(_running_on(fleet.smol))
        worker = fleet.smol[home[0]]
        worker.kill() if fault == "kill" else worker.pause(True)

    try:
        events, seen = _streamed_through(fleet.gateway.base_url, strike, **counting)
    finally:
        if fault == "stop":
            for worker in fleet.smol:
                worker.pause(False)
    final = validate_events(events)  # one stream: sequence numbers whole, one terminal event, the SDK's types
    assert events[-1]["type"] in ("response.completed", "response.incomplete"), events[-1]
    assert final.output_text.startswith(seen) and len(final.output_text) > len(seen)
    assert final.usage is not None and final.usage.output_tokens <= 160
    stored = client.responses.retrieve(final.id)
    assert stored.status == final.status and stored.output_text == final.output_text  # what the client was told


def _workers_up(gateway: RunningServer) -> float:
    """The gateway's own count of the bundled model's workers in rotation."""
    text = httpx.get(f"{gateway.base_url.removesuffix('/v1')}/metrics", timeout=10).text
    found = re.search(rf'^responses_server_engine_workers_up{{model="{re.escape(SMOL)}"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else -1.0


def _wait_for_workers_up(gateway: RunningServer, count: int) -> None:
    deadline = time.monotonic() + 120
    while _workers_up(gateway) != count and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _workers_up(gateway) == count


def test_a_stopped_worker_hands_its_stream_to_its_peer(fleet: Fleet) -> None:
    """SIGSTOP mid-stream (connections open, nothing answers): its silence is found (its health checks time out)
    and the peer goes on from the tokens already generated; the text seen before is a prefix of the final text.
    Then it is let go again, and comes back into rotation."""
    _resumed_on_the_peer(fleet, "stop")
    _wait_for_workers_up(fleet.gateway, 2)


def test_a_constrained_stream_whose_worker_stops_ends_failed_as_the_client_was_told(fleet: Fleet) -> None:
    """A JSON schema's grammar cannot be restated on a peer from tokens in its prompt: once output went out, the
    response ends failed (stored, one terminal event, an engine failure)."""
    home: list[int] = []

    def strike() -> None:
        home.append(_running_on(fleet.smol))
        fleet.smol[home[0]].pause(True)

    try:
        events, _ = _streamed_through(fleet.gateway.base_url, strike, model=SMOL, input="Count from 1 to 1000.",
                                      text=LONG_JSON, max_output_tokens=400)
    finally:
        for worker in fleet.smol:
            worker.pause(False)
    final = validate_events(events)
    assert events[-1]["type"] == "response.failed" and final.error is not None and final.error.message == WORKER_LOST
    stored = fleet.gateway.client.responses.retrieve(final.id)
    assert stored.status == "failed" and stored.error is not None and stored.error.message == WORKER_LOST
    _wait_for_workers_up(fleet.gateway, 2)


def test_a_killed_worker_hands_its_stream_to_its_peer_then_a_model_with_none_is_503(fleet: Fleet) -> None:
    """Last: it kills workers. An unconstrained stream whose worker is killed ends on the peer as one stream, and
    the model's turns go to the peer; with the gpt-oss worker killed too, a request for that model is a 503 the
    client may retry."""
    _resumed_on_the_peer(fleet, "kill")
    for _ in range(3):
        turn = validate_events(_stream(fleet.gateway.base_url, model=SMOL, input="Again", max_output_tokens=8))
        assert turn.status in ("completed", "incomplete")
    fleet.oss.kill()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        answer = httpx.post(f"{fleet.gateway.base_url}/responses", json={"model": OSS, "input": "hi"}, timeout=60)
        if answer.status_code == 503:
            break
        time.sleep(0.5)
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "engine_unavailable"
