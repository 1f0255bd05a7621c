"""What every model path provides (`ModelPath`), and the rendered prompt it hands to the run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from parsers.base import OutputParser
from parsers.decoder import IncrementalDecoder
from parsers.tools import ToolTable
from server.constraints.closing import GrammarClosing
from server.constraints.rules import OutputRules
from server.prompts.known import KnownPrompt, Outcome
from server.requests import ContentPart, ResponsesRequest


@dataclass(frozen=True)
class RenderedPrompt:
    """A prompt ready for the engine, with what the parsers need to know about it."""

    token_ids: list[int]
    text: str
    tools: ToolTable | None
    stop_token_ids: tuple[int, ...] = ()
    banned_token_ids: tuple[int, ...] = ()  # special tokens the model must never sample
    images: tuple[ContentPart, ...] = ()  # the image parts behind the prompt's image placeholders, in order
    known: KnownPrompt | None = None  # to keep for the turns that extend it (None: the path keeps its own)
    outcome: Outcome = "full"  # what the render reused of a known prompt
    reused_tokens: int = 0  # how many of `token_ids` were reused, not tokenized


class ModelPath(Protocol):
    """Chat-template models and harmony (gpt-oss) models differ only behind this interface."""

    reasoning_efforts: tuple[str, ...]  # the `reasoning.effort` values the model is told (none: it is not)

    def render(self, request: ResponsesRequest, known: KnownPrompt | None = None) -> RenderedPrompt:
        """The request's prompt; the tokens of `known` (a prompt it may extend) are reused where they hold."""
        ...

    def structural_tag(self, rules: OutputRules) -> str | None:
        """The grammar (an xgrammar structural tag) that makes the output follow `rules`; None: free output."""
        ...

    def thinking_budget(self, rules: OutputRules) -> int | None:
        """The tokens the engine lets reasoning take before it ends it (None: unbounded, or bounded by the grammar)."""
        ...

    def new_parser(self, rendered: RenderedPrompt) -> OutputParser: ...

    def grammar_closing(self, rules: OutputRules, budget: int, parser: OutputParser) -> GrammarClosing | None:
        """What closes a custom call's grammar before `budget` output tokens are spent (None: none to close)."""
        ...

    def new_decoder(self) -> IncrementalDecoder | None:
        """The detokenizer the parser reads text from; None: the parser reads token ids only (harmony)."""
        ...

    def token_text(self, token_id: int) -> str: ...
