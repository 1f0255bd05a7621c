"""A batch's result lines in OpenAI's format, and its output and error files made from them."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from server.batches.records import Result

EXPIRED = {"code": "batch_expired", "message": "This request could not be executed before the completion window "
                                               "expired."}


def answered(line: int, custom_id: str, status: int, body: dict[str, Any]) -> Result:
    """A line the server answered: 200 goes to the output file, any other status to the error file."""
    text = json.dumps({"id": f"batch_req_{secrets.token_hex(16)}", "custom_id": custom_id,
                       "response": {"status_code": status, "request_id": f"req_{secrets.token_hex(16)}",
                                    "body": body}, "error": None}, separators=(",", ":"))
    return Result(line, status == 200, text)


def not_run(line: int, custom_id: str, error: dict[str, str]) -> Result:
    """A line the batch ended before running (it expired): to the error file, with no response."""
    text = json.dumps({"id": f"batch_req_{secrets.token_hex(16)}", "custom_id": custom_id, "response": None,
                       "error": error}, separators=(",", ":"))
    return Result(line, False, text)


@dataclass
class OutputFiles:
    """The output and error files' content as the results are read in order, and the answered lines' tokens."""

    output: bytearray = field(default_factory=bytearray)
    errors: bytearray = field(default_factory=bytearray)
    usage: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("input_tokens", "cached_tokens", "output_tokens", "reasoning_tokens"), 0))

    def add(self, result: Result) -> None:
        (self.output if result.ok else self.errors).extend(result.text.encode() + b"\n")
        if result.ok:
            self._count(json.loads(result.text)["response"]["body"].get("usage") or {})

    def _count(self, usage: dict[str, Any]) -> None:
        self.usage["input_tokens"] += usage.get("input_tokens", 0)
        self.usage["output_tokens"] += usage.get("output_tokens", 0)
        self.usage["cached_tokens"] += (usage.get("input_tokens_details") or {}).get("cached_tokens", 0)
        self.usage["reasoning_tokens"] += (usage.get("output_tokens_details") or {}).get("reasoning_tokens", 0)

