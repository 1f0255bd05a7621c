"""End to end: `responses-server` as a subprocess on the real CPU engine with the bundled model, real clients."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from openai import AsyncOpenAI

from conformance.contract import validate_events
from server.bundled_model import BUNDLED_SAMPLING_DEFAULTS
from server.engine.recording import read_recordings
from tests.conftest import run_codex
from tests.helpers import collapsed_types, without_volatile
from tests.servers import MODEL, QUESTION, RunningServer

pytestmark = pytest.mark.e2e


def test_sdk_streams_a_real_answer(live: RunningServer) -> None:
    stream = live.client.responses.create(model=MODEL, input=QUESTION, stream=True, temperature=0)
    events = list(stream)  # strict validation: every event parses as the SDK's model
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert "Paris" in text
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_sdk_stream_helper_accumulates(live: RunningServer) -> None:
    with live.client.responses.stream(model=MODEL, input=QUESTION, temperature=0) as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    assert "Paris" in final.output_text
    assert final.usage is not None and final.usage.output_tokens > 0 and final.usage.input_tokens > 10


def test_raw_sse_follows_the_contract(live: RunningServer) -> None:
    events = live.raw_stream(input=QUESTION, temperature=0)
    final = validate_events(events)
    assert final.status == "completed" and "Paris" in final.output_text


def test_truncation_is_incomplete(live: RunningServer) -> None:
    events = live.raw_stream(input="Write a long story about a dragon.", max_output_tokens=5)
    final = validate_events(events)
    assert events[-1]["type"] == "response.incomplete"
    assert final.usage is not None and final.usage.output_tokens == 5


def test_non_streaming_matches_streaming(live: RunningServer) -> None:
    body = live.client.responses.create(model=MODEL, input=QUESTION, temperature=0)
    events = live.raw_stream(input=QUESTION, temperature=0)
    assert body.output_text == events[-1]["response"]["output"][0]["content"][0]["text"]


def test_openai_agents_run_streamed(live: RunningServer) -> None:
    from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, set_tracing_disabled

    set_tracing_disabled(True)

    async def run() -> tuple[Any, list[str]]:
        client = AsyncOpenAI(base_url=live.base_url, api_key="unused", max_retries=0)
        agent = Agent(name="assistant", instructions="Answer in one short sentence.",
                      model=OpenAIResponsesModel(model=MODEL, openai_client=client),
                      model_settings=ModelSettings(temperature=0))  # greedy: the SDK raises on incomplete
        result = Runner.run_streamed(agent, QUESTION, max_turns=1)
        kinds = [event.type async for event in result.stream_events()]
        return result.final_output, kinds

    final_output, kinds = asyncio.run(run())
    assert isinstance(final_output, str) and final_output.strip()
    assert "raw_response_event" in kinds


def test_record_then_replay_gives_the_same_events(live: RunningServer, recording_file: Path,
                                                  bundled_model: Path, tmp_path: Path) -> None:
    recorded = live.raw_stream(input="Name three colors.", temperature=0, max_output_tokens=24)
    last = read_recordings(recording_file)[-1]
    assert sum(len(step) for step in last.steps) == recorded[-1]["response"]["usage"]["output_tokens"]
    single = tmp_path / "one.jsonl"
    single.write_text(last.to_json() + "\n")
    replay = replaying(bundled_model, single, tmp_path / "replay.log")
    try:
        replayed = replay.raw_stream(input="Name three colors.", temperature=0, max_output_tokens=24)
    finally:
        replay.stop()
    validate_events(replayed)
    assert collapsed_types(replayed) == collapsed_types(recorded)
    assert [e.get("delta") for e in replayed] == [e.get("delta") for e in recorded]
    assert without_volatile(replayed[-1]["response"]) == without_volatile(recorded[-1]["response"])


def replaying(bundled_model: Path, recordings: Path, log: Path, data_dir: Path | None = None) -> RunningServer:
    """A server that serves the bundled model as `live` does, its engine replaced by `recordings` (in turn,
    whatever the prompt): it starts in seconds, not a minute."""
    return RunningServer(["--model", str(bundled_model), "--served-model-name", MODEL,
                          "--sampling-defaults", json.dumps(BUNDLED_SAMPLING_DEFAULTS),
                          "--replay-engine-output", str(recordings)], log, data_dir=data_dir)


def test_codex_exec_text_turn_completes(live: RunningServer, codex: Path, tmp_path: Path) -> None:
    """Codex configured as the README shows it, its key from a command: it reads the server's catalog (so it knows
    the window) and says nothing of missing model metadata."""
    run = run_codex(codex, live.base_url, MODEL, tmp_path, "Say hello in one word.", catalog=True)
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    kinds = [event["type"] for event in events]
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "metadata" not in run.stdout + run.stderr, run.stdout[-2000:] + run.stderr[-2000:]
    assert "refresh available models" not in run.stderr, run.stderr[-2000:]  # the catalog was fetched and read
    assert "turn.completed" in kinds and "turn.failed" not in kinds, run.stdout[-2000:]
    usage = next(event["usage"] for event in events if event["type"] == "turn.completed")
    assert usage["input_tokens"] > 1000 and usage["output_tokens"] > 0  # Codex's prompt fits the context
    assert any(event.get("item", {}).get("type") == "agent_message" for event in events)


def test_logprobs_and_prefix_cache_usage(live: RunningServer) -> None:
    events = live.raw_stream(input=QUESTION, temperature=0, max_output_tokens=4,
                             include=["message.output_text.logprobs"], top_logprobs=2)
    validate_events(events)
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    logprobs = [lp for d in deltas for lp in d["logprobs"]]
    assert len(logprobs) == 4 and all(len(lp["top_logprobs"]) == 2 for lp in logprobs)
    assert all(lp["logprob"] <= 0 for lp in logprobs)
    long_prompt = "Tell me about Paris. " * 150  # several KV-cache blocks
    first = live.client.responses.create(model=MODEL, input=long_prompt, max_output_tokens=2)
    second = live.client.responses.create(model=MODEL, input=long_prompt, max_output_tokens=2)
    assert first.usage is not None and second.usage is not None
    assert second.usage.input_tokens_details.cached_tokens > 0



def test_three_turns_across_a_restart(live: RunningServer, recording_file: Path, bundled_model: Path,
                                      tmp_path: Path) -> None:
    """previous_response_id on the real engine, a function call and its output in the middle, and a restart on the
    same data (the restarted server replays recorded engine output: what is tested is what it reads back)."""
    tools: Any = [{"type": "function", "name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}]
    first = live.client.responses.create(model=MODEL, input=QUESTION, temperature=0, max_output_tokens=16)
    second = live.client.responses.create(
        model=MODEL, previous_response_id=first.id, temperature=0, max_output_tokens=16, tools=tools,
        input=[{"type": "function_call", "call_id": "call_e2e", "name": "get_weather",  # type: ignore[list-item]
                "arguments": '{"city": "Paris"}'},
               {"type": "function_call_output", "call_id": "call_e2e", "output": "sunny"}])
    assert second.usage is not None and first.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens  # the first turn is in the prompt
    restarted = replaying(bundled_model, recording_file, tmp_path / "restarted.log", data_dir=live.data_dir)
    try:
        assert restarted.client.responses.retrieve(first.id).output_text == first.output_text
        third = restarted.client.responses.create(model=MODEL, previous_response_id=second.id, tools=tools,
                                                  input="Thanks!", temperature=0, max_output_tokens=8)
        assert third.status in ("completed", "incomplete")
        assert third.usage is not None and third.usage.input_tokens > second.usage.input_tokens
        items = restarted.client.responses.input_items.list(second.id, order="asc")
        assert [item.type for item in items.data] == ["function_call", "function_call_output"]
    finally:
        restarted.stop()


def test_metrics_show_ours_and_vllms(live: RunningServer) -> None:
    """vLLM's metrics count what the engine did (its stat logger skips only the writes that change nothing), in a
    JSON answer (its output asked for whole) and while a stream runs."""
    before = _vllm_metrics(live)
    answer = live.client.responses.create(model=MODEL, input=QUESTION, temperature=0, max_output_tokens=8)
    text = httpx.get(f"http://127.0.0.1:{live.port}/metrics", timeout=10).text
    ours = [line for line in text.splitlines() if line.startswith("responses_server_responses_total{")]
    assert ours and all(float(line.rsplit(" ", 1)[1]) >= 1 for line in ours)
    assert "vllm:time_to_first_token_seconds_bucket" in text
    after = _vllm_metrics(live)
    assert answer.usage is not None
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] == answer.usage.output_tokens
    assert after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"] == answer.usage.input_tokens
    assert after["vllm:request_success_total"] - before["vllm:request_success_total"] == 1
    assert after["vllm:num_requests_running"] == 0
    with httpx.stream("POST", f"{live.base_url}/responses", timeout=300, json={
            "model": MODEL, "input": QUESTION, "stream": True, "max_output_tokens": 64, "temperature": 0}) as stream:
        lines = stream.iter_lines()
        running = next(_vllm_metrics(live)["vllm:num_requests_running"] for line in lines
                       if "output_text.delta" in line)
        for _ in lines:
            pass
    assert running == 1 and _vllm_metrics(live)["vllm:num_requests_running"] == 0


def _vllm_metrics(live: RunningServer) -> dict[str, float]:
    """vLLM's series at /metrics, each summed over its labels."""
    sums: dict[str, float] = {}
    for line in httpx.get(f"http://127.0.0.1:{live.port}/metrics", timeout=10).text.splitlines():
        if line.startswith("vllm:"):
            name, value = line.split("{", 1)[0].split(" ", 1)[0], float(line.rsplit(" ", 1)[1])
            sums[name] = sums.get(name, 0.0) + value
    return sums


def test_the_check_passes_on_the_bundled_model(live: RunningServer) -> None:
    """`responses-server check URL`, every scenario on HTTP, SSE and WebSocket, on the chat-template path."""
    from tests.test_e2e_gpt_oss import run_check

    report = run_check(live.base_url)
    assert report["model"] == MODEL and report["passed"] >= 40
