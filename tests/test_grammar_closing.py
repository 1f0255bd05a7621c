"""A custom tool's grammar closes within the output budget: the shortest completion, and the run that writes it."""

from __future__ import annotations

import json
import re
from typing import Any, Iterator

import jsonschema
import pytest

from conformance.contract import validate_events
from server.config import ServerConfig
from server.constraints.closing import shortest_completion
from server.constraints.custom_grammar import custom_tool_grammar
from server.http.app import create_app
from server.paths.harmony import harmony_encoding
from server.runs.context import ServingContext
from streaming.ids import counting_ids
from tests.conftest import serve_in_thread
from tests.scripted_engine import ScriptedEngine, steps_from_tokens
from tests.test_server import MODEL, Harness

ECHO = 'start: "echo " WORD\nWORD: /[a-z]{1,12}/'
SENTENCE = r"[a-z]+( [a-z]+)*\."  # unbounded: a model that never writes the period never ends it
# Codex's apply_patch grammar (codex-rs tool_apply_patch.lark), as Codex sends it for a custom tool.
APPLY_PATCH = r"""
start: begin_patch hunk+ end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF?

hunk: add_hunk | delete_hunk | update_hunk
add_hunk: "*** Add File: " filename LF add_line+
delete_hunk: "*** Delete File: " filename LF
update_hunk: "*** Update File: " filename LF change_move? change?

filename: /(.+)/
add_line: "+" /(.*)/ LF -> line

change_move: "*** Move to: " filename LF
change: (change_context | change_line)+ eof_line?
change_context: ("@@" | "@@ " /(.+)/) LF
change_line: ("+" | "-" | " ") /(.*)/ LF
eof_line: "*** End of File" LF

%import common.LF
"""


def grammar(syntax: str, definition: str) -> str:
    ebnf = custom_tool_grammar({"name": "t", "format": {"type": "grammar", "syntax": syntax,
                                                         "definition": definition}}, "tools")
    assert ebnf is not None
    return ebnf


@pytest.mark.parametrize(("text", "shortest"), [("echo hel", 0), ("echo ", 1), ("ech", 3), ("", 6)])
def test_the_shortest_completion_of_a_lark_grammar(text: str, shortest: int) -> None:
    completion = shortest_completion(grammar("lark", ECHO), text, most=64)
    assert completion is not None and len(completion) == shortest
    assert re.fullmatch(r"echo [a-z]{1,12}", text + completion)


def test_a_patch_cut_mid_line_closes_as_a_patch() -> None:
    text = "*** Begin Patch\n*** Add File: notes.txt\n+first line\n+second li"
    completion = shortest_completion(grammar("lark", APPLY_PATCH), text, most=64)
    assert completion == "\n*** End Patch"


def test_a_completion_longer_than_allowed_is_none() -> None:
    assert shortest_completion(grammar("lark", APPLY_PATCH), "*** Begin Patch\n", most=10) is None
    assert shortest_completion(grammar("regex", SENTENCE), "two words", most=0) is None


def test_text_off_the_grammar_has_no_completion() -> None:
    assert shortest_completion(grammar("regex", SENTENCE), "Capital", most=64) is None


SENTENCE_TOOL = {"type": "custom", "name": "say", "description": "Says one sentence.",
                 "format": {"type": "grammar", "syntax": "regex", "definition": SENTENCE}}


@pytest.fixture(scope="module")
def harmony() -> Iterator[Harness]:
    engine = ScriptedEngine(tokenizer=None, scripts=[[]], max_model_len=131072)
    context = ServingContext(config=ServerConfig(served_model_name=MODEL, harmony=True),
                             engine_factory=lambda: engine, ids=counting_ids())
    with serve_in_thread(create_app(context)) as base_url:
        yield Harness(engine, base_url)


def endless_call(words: int) -> tuple[list[int], int]:
    """A custom call whose sentence never ends (as a random model writes one), and where its body starts."""
    encoding = harmony_encoding()
    header = encoding.encode("<|channel|>commentary to=functions.say<|message|>", allowed_special="all")
    return header + encoding.encode(" ".join(["word"] * words)), len(header)


def closed_call(harness: Harness, budget: int, stream: bool) -> tuple[dict[str, Any], int]:
    """Ask for a sentence under `tool_choice: required` within `budget` (streamed, or as JSON): the response
    completes with one custom call whose input follows the grammar; that call, and the output tokens used."""
    body: dict[str, Any] = {"input": "Say something.", "tools": [SENTENCE_TOOL], "tool_choice": "required",
                            "max_output_tokens": budget}
    if stream:
        response = validate_events(harness.raw_stream(**body))
        status, output = response.status, [item.model_dump() for item in response.output]
        used_tokens = response.usage.output_tokens if response.usage else 0
    else:
        answer = harness.post(**body)
        assert answer.status_code == 200, answer.text
        data = answer.json()
        status, output, used_tokens = data["status"], data["output"], data["usage"]["output_tokens"]
    assert status == "completed", output
    (call,) = [item for item in output if item["type"] == "custom_tool_call"]
    assert re.fullmatch(SENTENCE, call["input"]), call["input"]
    return call, used_tokens


@pytest.mark.parametrize("budget", [24, 40, 100])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_custom_call_the_budget_would_cut_is_closed_by_its_grammar(harmony: Harness, budget: int,
                                                                     stream: bool) -> None:
    tokens, body_start = endless_call(words=400)
    tokens = tokens[:budget]  # as the engine stops at max_tokens
    harmony.play(steps_from_tokens(tokens, cuts=list(range(1, len(tokens))), finish="length"))
    call, used_tokens = closed_call(harmony, budget, stream)
    written = harmony_encoding().decode(tokens[body_start:used_tokens])
    assert call["input"].startswith(written)
    assert used_tokens + len((call["input"][len(written):]).encode()) <= budget, "the closing fits the budget"
    assert harmony.engine_aborted_last_request(), "the model's endless sentence is not generated on"


def test_a_call_that_ends_by_itself_is_left_alone(harmony: Harness) -> None:
    encoding = harmony_encoding()
    tokens = encoding.encode("<|channel|>commentary to=functions.say<|message|>hello there.<|call|>",
                             allowed_special="all")
    harmony.play(steps_from_tokens(tokens, cuts=list(range(1, len(tokens)))))
    data = harmony.post(input="Say something.", tools=[SENTENCE_TOOL], tool_choice="required",
                        max_output_tokens=len(tokens) + 2).json()
    assert data["status"] == "completed"
    assert [item["input"] for item in data["output"] if item["type"] == "custom_tool_call"] == ["hello there."]


@pytest.fixture(scope="module")
def chat(tokenizer: Any) -> Iterator[Harness]:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    context = ServingContext(config=ServerConfig(served_model_name=MODEL), engine_factory=lambda: engine,
                             ids=counting_ids())
    with serve_in_thread(create_app(context)) as base_url:
        yield Harness(engine, base_url)


@pytest.mark.parametrize("budget", [40, 100])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_chat_custom_call_the_budget_would_cut_is_closed_by_its_grammar(chat: Harness, tokenizer: Any, budget: int,
                                                                          stream: bool) -> None:
    """The chat-template path (hermes): the call is `{"input": "..."}` in the model's own tags; its escaped input is
    completed under the grammar, then the call's end, read by the tool parser as if the model wrote them."""
    head = '<tool_call>\n{"name": "say", "arguments": {"input": "'
    tokens = tokenizer.encode(head + " ".join(["word"] * 400), add_special_tokens=False)[:budget]
    chat.play(steps_from_tokens(tokens, cuts=list(range(1, len(tokens))), finish="length"))
    call, used_tokens = closed_call(chat, budget, stream)
    whole = head + call["input"] + '"}}\n</tool_call>'  # (the sentence has nothing JSON escapes)
    written = tokenizer.decode(tokens[:used_tokens])
    assert whole.startswith(written)
    closing = whole[len(written):]
    assert used_tokens + len(closing.encode()) <= budget, "the closing fits the budget"
    assert chat.engine_aborted_last_request(), "the model's endless sentence is not generated on"


LOOKUP_TOOL = {"type": "function", "name": "lookup", "description": "Looks words up.", "strict": True,
               "parameters": {"type": "object", "properties": {"words": {"type": "string"}}, "required": ["words"],
                              "additionalProperties": False}}


def closed_function_call(harness: Harness, budget: int) -> tuple[dict[str, Any], int]:
    """Ask for a forced function call within `budget` (streamed): the response completes with one call whose
    arguments are JSON valid against the tool's schema; that call, and the output tokens used."""
    response = validate_events(harness.raw_stream(
        input="Look something up.", tools=[LOOKUP_TOOL], tool_choice={"type": "function", "name": "lookup"},
        max_output_tokens=budget))
    output = [item.model_dump() for item in response.output]
    assert response.status == "completed", output
    (call,) = [item for item in output if item["type"] == "function_call"]
    jsonschema.validate(json.loads(call["arguments"]), LOOKUP_TOOL["parameters"])
    return call, response.usage.output_tokens if response.usage else 0


@pytest.mark.parametrize("budget", [24, 40, 100])
def test_a_function_call_the_budget_would_cut_is_closed_by_its_schema(harmony: Harness, budget: int) -> None:
    """A function call's string that never ends (a random model's) was cut by the budget: the call incomplete, and
    a hosted call (file_search, MCP) never run. Its arguments now close under their schema, as a custom call's do."""
    encoding = harmony_encoding()
    header = encoding.encode("<|channel|>commentary to=functions.lookup<|message|>", allowed_special="all")
    tokens = (header + encoding.encode('{"words": "' + " ".join(["word"] * 400)))[:budget]
    harmony.play(steps_from_tokens(tokens, cuts=list(range(1, len(tokens))), finish="length"))
    call, used_tokens = closed_function_call(harmony, budget)
    written = encoding.decode(tokens[len(header):used_tokens])
    assert call["arguments"].startswith(written)
    assert used_tokens + len(call["arguments"][len(written):].encode()) <= budget, "the closing fits the budget"
    assert harmony.engine_aborted_last_request()


@pytest.mark.parametrize("budget", [40, 100])
def test_a_chat_function_call_the_budget_would_cut_is_closed_by_its_schema(chat: Harness, tokenizer: Any,
                                                                           budget: int) -> None:
    head = '<tool_call>\n{"name": "lookup", "arguments": {"words": "'
    tokens = tokenizer.encode(head + " ".join(["word"] * 400), add_special_tokens=False)[:budget]
    chat.play(steps_from_tokens(tokens, cuts=list(range(1, len(tokens))), finish="length"))
    call, used_tokens = closed_function_call(chat, budget)
    whole = '<tool_call>\n{"name": "lookup", "arguments": ' + call["arguments"] + '}\n</tool_call>'
    written = tokenizer.decode(tokens[:used_tokens])
    assert whole.startswith(written)
    assert used_tokens + len(whole[len(written):].encode()) <= budget, "the closing fits the budget"
    assert chat.engine_aborted_last_request()
