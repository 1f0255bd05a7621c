"""End to end: Codex `exec` with two tool calls, stateless (`store: false`), its reasoning sent back only as
`encrypted_content`; on the harmony path and on a chat template with `<think>`, both from replayed output."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Callable

import pytest

from server.engine.recording import Recording, read_recordings
from tests.conftest import run_codex, serve_in_thread
from tests.proxy import RecordingProxy
from tests.servers import RunningServer

pytestmark = pytest.mark.e2e
FIRST, SECOND = "FIRSTTHOUGHT: list the files.", "SECONDTHOUGHT: count them."
ANSWER = "There is one file: notes.txt."


def write_recordings(path: Path, outputs: list[list[int]]) -> Path:
    with path.open("w") as out:
        for tokens in outputs:
            out.write(Recording([], [tokens[i:i + 3] for i in range(0, len(tokens), 3)], "stop").to_json() + "\n")
    return path


def codex_two_calls(codex: Path, tmp_path: Path, server_args: list[str], model: str,
                    decode: Callable[[list[int]], str], websocket: bool = False) -> list[Recording]:
    """Run Codex, over HTTP through a proxy that strips reasoning plaintext, or over a WebSocket; check the loop and
    the prompts the model saw, and give the engine's recordings."""
    prompts = tmp_path / "prompts.jsonl"
    server = RunningServer([*server_args, "--record-engine-output", str(prompts)], tmp_path / "server.log")
    proxy = RecordingProxy(server.base_url, strip_reasoning_text=True)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "notes.txt").write_text("hello\n")
    try:
        if websocket:
            run = run_codex(codex, server.base_url, model, tmp_path, "How many files are here?",
                            "--dangerously-bypass-approvals-and-sandbox", websockets=True)
        else:
            with serve_in_thread(proxy.app()) as proxy_url:
                run = run_codex(codex, proxy_url, model, tmp_path, "How many files are here?",
                                "--dangerously-bypass-approvals-and-sandbox")
    finally:
        server.stop()
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert run.returncode == 0 and any(e["type"] == "turn.completed" for e in events), run.stdout[-3000:]
    commands = [e["item"] for e in events if e["type"] == "item.completed"
                and e["item"]["type"] == "command_execution"]
    assert [c["exit_code"] for c in commands] == [0, 0] and commands[0]["aggregated_output"] == "notes.txt\n"
    assert [e["item"]["text"] for e in events if e["type"] == "item.completed"
            and e["item"]["type"] == "agent_message"] == [ANSWER]
    if websocket:
        check_socket_turns((tmp_path / "server.log").read_text())
    else:
        check_stateless_bodies(proxy.bodies)
    # What the model was shown: the first reasoning in the second and third prompts, the second in the third.
    recordings = read_recordings(prompts)
    shown = [decode(recording.prompt_token_ids) for recording in recordings]
    assert len(shown) == 3
    assert FIRST not in shown[0] and FIRST in shown[1] and FIRST in shown[2]
    assert SECOND not in shown[1] and SECOND in shown[2]
    return recordings


def check_stateless_bodies(bodies: list[dict[str, Any]]) -> None:
    """What Codex sent over HTTP: stateless, and (after the proxy) reasoning only as encrypted_content."""
    bodies = [b for b in bodies if "input" in b]
    assert len(bodies) == 3 and all(b["store"] is False for b in bodies)
    assert all("reasoning.encrypted_content" in b["include"] for b in bodies)
    for body, count in zip(bodies[1:], (1, 2)):
        reasoning = [item for item in body["input"] if item.get("type") == "reasoning"]
        assert len(reasoning) == count and all(r["encrypted_content"].startswith("rsv1.") for r in reasoning)
        assert all("content" not in r and r["summary"] == [] for r in reasoning)


def check_socket_turns(log: str) -> None:
    """The server's log: every turn went over one socket, a warm-up first, then each turn chained to the last
    with store false (the history came from the connection, not from the store)."""
    turns = re.findall(r"WebSocket response.create -> (\S+) \(lane None, previous_response_id (\S+), store False, "
                       r"generate (\w+)", log)
    assert [generate for _, _, generate in turns] == ["False", "True", "True", "True"], log[-3000:]
    assert [previous for _, previous, _ in turns] == ["None"] + [turn_id for turn_id, _, _ in turns[:-1]]
    assert log.count('"WebSocket /v1/responses" [accepted]') == 1 and "POST /v1/responses " not in log


def extends_token_for_token(recordings: list[Recording]) -> None:
    """Each turn's prompt starts with the previous turn's prompt and output, token for token."""
    for before, after in zip(recordings, recordings[1:]):
        grown = before.prompt_token_ids + [token for step in before.steps for token in step]
        assert after.prompt_token_ids[:len(grown)] == grown


@pytest.mark.parametrize("websocket", [False, True], ids=["http", "websocket"])
def test_codex_two_tool_calls_on_harmony_with_encrypted_reasoning(codex: Path, tmp_path: Path, websocket: bool) -> None:
    from server.paths.harmony import harmony_encoding
    from tests.test_harmony import CALL, completion

    recordings = write_recordings(tmp_path / "harmony.jsonl", [
        completion(("analysis", None, FIRST), ("commentary", "functions.exec_command", '{"cmd": "ls"}'), end=CALL),
        completion(("analysis", None, SECOND), ("commentary", "functions.exec_command", '{"cmd": "ls | wc -l"}'),
                   end=CALL),
        completion(("analysis", None, "Done."), ("final", None, ANSWER)),
    ])
    encoding = harmony_encoding()
    recorded = codex_two_calls(codex, tmp_path, ["--harmony", "--replay-engine-output", str(recordings)], "gpt-oss",
                               lambda ids: encoding.decode(ids), websocket)
    if websocket:
        extends_token_for_token(recorded)
    assert FIRST in encoding.decode(read_recordings(tmp_path / "prompts.jsonl")[1].prompt_token_ids).split(
        "<|channel|>analysis<|message|>", 1)[1]  # as an analysis message, where harmony keeps it before a call


def think_model(bundled_model: Path, directory: Path) -> Path:
    """The bundled tokenizer with a Qwen3-style template that renders reasoning_content as <think>."""
    directory.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json", "generation_config.json"):
        shutil.copy(bundled_model / name, directory / name)
    shutil.copy(Path(__file__).parent / "data" / "think_template.jinja", directory / "chat_template.jinja")
    return directory


@pytest.mark.parametrize("websocket", [False, True], ids=["http", "websocket"])
def test_codex_two_tool_calls_on_a_think_template_with_encrypted_reasoning(codex: Path, tmp_path: Path,
                                                                           bundled_model: Path, tokenizer: Any,
                                                                           websocket: bool) -> None:
    model = think_model(bundled_model, tmp_path / "think-model")

    def output(thought: str, rest: str) -> list[int]:
        text = f"<think>\n{thought}\n</think>\n\n{rest}"
        return tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]

    def call(cmd: str) -> str:
        return '<tool_call>\n{"name": "exec_command", "arguments": {"cmd": "%s"}}\n</tool_call>' % cmd

    recordings = write_recordings(tmp_path / "think.jsonl", [
        output(FIRST, call("ls")), output(SECOND, call("ls | wc -l")), output("Done.", ANSWER)])
    recorded = codex_two_calls(codex, tmp_path, ["--model", str(model), "--served-model-name", "think-test",
                                                 "--reasoning-parser", "qwen3", "--tool-call-parser", "hermes",
                                                 "--replay-engine-output", str(recordings)], "think-test",
                               lambda ids: tokenizer.decode(ids), websocket)
    if websocket:
        extends_token_for_token(recorded)
    prompt = tokenizer.decode(read_recordings(tmp_path / "prompts.jsonl")[2].prompt_token_ids)
    assert f"<think>\n{FIRST}\n</think>" in prompt and f"<think>\n{SECOND}\n</think>" in prompt


def codex_doctor(codex: Path, base_url: str, home: Path) -> dict[str, Any]:
    """`codex doctor --json --network-only` for a provider that says `supports_websockets = true`: its socket check."""
    home.mkdir()
    (home / "config.toml").write_text(
        f'model = "gpt-oss"\nmodel_provider = "local"\n\n[model_providers.local]\nname = "responses-server"\n'
        f'base_url = "{base_url}"\nwire_api = "responses"\nenv_key = "LOCAL_API_KEY"\nsupports_websockets = true\n')
    run = subprocess.run([str(codex), "doctor", "--json", "--network-only"], cwd=home,
                         env={**os.environ, "CODEX_HOME": str(home), "LOCAL_API_KEY": "x"},
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    return json.loads(run.stdout)["checks"]["network.websocket_reachability"]


def test_codex_doctor_sees_the_handshake_and_falls_back_to_http_when_it_is_off(codex: Path, tmp_path: Path) -> None:
    from tests.test_harmony import CALL, completion

    recordings = write_recordings(tmp_path / "harmony.jsonl", [
        completion(("commentary", "functions.exec_command", '{"cmd": "ls"}'), end=CALL),
        completion(("final", None, ANSWER))])
    on = RunningServer(["--harmony", "--replay-engine-output", str(recordings)], tmp_path / "on.log")
    try:
        check = codex_doctor(codex, on.base_url, tmp_path / "home-on")
    finally:
        on.stop()
    assert check["status"] == "ok" and check["details"]["handshake result"] == "HTTP 101 Switching Protocols", check
    off = RunningServer(["--harmony", "--replay-engine-output", str(recordings), "--no-websocket"],
                        tmp_path / "off.log")
    try:
        check = codex_doctor(codex, off.base_url, tmp_path / "home-off")
        (tmp_path / "work").mkdir()
        run = run_codex(codex, off.base_url, "gpt-oss", tmp_path, "List the files.",
                        "--dangerously-bypass-approvals-and-sandbox", websockets=True)
    finally:
        off.stop()
    assert check["status"] != "ok" and "426" in json.dumps(check), check
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert run.returncode == 0 and [e["item"]["text"] for e in events if e["type"] == "item.completed"
                                    and e["item"]["type"] == "agent_message"] == [ANSWER]
    log = (tmp_path / "off.log").read_text()
    assert '"WebSocket /v1/responses" 426' in log and log.count('"POST /v1/responses HTTP/1.1" 200') == 2
