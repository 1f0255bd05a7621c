"""The `pythonic` tool-call parser: `[get_weather(city="Paris"), now()]`, converted to JSON arguments as it streams."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Literal

from parsers.deltas import Delta, ItemEnded, OutputText, ToolCallArguments, ToolCallStarted
from parsers.tools import ToolTable

_CALL_LIST_START = re.compile(r"\s*\[\s*[A-Za-z_][\w.]*\s*\(")
_MAYBE_CALL_LIST = re.compile(r"\s*(\[\s*([A-Za-z_][\w.]*\s*)?)?\Z")
_CLOSERS = {"(": ")", "[": "]", "{": "}"}

State = Literal["start", "text", "name", "key", "value", "after_call"]


@dataclass
class PythonicToolParser:
    """An answer that is a Python list of calls is tool calls; each keyword argument streams once complete.

    Values are Python literals, converted with `ast.literal_eval` to JSON; any other answer is text.
    """

    tools: ToolTable
    _state: State = "start"
    _held: str = ""  # the start of the answer, until it is known to be a call list or text
    _token: list[str] = field(default_factory=list)  # the name, key or value being read
    _first_argument: bool = True
    _depth: list[str] = field(default_factory=list)  # open brackets inside a value
    _quote: str = ""  # the open string's quote inside a value
    _escaped: bool = False

    def feed_text(self, text: str) -> list[Delta]:
        if self._state == "start":
            self._held += text
            if _CALL_LIST_START.match(self._held):
                text, self._held = self._held.lstrip()[1:], ""
                self._state = "name"
            elif _MAYBE_CALL_LIST.match(self._held):
                return []
            else:
                self._state, text, self._held = "text", self._held, ""
        if self._state == "text":
            return [OutputText(text)] if text else []
        deltas: list[Delta] = []
        for index, char in enumerate(text):
            deltas += self._char(char)
            if self._state == "text":  # the call list ended: the rest is text
                rest = text[index + 1:]
                return deltas + ([OutputText(rest)] if rest else [])
        return deltas

    def finish(self) -> list[Delta]:
        if self._state == "start" and self._held:
            return [OutputText(self._held)]
        return []

    def _char(self, char: str) -> list[Delta]:
        if self._state == "name":
            if char == "(":
                tool = self.tools.lookup("".join(self._token).strip())
                self._token, self._first_argument, self._state = [], True, "key"
                return [ToolCallStarted(tool.name, kind=tool.kind, namespace=tool.namespace), ToolCallArguments("{")]
            self._token.append(char)
            return []
        if self._state == "key":
            if char == "=":
                self._state = "value"
                self._token.append(char)
                return []
            if char == ")":
                return self._end_call()
            if char != "," and not (char.isspace() and not self._token):
                self._token.append(char)
            return []
        if self._state == "value":
            return self._value_char(char)
        if char == "]":  # after_call
            self._state = "text"
        elif char not in ", \t\r\n":
            self._state, self._token = "name", [char]
        return []

    def _value_char(self, char: str) -> list[Delta]:
        if self._quote:
            if self._escaped:
                self._escaped = False
            elif char == "\\":
                self._escaped = True
            elif char == self._quote:
                self._quote = ""
        elif char in "'\"":
            self._quote = char
        elif char in _CLOSERS:
            self._depth.append(_CLOSERS[char])
        elif self._depth and char == self._depth[-1]:
            self._depth.pop()
        elif not self._depth and char in ",)":
            deltas = self._argument()
            return deltas + (self._end_call() if char == ")" else [])
        self._token.append(char)
        return []

    def _argument(self) -> list[Delta]:
        key, _, value = "".join(self._token).partition("=")
        self._token, self._state = [], "key"
        try:
            converted = json.dumps(ast.literal_eval(value.strip()), ensure_ascii=False)
        except (ValueError, SyntaxError, TypeError):
            converted = json.dumps(value.strip(), ensure_ascii=False)  # not a literal: keep its source text
        prefix = "" if self._first_argument else ", "
        self._first_argument = False
        return [ToolCallArguments(f"{prefix}{json.dumps(key.strip())}: {converted}")]

    def _end_call(self) -> list[Delta]:
        self._state, self._token = "after_call", []
        return [ToolCallArguments("}"), ItemEnded()]
