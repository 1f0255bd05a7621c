"""A call closed at the output budget by its grammar: its arguments' shortest completion, written before the budget ends.

No length bound exists for an arbitrary lark or regex grammar, so a custom tool's grammar alone cannot make a call end
within `max_output_tokens`; a JSON schema's bound (server/constraints/json_budget.py) needs room the call's own
fixed text may already have taken. Instead, once few tokens are left while a call is open, the run asks for the
shortest text that completes its arguments (or a custom tool's input) under the tool's grammar; when that text just
fits what is left, the run writes it, ends the call, and stops the engine. A hosted call so closed is then run.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Mapping, Protocol

from server.constraints.json_grammar import json_grammar
from server.constraints.json_string import ebnf_literal, renamed_root

# The characters a completion is made of: printable ASCII, newline and tab (a grammar that needs others to close
# has no completion here, and its call is cut by the budget as before). Letters and digits first: of completions
# of one length, the first found is the one a reader (or a search run on a closed call's query) can use.
ALPHABET = tuple(sorted((chr(code) for code in range(0x20, 0x7F)), key=lambda char: not char.isalnum())) + ("\n", "\t")
MOST_STATES = 20_000  # grammar states one search visits at most (~0.15 s): its cost is bounded whatever the grammar
CLOSING_WINDOW = 64  # tokens left when the run starts asking for the completion, step by step


def arguments_grammar(schema: dict[str, Any], after: str = "") -> str:
    """A call's JSON arguments valid against `schema` (unbounded: a closing looks for their shortest completion), then
    `after` (the call's end, in the model's call syntax)."""
    return (f"root ::= call_arguments {ebnf_literal(after)}\n" if after else "root ::= call_arguments\n") \
        + renamed_root(json_grammar(schema), "call_arguments")


def shortest_completion(grammar: str, text: str, most: int) -> str | None:
    """The shortest text (of at most `most` characters of ALPHABET) after which `text` is a whole sentence of
    `grammar` (xgrammar EBNF); None when `text` is off the grammar or no such text is found within the bounds."""
    return _search(grammar, text, most)[0]


def _search(grammar: str, text: str, most: int) -> tuple[str | None, bool]:
    """(the shortest completion, or None; whether the search ended for want of length, so a completion may exist
    beyond `most` characters).

    A breadth-first search over characters, one length at a time. Matcher states reached by texts of the same length
    are told apart by the parser's state as xgrammar prints it, so each is expanded once."""
    import xgrammar

    matcher = xgrammar.GrammarMatcher(_compiled(grammar), terminate_without_stop_token=True)
    if not matcher.accept_string(text):
        return None, False
    bitmask = xgrammar.allocate_token_bitmask(1, len(ALPHABET))
    level: list[tuple[Any, str]] = [(matcher, "")]
    visited = 0
    for length in range(most + 1):
        for state, suffix in level:
            if state.is_completed():
                return suffix, False
        if length == most:
            return None, True
        following: dict[str, tuple[Any, str]] = {}
        for state, suffix in level:
            for index in _allowed(state, bitmask):
                visited += 1
                if visited > MOST_STATES:
                    return None, False
                state.accept_token(index)
                key = state._debug_print_internal_state()
                if key not in following:
                    following[key] = (state.fork(), suffix + ALPHABET[index])
                state.rollback(1)
        if not following:
            return None, False
        level = list(following.values())
    return None, True


def _allowed(matcher: Any, bitmask: Any) -> list[int]:
    """The indexes in ALPHABET of the characters the grammar accepts next."""
    matcher.fill_next_token_bitmask(bitmask)
    words = bitmask[0].tolist()
    return [index for index in range(len(ALPHABET)) if (words[index // 32] >> (index % 32)) & 1]


@lru_cache(maxsize=64)
def _compiled(grammar: str) -> Any:
    import xgrammar

    vocabulary = xgrammar.TokenizerInfo(list(ALPHABET))  # one token per character: the bitmask names characters
    return xgrammar.GrammarCompiler(vocabulary, cache_enabled=False).compile_grammar(grammar)


class OpenCallParser(Protocol):
    """A parser that tells the call it is in (harmony's, the chat path's JSON calls), and can end it early."""

    def open_call(self) -> tuple[str, str] | None:
        """The open call's tool name (as the model writes it) and its arguments, or custom input, so far."""
        ...

    def end_call(self, rest: str) -> list[Any]:
        """The deltas of the open call, ended after `rest`."""
        ...


@dataclass
class GrammarClosing:
    """One engine pass's calls under a grammar: the open call's closing, once the tokens left (of `budget`) come near
    what its completion needs."""

    grammars: Mapping[str, Callable[[], str]]  # tools' names -> the grammar of their arguments or input (xgrammar
    # EBNF), made when first asked for
    budget: int  # the tokens this pass may generate
    parser: OpenCallParser
    _call: tuple[str, int] | None = None  # the call last asked about: its tool and its input's length then
    _needs: int | None = None  # the bytes its completion took then (at least, when `_beyond`)
    _beyond: bool = False  # then no completion fitted what was left
    _hopeless: bool = False  # the search gave up (too many states): the budget cuts the call, as without a grammar
    _step: int = 1  # the most tokens one engine step gave: the completion is written while it still fits
    _seen: int | None = None  # the output tokens when last asked

    def due(self, output_tokens: int) -> bool:
        """Whether to ask for the open call's completion now: on entering the last CLOSING_WINDOW tokens, then when
        what is left comes within a step of what the completion may need (cheap: the run asks after every step).

        What the model writes after an ask shortens the completion by at most its length (the written text and
        the new completion complete the old input), so the completion then needed is at least the old less that."""
        if self._seen is not None:
            self._step = max(self._step, output_tokens - self._seen)
        self._seen = output_tokens
        left = self.budget - output_tokens
        if left > CLOSING_WINDOW:
            return False
        call = self.parser.open_call()
        if call is None or call[0] not in self.grammars:
            return False  # (a tool with no grammar is never closed: not worth asking the search)
        if self._call is None or self._call[0] != call[0] or len(call[1]) < self._call[1]:
            self._needs, self._beyond, self._hopeless = None, False, False  # another call than the one last asked
            return True
        if self._hopeless or self._needs is None:
            return False
        if self._beyond:  # none fitted then: ask again once what was written since may have made one fit
            return self._needs - (len(call[1]) - self._call[1]) <= left
        return left - self._needs <= self._step

    def ending(self, output_tokens: int) -> list[Any] | None:
        """The deltas that end the open call with its shortest completion, when it must be written now (it fits
        what is left, by at most a step); None: not yet, or never (then the budget cuts the call). CPU work:
        the run calls it off the event loop."""
        call = self.parser.open_call()
        if call is None or call[0] not in self.grammars:
            return None
        name, text = call
        self._call = (name, len(text))
        left = self.budget - output_tokens
        completion, longer = _search(self.grammars[name](), text, most=left)
        if completion is None:
            self._needs, self._beyond, self._hopeless = left + 1, True, not longer
            return None
        self._needs, self._beyond = len(completion.encode()), False
        if left - self._needs > self._step:
            return None  # room for the model's own words yet
        return self.parser.end_call(completion)


def grammar_closing(tools: Mapping[str, Callable[[], str] | None], budget: int,
                    parser: OpenCallParser) -> GrammarClosing | None:
    """The closing of the calls whose tool has a grammar (None: no such tool may be called)."""
    grammars = {name: grammar for name, grammar in tools.items() if grammar is not None}
    return GrammarClosing(grammars, budget, parser) if grammars else None
