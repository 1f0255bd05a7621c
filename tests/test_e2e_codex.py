"""End to end: Codex `exec` with two tool calls, stateless (`store: false`), its reasoning sent back only as
`encrypted_content`; on the harmony path and on a chat template with `<think>`, both from replayed output."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest

from server.engine.recording import Recording, read_recordings
from tests.conftest import run_codex, serve_in_thread
from tests.proxy import RecordingProxy
from tests.test_e2e import RunningServer

pytestmark = pytest.mark.e2e
FIRST, SECOND = "FIRSTTHOUGHT: list the files.", "SECONDTHOUGHT: count them."
ANSWER = "There is one file: notes.txt."


def write_recordings(path: Path, outputs: list[list[int]]) -> Path:
    with path.open("w") as out:
        for tokens in outputs:
            out.write(Recording([], [tokens[i:i + 3] for i in range(0, len(tokens), 3)], "stop").to_json() + "\n")
    return path


def codex_two_calls(codex: Path, tmp_path: Path, server_args: list[str], model: str,
                    decode: Callable[[list[int]], str]) -> None:
    """Run Codex through a proxy that strips reasoning plaintext; check the loop and the prompts the model saw."""
    prompts = tmp_path / "prompts.jsonl"
    server = RunningServer([*server_args, "--record-engine-output", str(prompts)], tmp_path / "server.log")
    proxy = RecordingProxy(server.base_url, strip_reasoning_text=True)
    try:
        with serve_in_thread(proxy.app()) as proxy_url:
            (tmp_path / "work").mkdir()
            (tmp_path / "work" / "notes.txt").write_text("hello\n")
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
    # What Codex sent: stateless, and (after the proxy) reasoning only as encrypted_content.
    bodies = [b for b in proxy.bodies if "input" in b]
    assert len(bodies) == 3 and all(b["store"] is False for b in bodies)
    assert all("reasoning.encrypted_content" in b["include"] for b in bodies)
    for body, count in zip(bodies[1:], (1, 2)):
        reasoning = [item for item in body["input"] if item.get("type") == "reasoning"]
        assert len(reasoning) == count and all(r["encrypted_content"].startswith("rsv1.") for r in reasoning)
        assert all("content" not in r and r["summary"] == [] for r in reasoning)
    # What the model was shown: the first reasoning in the second and third prompts, the second in the third.
    shown = [decode(recording.prompt_token_ids) for recording in read_recordings(prompts)]
    assert len(shown) == 3
    assert FIRST not in shown[0] and FIRST in shown[1] and FIRST in shown[2]
    assert SECOND not in shown[1] and SECOND in shown[2]


def test_codex_two_tool_calls_on_harmony_with_encrypted_reasoning(codex: Path, tmp_path: Path) -> None:
    from server.paths.harmony import harmony_encoding
    from tests.test_harmony import CALL, completion

    recordings = write_recordings(tmp_path / "harmony.jsonl", [
        completion(("analysis", None, FIRST), ("commentary", "functions.exec_command", '{"cmd": "ls"}'), end=CALL),
        completion(("analysis", None, SECOND), ("commentary", "functions.exec_command", '{"cmd": "ls | wc -l"}'),
                   end=CALL),
        completion(("analysis", None, "Done."), ("final", None, ANSWER)),
    ])
    encoding = harmony_encoding()
    codex_two_calls(codex, tmp_path, ["--harmony", "--replay-engine-output", str(recordings)], "gpt-oss",
                    lambda ids: encoding.decode(ids))
    assert FIRST in encoding.decode(read_recordings(tmp_path / "prompts.jsonl")[1].prompt_token_ids).split(
        "<|channel|>analysis<|message|>", 1)[1]  # as an analysis message, where harmony keeps it before a call


def think_model(bundled_model: Path, directory: Path) -> Path:
    """The bundled tokenizer with a Qwen3-style template that renders reasoning_content as <think>."""
    directory.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json", "generation_config.json"):
        shutil.copy(bundled_model / name, directory / name)
    shutil.copy(Path(__file__).parent / "data" / "think_template.jinja", directory / "chat_template.jinja")
    return directory


def test_codex_two_tool_calls_on_a_think_template_with_encrypted_reasoning(codex: Path, tmp_path: Path,
                                                                           bundled_model: Path,
                                                                           tokenizer: Any) -> None:
    model = think_model(bundled_model, tmp_path / "think-model")

    def output(thought: str, rest: str) -> list[int]:
        text = f"<think>\n{thought}\n</think>\n\n{rest}"
        return tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]

    def call(cmd: str) -> str:
        return '<tool_call>\n{"name": "exec_command", "arguments": {"cmd": "%s"}}\n</tool_call>' % cmd

    recordings = write_recordings(tmp_path / "think.jsonl", [
        output(FIRST, call("ls")), output(SECOND, call("ls | wc -l")), output("Done.", ANSWER)])
    codex_two_calls(codex, tmp_path, ["--model", str(model), "--served-model-name", "think-test",
                                      "--reasoning-parser", "qwen3", "--tool-call-parser", "hermes",
                                      "--replay-engine-output", str(recordings)], "think-test",
                    lambda ids: tokenizer.decode(ids))
    prompt = tokenizer.decode(read_recordings(tmp_path / "prompts.jsonl")[2].prompt_token_ids)
    assert f"<think>\n{FIRST}\n</think>" in prompt and f"<think>\n{SECOND}\n</think>" in prompt
