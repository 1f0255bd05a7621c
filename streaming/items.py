"""The builder's item records, and the openai SDK models of their parts, logprobs and usage (each item kind's model
is its writer's: streaming/writers.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from openai.types.responses import ResponseUsage
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

from parsers.deltas import TokenLogprob
from streaming.outcome import Finished

ItemKind = Literal["message", "reasoning", "function_call", "custom_tool_call", "mcp_call", "mcp_approval_request",
                   "mcp_list_tools", "shell_call", "local_shell_call", "apply_patch_call", "web_search_call",
                   "code_interpreter_call", "file_search_call", "tool_search_call", "client_tool_search_call"]
PartKind = Literal["output_text", "refusal", "reasoning_text", "summary_text"]
ItemStatus = Literal["in_progress", "completed", "incomplete"]
Phase = Literal["commentary", "final_answer"]  # a preamble before more output, or the answer


@dataclass
class PartRecord:
    """One content part as it accumulates: its text pieces (joined once, when it closes) and logprobs."""

    kind: PartKind
    chunks: list[str] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    final_text: str | None = None  # set once, when the part closes
    annotations: list[dict[str, Any]] = field(default_factory=list)  # an output_text's citations, set as it closes


@dataclass
class ItemRecord:
    """One output item: its id and output_index fixed when it opens, its parts or tool-call arguments."""

    kind: ItemKind
    id: str
    output_index: int
    parts: list[PartRecord] = field(default_factory=list)
    name: str = ""
    call_id: str = ""
    namespace: str | None = None
    arguments: list[str] = field(default_factory=list)
    summary: PartRecord | None = None  # a reasoning item's summary, when one is asked for
    phase: Phase | None = None  # a message's, once it is known (when it ends)
    approval_request_id: str | None = None  # a hosted call's, when the client approved it in advance
    result: "ToolResult | ListedTools | None" = None  # a hosted item's outcome, once the server has it


@dataclass(frozen=True)
class Citable:
    """A result a hosted search showed the model, which its answer may cite."""

    file_id: str
    filename: str


@dataclass(frozen=True)
class ToolResult:
    """What the server got from running a hosted tool (an MCP server's): its output, or the error it ended in (one
    of the SDK's `McpToolCallError` shapes). A search's result also has what the item shows of it (`data`, when the
    request includes it) and the results its answer may cite, numbered from `first_citation`."""

    output: str | None = None
    error: dict[str, Any] | None = None
    data: list[dict[str, Any]] | None = None
    citable: tuple[Citable, ...] = ()
    first_citation: int = 1


@dataclass(frozen=True)
class ListedTools:
    """An MCP server's tools as it listed them (the SDK's `McpListToolsTool` fields), or why it could not."""

    server_label: str
    tools: tuple[dict[str, Any], ...] = ()
    error: str | None = None


def part_model(part: PartRecord, text: str | None) -> dict[str, Any]:
    """A content part ("" while it streams); a dict, since each event module has its own part classes."""
    text = text or ""
    if part.kind == "output_text":
        logprobs = [output_logprob(lp) for lp in part.logprobs] if text else []
        return {"type": "output_text", "text": text, "annotations": list(part.annotations), "logprobs": logprobs}
    if part.kind == "refusal":
        return {"type": "refusal", "refusal": text}
    return {"type": part.kind, "text": text}


def delta_logprob(lp: TokenLogprob) -> dict[str, Any]:
    """A delta event's logprob: the SDK's fields, and the `bytes` the Open Responses schema requires."""
    return {"token": lp.token, "logprob": lp.logprob, "bytes": lp.bytes,
            "top_logprobs": [{"token": t, "logprob": p, "bytes": list(t.encode())} for t, p in lp.top]}


def output_logprob(lp: TokenLogprob) -> dict[str, Any]:
    return {"token": lp.token, "bytes": lp.bytes, "logprob": lp.logprob,
            "top_logprobs": [{"token": t, "bytes": list(t.encode()), "logprob": p} for t, p in lp.top]}


def usage_model(finished: Finished) -> ResponseUsage:
    u = finished.usage
    return ResponseUsage(
        input_tokens=u.input_tokens,
        input_tokens_details=InputTokensDetails(cached_tokens=u.cached_tokens, cache_write_tokens=0),
        output_tokens=u.output_tokens,
        output_tokens_details=OutputTokensDetails(reasoning_tokens=u.reasoning_tokens),
        total_tokens=u.input_tokens + u.output_tokens,
    )
