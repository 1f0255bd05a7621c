"""Reasoning parsers for `<think>...</think>` models (vLLM's `qwen3` and `deepseek_r1`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from parsers.deltas import Delta, OutputText, ReasoningText, merge_adjacent
from parsers.tags import TagScanner

THINK_START = "<think>"
THINK_END = "</think>"


@dataclass(frozen=True)
class ThinkingStyle:
    """How a model family marks its reasoning."""

    name: str
    # The model reasons first even when the prompt does not open <think> (DeepSeek-R1's templates).
    always_starts_reasoning: bool


STYLES = {
    "qwen3": ThinkingStyle("qwen3", always_starts_reasoning=False),
    "deepseek_r1": ThinkingStyle("deepseek_r1", always_starts_reasoning=True),
}


def starts_in_reasoning(style: ThinkingStyle, prompt_text: str) -> bool:
    """Whether generation begins inside reasoning: the template opened <think> and did not close it."""
    tail = prompt_text.rstrip()
    if tail.endswith(THINK_END):
        return False  # thinking switched off: the template wrote an empty <think></think>
    return tail.endswith(THINK_START) or style.always_starts_reasoning


@dataclass
class ThinkingParser:
    """Splits text into reasoning and answer at the think tags, under any chunking.

    At the very start (after whitespace) an opening <think> enters reasoning, or is dropped when the
    prompt already opened it; </think> ends reasoning for good, and the answer's leading whitespace
    is dropped. Output that never closes its reasoning stays reasoning (a cut-off thought).
    """

    in_reasoning: bool
    reasoning_tokens: int = 0
    _scanner: TagScanner = field(default_factory=TagScanner)
    _at_start: bool = True  # nothing but whitespace seen yet: an opening tag may still come
    _after_reasoning: bool = False  # just left reasoning: drop the answer's leading whitespace

    def feed(self, token_ids: Sequence[int], text: str, token_ends: Sequence[int] | None = None) -> list[Delta]:
        """Split the step token by token, so reasoning tokens are counted exactly under any step grouping."""
        if not (self._at_start or self._after_reasoning or self._scanner.held):  # the per-token fast paths
            if not self.in_reasoning:
                return [OutputText(text)] if text else []  # reasoning is over: all the rest is answer
            if "<" not in text:  # no tag in it, nor the start of one
                self.reasoning_tokens += len(token_ids)
                return [ReasoningText(text)] if text else []
        if token_ends is None or len(token_ends) != len(token_ids):
            token_ends = [len(text)] * len(token_ids)  # no per-token offsets: the step counts as its last token
        deltas: list[Delta] = []
        start = 0
        for end in token_ends:
            was_reasoning = self.in_reasoning
            deltas += self._split(text[start:end])
            if was_reasoning or self.in_reasoning:  # the tokens that open and close reasoning count too
                self.reasoning_tokens += 1
            start = end
        if start < len(text):
            deltas += self._split(text[start:])
        return merge_adjacent(deltas) if len(deltas) > 1 else deltas

    def finish(self) -> list[Delta]:
        return self._emit(self._scanner.flush())

    def _split(self, text: str) -> list[Delta]:
        deltas: list[Delta] = []
        while True:
            tags = ([THINK_START] if self._at_start else []) + ([THINK_END] if self.in_reasoning else [])
            before, tag, after = self._scanner.scan(text, tags)
            if before.strip():
                self._at_start = False  # real text has begun: no opening tag is recognised any more
                if tag == THINK_START:  # "<think>" after answer text is just text
                    deltas += self._emit(before + tag)
                    text = after
                    continue
            elif tag == THINK_START:
                before = ""  # whitespace in front of the opening tag is not answer text
            deltas += self._emit(before)
            if tag is None:
                return deltas
            self._at_start = False
            if tag == THINK_START:
                self.in_reasoning = True
            else:
                self.in_reasoning, self._after_reasoning = False, True
            text = after

    def _emit(self, text: str) -> list[Delta]:
        if self.in_reasoning:
            return [ReasoningText(text)] if text else []
        if self._after_reasoning:
            text = text.lstrip()
            self._after_reasoning = not text
        return [OutputText(text)] if text else []

