"""The neutral delta vocabulary that parsers emit and the response builder consumes.

The deltas made for every token (text, arguments, log probabilities) are slotted, not frozen: a frozen dataclass
sets each field through `object.__setattr__`, which made its `__init__` about four times as slow. None is changed
once made."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Union

from parsers.tools import CallKind


@dataclass(slots=True)
class TokenLogprob:
    """The log probability of one generated token, with its top alternatives."""

    token: str
    logprob: float
    bytes: list[int] = field(default_factory=list)
    top: list[tuple[str, float]] = field(default_factory=list)


@dataclass(slots=True)
class OutputText:
    """Visible answer text for a message item."""

    text: str
    logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(slots=True)
class Refusal:
    """Refusal text for a message item."""

    text: str


@dataclass(slots=True)
class ReasoningText:
    """Chain-of-thought text for a reasoning item."""

    text: str


@dataclass(frozen=True)
class ToolCallStarted:
    """A tool call begins; its `kind` is the tool table's (a custom tool's freeform input, a hosted tool)."""

    name: str
    call_id: str | None = None
    kind: CallKind = "function"
    namespace: str | None = None


@dataclass(slots=True)
class ToolCallArguments:
    """A piece of the open tool call's arguments (JSON text) or custom input."""

    text: str


@dataclass(frozen=True)
class ItemEnded:
    """The open item is complete (a tool call ended, a harmony message ended).

    A parser that knows what an ending message was says so: `commentary` for a preamble, `final_answer` for the
    answer; otherwise the builder tells them apart by whether more output follows."""

    phase: Literal["commentary", "final_answer"] | None = None


@dataclass(frozen=True)
class MessagePhase:
    """The open message's phase, known before it ends: a harmony header names its channel, so a preamble cut short
    by the token limit is still `commentary`. The message stays open."""

    phase: Literal["commentary", "final_answer"]


Delta = Union[OutputText, Refusal, ReasoningText, ToolCallStarted, ToolCallArguments, ItemEnded, MessagePhase]

def merge_adjacent(deltas: list[Delta]) -> list[Delta]:
    """Adjacent text pieces of the same kind joined, so per-token parsing does not multiply events."""
    out: list[Delta] = []
    for delta in deltas:
        last = out[-1] if out else None
        if isinstance(delta, (ReasoningText, Refusal, ToolCallArguments)) and type(last) is type(delta):
            out[-1] = type(delta)(last.text + delta.text)  # type: ignore[union-attr, call-arg]
        elif isinstance(delta, OutputText) and isinstance(last, OutputText):
            out[-1] = OutputText(last.text + delta.text, last.logprobs + delta.logprobs)
        else:
            out.append(delta)
    return out
