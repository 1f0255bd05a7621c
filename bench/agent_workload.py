"""The agent workload: a coding agent's loop of forced tool calls, chained or stateless, measured turn by turn."""

from __future__ import annotations

import time
from typing import Any

import httpx

TOOLS = [{"type": "function", "name": "read_file", "description": "Read a file of the project.",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]
FILE = "def handler(request):\n" + "".join(f"    step_{n} = transform(request, {n})\n" for n in range(12))


def agent_turns(port: int, model: str, turns: int, stateless: bool) -> list[dict[str, Any]]:
    """A coding agent's loop: each turn the model must call read_file, the client answers with the file; per turn,
    the prompt's length, how much of it the prefix cache held, and the time to the response."""
    url = f"http://127.0.0.1:{port}/v1/responses"
    session = "stateless" if stateless else "chained"  # each mode its own conversation: no cache shared between them
    history: list[dict[str, Any]] = [{"role": "user", "content": f"Session {session}: find the bug in the handler. "
                                      "Read files as needed."}]
    previous: str | None = None
    rows = []
    with httpx.Client(timeout=600) as client:
        for turn in range(1, turns + 1):
            body: dict[str, Any] = {"model": model, "tools": TOOLS, "tool_choice": "required", "temperature": 0,
                                    "max_output_tokens": 48, "input": history}
            if stateless:
                body["store"] = False
            elif previous:
                body["previous_response_id"] = previous
            started = time.perf_counter()
            reply = client.post(url, json=body)
            seconds = time.perf_counter() - started
            if reply.status_code != 200:
                rows.append({"turn": turn, "error": reply.json()["error"]["message"]})
                break
            response = reply.json()
            usage = response["usage"]
            cached = (usage.get("input_tokens_details") or {}).get("cached_tokens", 0)
            rows.append({"turn": turn, "input_tokens": usage["input_tokens"], "cached_tokens": cached,
                         "prefix_cache_hit_ratio": round(cached / usage["input_tokens"], 3),
                         "seconds": round(seconds, 3)})
            calls = [item for item in response["output"] if item["type"] == "function_call"]
            outputs = [{"type": "function_call_output", "call_id": call["call_id"], "output": FILE} for call in calls]
            if stateless:
                history = history + response["output"] + outputs
            else:
                history, previous = outputs, response["id"]
    return rows
