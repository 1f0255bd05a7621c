"""A custom tool's grammar over its JSON-escaped input (the chat-template path's `{"input": "..."}`): a text follows
the grammar exactly when its escaped form follows the rewritten grammar."""

from __future__ import annotations

import json
import random
import re

import pytest

from server.constraints.closing import _compiled
from server.constraints.custom_grammar import custom_tool_grammar
from server.constraints.json_string import json_string_grammar, renamed_root
from tests.test_grammar_closing import APPLY_PATCH, SENTENCE

# Regexes whose terminals hold what JSON escapes: quotes, backslashes, control characters, in literals and in
# classes, negated or not, next to ordinary and non-ASCII characters.
REGEXES = [SENTENCE, r'say "[a-z\\]+"\n', r'[^"x]{1,4}', r'[\x00-\x1f a]+', r'(\t|\\|é)*[^\x00-\x08]', r'[ -~]*',
           r'[\]\-"]+']
ALPHABET = ['a', 'b', 'x', ' ', '.', '"', '\\', '\n', '\t', '\x01', '\x1f', 'é', '~', ']', '-', '\u2028', '😀']


def follows(ebnf: str, text: str) -> bool:
    import xgrammar

    matcher = xgrammar.GrammarMatcher(_compiled(ebnf), terminate_without_stop_token=True)
    return matcher.accept_string(text) and matcher.is_completed()


def regex_grammar(regex: str) -> str:
    ebnf = custom_tool_grammar({"name": "t", "format": {"type": "grammar", "syntax": "regex", "definition": regex}},
                               "tools")
    assert ebnf is not None
    return ebnf


def escaped(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1]


@pytest.mark.parametrize("regex", REGEXES)
def test_a_text_follows_the_grammar_exactly_when_its_escaped_form_follows_the_rewritten_one(regex: str) -> None:
    rewritten = json_string_grammar(regex_grammar(regex))
    sample = random.Random(regex)
    texts = ["".join(sample.choice(ALPHABET) for _ in range(sample.randrange(0, 7))) for _ in range(300)]
    texts += [match for match in ('say "a\\b"\n', "abc def.", '"]-', "\t\\é\x09", "a\x1f") if re.fullmatch(regex, match)]
    assert any(re.fullmatch(regex, text, re.DOTALL) for text in texts)  # the sample holds sentences of each
    for text in texts:
        expected = re.fullmatch(regex, text, re.DOTALL) is not None
        assert follows(rewritten, escaped(text)) is expected, (regex, text)
        if any(char in text for char in '\n\t\x01\x1f'):
            assert not follows(rewritten, text), (regex, text)  # a raw control character is never JSON


def test_codex_apply_patch_is_held_over_its_escaped_patch() -> None:
    lark = custom_tool_grammar({"name": "apply_patch", "format": {"type": "grammar", "syntax": "lark",
                                                                  "definition": APPLY_PATCH}}, "tools")
    assert lark is not None
    patch = '*** Begin Patch\n*** Add File: a "b".txt\n+say "hi"\\n\n*** End Patch\n'
    assert follows(lark, patch)
    assert follows(json_string_grammar(lark), escaped(patch))
    assert not follows(json_string_grammar(lark), patch)
    assert not follows(json_string_grammar(lark), escaped(patch.replace("*** End", "*** Fin")))


def test_the_root_renamed_is_only_the_rule_named_root() -> None:
    ebnf = regex_grammar(r'root[a-z]"root"')
    renamed = renamed_root(ebnf, "custom_input")
    assert follows(f'root ::= "<" custom_input ">"\n{renamed}', '<rootb"root">')
    assert "root_" in ebnf or "root_" not in renamed  # root_N rules keep their names
