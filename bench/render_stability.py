"""Render stability across an agent's turns (`make bench`, or on its own):

    .venv/bin/python bench/render_stability.py [--turns 6] [--out bench/results]

A coding agent's loop (each turn the model calls read_file, the client answers with the file) runs against our
server with its engine's prompts recorded, chained by `previous_response_id`, stateless (the whole conversation
resent with `store: false`) and over a WebSocket (chained on the connection). For each turn N it reports the share
of turn N's prompt plus output tokens that reappears as the exact prefix of turn N+1's prompt: below 100%, the
engine's prefix cache cannot hold the whole of the earlier turn, whatever its block size. On the chat template with
the bundled model (its own output), and on harmony through a replay of gpt-oss-shaped tool calls.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.agent_workload import TOOLS  # noqa: E402  (the agent workload's tool)
from bench.servers import ENGINE_FLAGS, Server  # noqa: E402

FILE = "def handler(request):\n" + "".join(f"    step_{n} = transform(request, {n})\n" for n in range(4))
MODES = ("chained", "stateless", "websocket")


def agent_loop(port: int, model: str, turns: int, mode: str) -> None:
    """The agent's turns in one mode; the prompts are in the server's recording."""
    history: list[dict[str, Any]] = [{"role": "user", "content": f"Session {mode}: find the bug in the handler. "
                                      "Read files as needed."}]
    previous: str | None = None
    socket = _socket(port) if mode == "websocket" else None
    with httpx.Client(timeout=600) as client:
        for _ in range(turns):
            # One call per turn: the bundled model repeats calls until max_output_tokens cuts one in half, and a cut
            # call is no item to render back (that part of a turn can never be a prefix, whatever the renderer).
            body: dict[str, Any] = {"model": model, "tools": TOOLS, "tool_choice": "required", "temperature": 0,
                                    "parallel_tool_calls": False, "max_output_tokens": 128, "input": history,
                                    "store": mode == "chained"}
            if previous:
                body["previous_response_id"] = previous
            response = _over_socket(socket, body) if socket else client.post(
                f"http://127.0.0.1:{port}/v1/responses", json=body).json()
            if "output" not in response:
                raise RuntimeError(f"turn refused: {response}")
            calls = [item for item in response["output"] if item["type"] == "function_call"]
            outputs = [{"type": "function_call_output", "call_id": call["call_id"], "output": FILE} for call in calls]
            if mode == "stateless":
                history = history + response["output"] + outputs
            else:
                history, previous = outputs, response["id"]
    if socket is not None:
        socket.close()


def _socket(port: int) -> Any:
    from websockets.sync.client import connect

    return connect(f"ws://127.0.0.1:{port}/v1/responses", max_size=None)


def _over_socket(socket: Any, body: dict[str, Any]) -> dict[str, Any]:
    socket.send(json.dumps({"type": "response.create", **body}))
    while True:
        event = json.loads(socket.recv(timeout=600))
        if event["type"] in ("response.completed", "response.incomplete", "response.failed"):
            return event["response"]
        if event["type"] == "error":
            raise RuntimeError(event["error"]["message"])


def stability(recordings: list[Any]) -> list[float]:
    """For each turn but the last: the share of its prompt and output that the next prompt starts with."""
    shares = []
    for before, after in zip(recordings, recordings[1:]):
        grown = before.prompt_token_ids + [token for step in before.steps for token in step]
        common = 0
        for mine, theirs in zip(grown, after.prompt_token_ids):
            if mine != theirs:
                break
            common += 1
        shares.append(round(common / len(grown), 4))
    return shares


def harmony_replay(path: Path, turns: int) -> Path:
    """gpt-oss-shaped output for each turn: reasoning, then a read_file call."""
    from openai_harmony import Conversation, Message, RenderConversationConfig, Role

    from server.engine.recording import Recording
    from server.paths.harmony import harmony_encoding

    encoding = harmony_encoding()
    start = len(encoding.encode("<|start|>assistant", allowed_special="all"))
    with path.open("w") as out:
        for turn in range(turns):
            messages = [Message.from_role_and_content(Role.ASSISTANT, f"Turn {turn}: read the handler again.")
                        .with_channel("analysis"),
                        Message.from_role_and_content(Role.ASSISTANT, json.dumps({"path": f"handler_{turn}.py"}))
                        .with_channel("commentary").with_recipient("functions.read_file")
                        .with_content_type("<|constrain|>json")]
            tokens = list(encoding.render_conversation(Conversation.from_messages(messages),
                                                       config=RenderConversationConfig(auto_drop_analysis=False)))
            tokens[-1] = encoding.encode("<|call|>", allowed_special="all")[0]  # a call ends with <|call|>
            out.write(Recording([], [tokens[start:]], "stop").to_json() + "\n")
    return path


def measure(turns: int, out: Path) -> dict[str, dict[str, list[float]]]:
    """Stability per turn, on each path and in each mode."""
    from server.bundled_model import BUNDLED_MODEL_NAME
    from server.engine.recording import read_recordings

    python = sys.executable
    results: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        replay = harmony_replay(Path(scratch) / "harmony.jsonl", turns)
        paths = {"chat template (bundled model)": ([*ENGINE_FLAGS], BUNDLED_MODEL_NAME),
                 "harmony (replayed gpt-oss output)": (["--harmony", "--replay-engine-output", str(replay)],
                                                       "gpt-oss")}
        for label, (flags, model) in paths.items():
            results[label] = {}
            for index, mode in enumerate(MODES):
                recorded = Path(scratch) / f"{len(results)}-{mode}.jsonl"
                command = [python, "-m", "server", "--port", str(8710 + index), "--store",
                           f"sqlite:///{Path(scratch) / 'stability.db'}", "--record-engine-output", str(recorded),
                           *flags]
                with Server(command, 8710 + index, out / "stability.log"):
                    agent_loop(8710 + index, model, turns, mode)
                results[label][mode] = stability(read_recordings(recorded))
    return results


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_argument("--turns", type=int, default=6)
    options.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = options.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = measure(args.turns, args.out)
    for label, modes in results.items():
        for mode, shares in modes.items():
            print(f"{label}, {mode}: " + ", ".join(f"turn {n + 1}: {share:.1%}" for n, share in enumerate(shares)))
    (args.out / "render_stability.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
