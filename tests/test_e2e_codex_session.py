"""End to end: a Codex session that outgrows the model's window completes, however Codex connects. Four commands each
print 1,500 lines into a 16,000-token window: on Codex's built-in provider over its WebSocket (it never learns the
window, so the server compacts on overflow), and on a custom provider over HTTP and over a WebSocket (it reads the
server's catalog, and compacts before the overflow); on the chat-template path and on the harmony path. The model is
a test double that plays the task by what its prompt holds, as a real agent would: it runs the next command whose
output it has not seen, and summarizes when asked to."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator

import httpx
import pytest

from server.config import ServerConfig
from server.engine.interface import TAKEN, EngineRequest, EngineStep
from server.history.compaction import SUMMARY_INSTRUCTION
from server.http.app import create_app
from server.runs.context import ServingContext
from tests.conftest import codex_provider, serve_in_thread
from tests.proxy import RecordingProxy
from tests.scripted_engine import ScriptedEngine, steps_from_tokens
from tests.test_metrics import scrape, value

pytestmark = pytest.mark.e2e
MODEL = "task-model"
WINDOW = 16_000
STEPS = 4
ANSWER = "All four logs were read."
TASK = "Run the four log commands, one at a time, then say you are done."
HOLD = "Hold the only place."
# A summary is asked for by the server's compaction, or by Codex's own (its prompt: "You are performing a CONTEXT
# CHECKPOINT COMPACTION. Create a handoff summary for another LLM ...").
SUMMARY_ASKS = (SUMMARY_INSTRUCTION, "CONTEXT CHECKPOINT COMPACTION")


def marker(step: int) -> str:
    """What command `step` prints last: its command line spells it differently, so only its output shows it."""
    return f"MARK{100 + step}"


def command(step: int) -> str:
    return f"seq 1 1500 | sed 's/^/row of log {step}: /'; echo MARK$((100+{step}))"


@dataclass(frozen=True)
class Dialect:
    """How a model path's prompts read and its outputs are written: chat template (Hermes calls) or harmony."""

    decode: Callable[[list[int]], str]
    user_turn: str  # where a user turn starts in a decoded prompt
    turn: str  # where any turn starts
    call: Callable[[str, dict[str, str]], list[int]]  # a tool call's tokens, to its end
    text: Callable[[str], list[int]]  # an answer's tokens, to its end
    offered: Callable[[str], str]  # how the prompt shows a tool of that name among those offered


def chat_dialect(tokenizer: Any) -> Dialect:
    def tokens(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]

    return Dialect(tokenizer.decode, "<|im_start|>user", "<|im_start|>",
                   lambda name, arguments: tokens("<tool_call>\n" + json.dumps({"name": name, "arguments": arguments})
                                                  + "\n</tool_call>"),
                   tokens, lambda name: f'"name":"{name}"')


def harmony_dialect() -> Dialect:
    from server.paths.harmony import harmony_encoding
    from tests.test_harmony import CALL, completion

    encoding = harmony_encoding()
    return Dialect(encoding.decode, "<|start|>user", "<|start|>",
                   lambda name, arguments: completion(("commentary", f"functions.{name}", json.dumps(arguments)),
                                                      end=CALL),
                   lambda text: completion(("final", None, text)), lambda name: f"type {name} =")


@dataclass
class TaskEngine(ScriptedEngine):
    """Answers each request from its prompt: a summary when the last turn is a user's asking for one (the server's
    compaction or Codex's own), else a call of the next command whose output the prompt does not hold (in a tool
    output or in a summary), else the final answer."""

    dialect: Dialect | None = None
    summaries: list[str] = field(default_factory=list)
    hold: threading.Event = field(default_factory=threading.Event)  # a prompt saying HOLD waits for it
    holding: threading.Event = field(default_factory=threading.Event)  # set once such a prompt waits

    def reply(self, prompt: str) -> list[int]:
        assert self.dialect is not None
        done = [step for step in range(1, STEPS + 1) if marker(step) in prompt]
        last_user = prompt.rsplit(self.dialect.user_turn, 1)[-1]  # with what follows: the generation prompt alone?
        if any(ask in last_user for ask in SUMMARY_ASKS) and last_user.count(self.dialect.turn) == 1:
            self.summaries.append(last_user)
            return self.dialect.text("Progress: the user asked for four log commands; seen so far: " + ", ".join(
                marker(step) for step in done) + ".")
        left = [step for step in range(1, STEPS + 1) if step not in done]
        if not left:
            return self.dialect.text(ANSWER)
        name, key = ("shell_command", "command") if self.dialect.offered("shell_command") in prompt else (
            "exec_command", "cmd")
        return self.dialect.call(name, {key: command(left[0])})

    async def generate(self, request: EngineRequest) -> AsyncIterator[EngineStep]:
        assert self.dialect is not None
        self.requests.append(request)
        yield TAKEN
        prompt = self.dialect.decode(request.prompt_token_ids)
        if HOLD in prompt:
            self.holding.set()
            await asyncio.to_thread(self.hold.wait, 120)
        tokens = self.reply(prompt)
        for step in steps_from_tokens(tokens, cuts=list(range(16, len(tokens), 16))):
            await asyncio.sleep(0)
            yield step


def serve(tokenizer: Any, path: str, **settings: Any) -> Iterator[tuple[TaskEngine, str, ServingContext]]:
    """The app as the command line serves it (compaction on overflow), a 16,000-token window, on the chat-template
    path (the bundled tokenizer, Hermes calls) or the harmony path; `settings` of its ServerConfig besides."""
    harmony = path == "harmony"
    engine = TaskEngine(tokenizer=None if harmony else tokenizer, scripts=[], max_model_len=WINDOW,
                        dialect=harmony_dialect() if harmony else chat_dialect(tokenizer))
    config = ServerConfig(served_model_name=MODEL, harmony=harmony, tool_call_parser=None if harmony else "hermes",
                          compact_on_overflow=True, **settings)
    context = ServingContext(config=config, engine_factory=lambda: engine)
    with serve_in_thread(create_app(context)) as base_url:
        yield engine, base_url, context


@pytest.fixture(params=["chat", "harmony"])
def served(request: pytest.FixtureRequest, tokenizer: Any) -> Iterator[tuple[TaskEngine, str, ServingContext]]:
    yield from serve(tokenizer, request.param)


@pytest.fixture
def capped(tokenizer: Any) -> Iterator[tuple[TaskEngine, str, ServingContext]]:
    """One response at a time, a request past it waiting (as --max-concurrent-requests 1 with the default wait)."""
    yield from serve(tokenizer, "chat", max_concurrent_requests=1, admission_wait_seconds=30.0)


def codex_session(codex: Path, tmp_path: Path, config: str, env: dict[str, str],
                  *resume: str) -> list[dict[str, Any]]:
    """`codex exec --json` of the task in a Codex home configured by `config` (made on the first run), or with
    `resume` (`resume THREAD_ID PROMPT`), that thread continued; its events."""
    home, work = tmp_path / "codex-home", tmp_path / "work"
    if not home.exists():
        home.mkdir()
        work.mkdir()
        (home / "config.toml").write_text(f'model = "{MODEL}"\n{config}')
    run = subprocess.run([str(codex), "exec", "--skip-git-repo-check", "--json",
                          "--dangerously-bypass-approvals-and-sandbox", *(resume or [TASK])], cwd=work,
                         env={**os.environ, "CODEX_HOME": str(home), **env}, stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=600)
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    kinds = [event["type"] for event in events]
    assert run.returncode == 0 and "turn.completed" in kinds and "turn.failed" not in kinds, \
        run.stdout[-3000:] + run.stderr[-3000:]
    if "model_providers.local.auth" in config:  # it reads the catalog: it knows the model
        assert "metadata" not in run.stdout + run.stderr, run.stderr[-2000:]
    return events


def answers(events: list[dict[str, Any]]) -> list[str]:
    return [event["item"]["text"] for event in events if event["type"] == "item.completed"
            and event["item"]["type"] == "agent_message"]


def completed(base_url: str, mode: str) -> float:
    """Responses completed so far, asked for as `mode` (websocket, stream, json): which way Codex talked."""
    return value(scrape(base_url), "responses_server_responses_total", status="completed", mode=mode)


def check_task_done(events: list[dict[str, Any]], engine: TaskEngine) -> None:
    commands = [event["item"] for event in events if event["type"] == "item.completed"
                and event["item"]["type"] == "command_execution"]
    assert [c["exit_code"] for c in commands] == [0] * STEPS
    assert [marker(step) in c["aggregated_output"] for step, c in enumerate(commands, 1)] == [True] * STEPS
    assert answers(events)[-1] == ANSWER
    assert engine.summaries, "the session never compacted"
    assert all(len(request.prompt_token_ids) < WINDOW for request in engine.requests)
    assert engine.dialect is not None  # Codex offers view_image; this model reads no images, so it is not offered
    assert not any(engine.dialect.offered("view_image") in engine.dialect.decode(request.prompt_token_ids)
                   for request in engine.requests)


def test_on_the_built_in_provider_the_server_compacts_when_the_window_overflows(
        served: tuple[TaskEngine, str], codex: Path, tmp_path: Path) -> None:
    """`openai_base_url` and nothing else: Codex talks over its WebSocket, assumes a far larger window, and would
    end its thread on a 400; the server summarizes the history itself and answers."""
    engine, base_url, _ = served
    before = completed(base_url, "websocket")
    events = codex_session(codex, tmp_path, f'openai_base_url = "{base_url}"\n', {"OPENAI_API_KEY": "x"})
    check_task_done(events, engine)
    assert completed(base_url, "websocket") - before >= STEPS + 1  # each command's turn, and the answer's
    # `codex exec resume` continues the compacted thread: the summary says every log was read.
    thread = next(event["thread_id"] for event in events if event["type"] == "thread.started")
    resumed = codex_session(codex, tmp_path, "", {"OPENAI_API_KEY": "x"}, "resume", thread, "Are you done?")
    assert answers(resumed) == [ANSWER]
    assert engine.dialect is not None and "Are you done?" in engine.dialect.decode(engine.requests[-1].prompt_token_ids)
    assert len(engine.requests[-1].prompt_token_ids) < WINDOW


@pytest.mark.parametrize("websockets", [False, True], ids=["http", "websocket"])
def test_on_a_custom_provider_codex_reads_the_window_and_compacts_in_time(
        served: tuple[TaskEngine, str], codex: Path, tmp_path: Path, websockets: bool) -> None:
    """A custom provider, its key from a command (as the README shows): Codex reads the catalog and compacts before
    the overflow; no request the server receives overflows."""
    engine, base_url, _ = served
    mode = "websocket" if websockets else "stream"
    before = completed(base_url, mode)
    proxy = RecordingProxy(base_url)
    with serve_in_thread(proxy.app()) as proxy_url:
        url = base_url if websockets else proxy_url
        events = codex_session(codex, tmp_path, codex_provider(url, websockets), {"LOCAL_API_KEY": "x"})
    check_task_done(events, engine)
    assert completed(base_url, mode) - before >= STEPS + 1
    if not websockets:
        bodies = [body for body in proxy.bodies if "input" in body]
        assert bodies and not any(item.get("type") == "compaction" for body in bodies for item in body["input"])


def test_at_the_concurrency_cap_a_codex_turn_waits_for_a_place_and_completes(
        capped: tuple[TaskEngine, str, ServingContext], codex: Path, tmp_path: Path) -> None:
    """Codex ends its thread on a 429: past the cap, its request waits for the place another response holds."""
    engine, base_url, context = capped
    holder = threading.Thread(target=httpx.post, args=(f"{base_url}/responses",),
                              kwargs={"json": {"model": MODEL, "input": HOLD}, "timeout": 120}, daemon=True)
    holder.start()
    assert engine.holding.wait(60)
    waited = threading.Event()

    def release_once_codex_waits() -> None:
        deadline = time.monotonic() + 120
        while context.admission.waiting == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        if context.admission.waiting:
            waited.set()
        engine.hold.set()

    threading.Thread(target=release_once_codex_waits, daemon=True).start()
    events = codex_session(codex, tmp_path, codex_provider(base_url), {"LOCAL_API_KEY": "x"})
    assert waited.is_set()  # Codex's first request waited while the place was held
    check_task_done(events, engine)
