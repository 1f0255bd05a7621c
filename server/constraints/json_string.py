"""A grammar over text rewritten as the same grammar over that text written inside a JSON string.

On the chat-template path a custom tool's input travels as `{"input": "..."}`: the model writes the input
JSON-escaped, so its grammar must hold for the escaped text. Every terminal of xgrammar's EBNF (a "literal" or a
[character class]) is rewritten: a character JSON must escape (`"`, `\\`, U+0000-U+001F) becomes its escape as
`json.dumps` writes it (`\\n`, `\\"`, `\\u0001`), any other stays itself. Rules, references and repetition are kept.
"""

from __future__ import annotations

import json
import re

# Characters a JSON string cannot hold as themselves, as (first, last) code points.
_SPECIAL = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C))
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "a": "\a", "b": "\b", "e": "\x1b",
                   "0": "\0"}
_HEX_DIGITS = {"x": 2, "u": 4, "U": 8}
_ROOT = re.compile(r"\broot\b")

Ranges = list[tuple[int, int]]


def json_string_grammar(ebnf: str) -> str:
    """`ebnf` (xgrammar's EBNF, as `str(xgrammar.Grammar)` prints it) over the JSON-escaped form of its sentences."""
    out: list[str] = []
    at = 0
    while at < len(ebnf):
        char = ebnf[at]
        if char == '"':
            end = _closing(ebnf, at, '"')
            out.append(_literal("".join(_json_escaped(c) for c in _decoded(ebnf[at + 1:end]))))
            at = end + 1
        elif char == "[":
            end = _closing(ebnf, at, "]")
            out.append(_json_class(ebnf[at + 1:end]))
            at = end + 1
        else:
            out.append(char)
            at += 1
    return "".join(out)


def renamed_root(ebnf: str, name: str) -> str:
    """`ebnf` with its `root` rule (and the references to it) named `name`, to be used inside another grammar."""
    pieces = re.split(r'("(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\])', ebnf)  # terminals at odd places: left alone
    return "".join(piece if index % 2 else _ROOT.sub(name, piece) for index, piece in enumerate(pieces))


def ebnf_literal(text: str) -> str:
    """`text` as an EBNF string literal."""
    return _literal(text)


def _closing(ebnf: str, start: int, quote: str) -> int:
    """The index of the unescaped `quote` that ends the terminal opened at `start`."""
    at = start + 1
    while ebnf[at] != quote:
        at += 2 if ebnf[at] == "\\" else 1
    return at


def _decoded(body: str) -> list[str]:
    """The characters an EBNF terminal's body stands for, escapes read."""
    return [char for char, _ in _read(body)]


def _read(body: str) -> list[tuple[str, bool]]:
    """Each character of an EBNF terminal's body, and whether it was written as an escape."""
    chars: list[tuple[str, bool]] = []
    at = 0
    while at < len(body):
        if body[at] != "\\":
            chars.append((body[at], False))
            at += 1
            continue
        kind = body[at + 1]
        if kind in _HEX_DIGITS:
            digits = _HEX_DIGITS[kind]
            chars.append((chr(int(body[at + 2:at + 2 + digits], 16)), True))
            at += 2 + digits
        else:
            chars.append((_SIMPLE_ESCAPES.get(kind, kind), True))
            at += 2
    return chars


def _json_escaped(char: str) -> str:
    return json.dumps(char, ensure_ascii=False)[1:-1] if _is_special(ord(char)) else char


def _is_special(code: int) -> bool:
    return any(first <= code <= last for first, last in _SPECIAL)


def _json_class(body: str) -> str:
    """A character class over the raw text as the alternatives that write each of its characters in JSON."""
    negated = body.startswith("^")
    ranges = _class_ranges(_read(body[1:] if negated else body))
    if negated:  # the raw class excludes the specials too; the specials it does not exclude come as escapes
        raw = "[^" + _class_body(_merged(ranges + list(_SPECIAL))) + "]"
        escaped = [code for first, last in _SPECIAL for code in range(first, last + 1)
                   if not _within(code, ranges)]
    else:
        kept = _without_specials(ranges)
        raw = "[" + _class_body(kept) + "]" if kept else None
        escaped = [code for first, last in _SPECIAL for code in range(first, last + 1) if _within(code, ranges)]
    alternatives = ([raw] if raw else []) + [_literal(_json_escaped(chr(code))) for code in escaped]
    return alternatives[0] if len(alternatives) == 1 else "(" + " | ".join(alternatives) + ")"


def _class_ranges(chars: list[tuple[str, bool]]) -> Ranges:
    """A class body's characters as ranges: `a-z` is one; an escaped `-`, or one at either end, is itself."""
    ranges: Ranges = []
    at = 0
    while at < len(chars):
        if at + 2 < len(chars) and chars[at + 1] == ("-", False):
            ranges.append((ord(chars[at][0]), ord(chars[at + 2][0])))
            at += 3
        else:
            ranges.append((ord(chars[at][0]), ord(chars[at][0])))
            at += 1
    return ranges


def _merged(ranges: Ranges) -> Ranges:
    merged: Ranges = []
    for first, last in sorted(ranges):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


def _without_specials(ranges: Ranges) -> Ranges:
    kept: Ranges = []
    for first, last in _merged(ranges):
        for special_first, special_last in _SPECIAL:
            if first <= special_last and special_first <= last:
                if first < special_first:
                    kept.append((first, special_first - 1))
                first = max(first, special_last + 1)
        if first <= last:
            kept.append((first, last))
    return kept


def _within(code: int, ranges: Ranges) -> bool:
    return any(first <= code <= last for first, last in ranges)


def _class_body(ranges: Ranges) -> str:
    return "".join(_char(first) if first == last else f"{_char(first)}-{_char(last)}" for first, last in ranges)


def _char(code: int) -> str:
    """One character as it may stand in an EBNF terminal (printable ASCII as itself, anything else by code)."""
    if 0x20 <= code < 0x7F and chr(code) not in '"\\[]-^':
        return chr(code)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _literal(text: str) -> str:
    return '"' + "".join(_char(ord(char)) for char in text) + '"'
