"""Incremental prompts (issue 42): a turn that extends a known prompt tokenizes only what it adds, and its tokens
are exactly a full render's, over random sessions on both paths, where rendering is stable and where it is not."""

from __future__ import annotations

import copy
import datetime
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server.model_settings import ModelSettings
from server.paths.chat_template import ChatTemplateRenderer
from server.paths.harmony import HarmonyPath, harmony_conversation
from server.paths.tools import tool_table
from server.prompts.chat_tokens import IncrementalTokenizer, common_prefix_length
from server.prompts.harmony_tokens import HarmonyMessageTokens
from server.prompts.known import KnownPrompt, KnownPrompts, PromptKeys
from server.requests import ResponsesRequest

SETTINGS = settings(derandomize=True, max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# Text that tries the tokenizer's seams: its own special tokens spelled out, spaces and newlines at the edges,
# words a template writes, non-ASCII.
TEXT = st.lists(st.sampled_from(["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|start|>", "<|end|>", " ", "\n",
                                "  ", "assistant", "user", "hello", "Hello", "world", "{", "}", "\"", "é", "日本",
                                "1", " 2", "\t", "x"]), max_size=12).map("".join)
TOOLS = [{"type": "function", "name": "shell", "description": "Runs a command.",
          "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}]

# A template that rewrites earlier turns, as Qwen3's does: reasoning is shown only after the last user message.
FORGETFUL_TEMPLATE = (
    "{%- set ns = namespace(last_user=-1) %}{%- for m in messages %}{%- if m.role == 'user' %}"
    "{%- set ns.last_user = loop.index0 %}{%- endif %}{%- endfor %}"
    "{%- for message in messages %}<|im_start|>{{ message.role }}\n"
    "{% if message.reasoning_content and loop.index0 > ns.last_user %}<think>{{ message.reasoning_content }}"
    "</think>\n{% endif %}{{ message.content }}"
    "{%- for call in message.tool_calls or [] %}<tool_call>{{ call.function.name }} "
    "{{ call.function.arguments | tojson }}</tool_call>{%- endfor %}<|im_end|>\n"
    "{% endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@st.composite
def turn_items(draw: Any, turn: int) -> list[dict[str, Any]]:
    """What one turn adds: the model's output of the turn before (reasoning, a message or a call with its
    output), then the user's next message."""
    items: list[dict[str, Any]] = []
    if draw(st.booleans()):
        items.append({"type": "reasoning", "summary": [],
                      "content": [{"type": "reasoning_text", "text": draw(TEXT) or "thinking"}]})
    if draw(st.booleans()):
        call = f"call_{turn}"
        items += [{"type": "function_call", "call_id": call, "name": "shell",
                   "arguments": json.dumps({"command": draw(TEXT)})},
                  {"type": "function_call_output", "call_id": call, "output": draw(TEXT)}]
    else:
        items.append({"role": "assistant", "content": draw(TEXT) or "ok"})
    if draw(st.booleans()):
        items.append({"role": "user", "content": draw(TEXT) or "go on"})
    return items


@st.composite
def sessions(draw: Any) -> list[list[dict[str, Any]]]:
    """A session's inputs, turn by turn: each extends the one before; now and then the client rewrites an earlier
    item (as a client dropping old reasoning does), which no known prompt may survive."""
    items: list[dict[str, Any]] = [{"role": "user", "content": draw(TEXT) or "start"}]
    turns = [list(items)]
    for turn in range(draw(st.integers(2, 6))):
        items = items + draw(turn_items(turn))
        if len(items) > 2 and draw(st.integers(0, 4)) == 0:
            index = draw(st.integers(0, len(items) - 1))
            if items[index].get("role") == "user":
                items[index] = {"role": "user", "content": draw(TEXT) + "(edited)"}
        turns.append(list(items))
    return turns


def _request(items: list[dict[str, Any]], instructions: str | None = "Be brief.") -> ResponsesRequest:
    return ResponsesRequest.model_validate({"model": "m", "input": items, "tools": TOOLS,
                                            "instructions": instructions})


def _chat_session(renderer: ChatTemplateRenderer, tokenizer: Any, turns: list[list[dict[str, Any]]]) -> list[str]:
    """Renders each turn extending the one before; every prompt is checked against a full tokenization."""
    known: KnownPrompt | None = None
    outcomes = []
    for items in turns:
        rendered = renderer.render(_request(items), known)
        assert rendered.token_ids == list(tokenizer.encode(rendered.text, add_special_tokens=False))
        assert rendered.known is not None and rendered.known.token_ids.tolist() == rendered.token_ids
        assert rendered.reused_tokens <= len(rendered.token_ids)
        outcomes.append(rendered.outcome)
        known = rendered.known
    return outcomes


@SETTINGS
@given(turns=sessions())
def test_a_chat_session_extended_turn_by_turn_is_tokenized_as_a_full_render(tokenizer: Any,
                                                                             turns: list[list[dict[str, Any]]]) -> None:
    outcomes = _chat_session(ChatTemplateRenderer(tokenizer), tokenizer, turns)
    assert outcomes[0] == "full" and set(outcomes[1:]) <= {"extended", "fallback"}


@pytest.fixture(scope="module")
def forgetful_tokenizer(tokenizer: Any) -> Any:
    forgetful = copy.deepcopy(tokenizer)
    forgetful.chat_template = FORGETFUL_TEMPLATE
    return forgetful


@SETTINGS
@given(turns=sessions())
def test_a_template_that_rewrites_earlier_turns_falls_back_with_the_same_tokens(
        forgetful_tokenizer: Any, turns: list[list[dict[str, Any]]]) -> None:
    _chat_session(ChatTemplateRenderer(forgetful_tokenizer), forgetful_tokenizer, turns)


def test_the_fallback_fires_when_the_template_rewrites_an_earlier_turn(forgetful_tokenizer: Any) -> None:
    """Reasoning shown on one turn is hidden on the next (a user message followed it): the known prompt is not
    extended, its tokens are reused only up to the change, and the prompt is still the full render's."""
    first = [{"role": "user", "content": "a"}, {"type": "reasoning", "summary": [],
                                                "content": [{"type": "reasoning_text", "text": "think hard"}]},
             {"role": "assistant", "content": "b"}]
    second = first + [{"role": "user", "content": "c"}]
    outcomes = _chat_session(ChatTemplateRenderer(forgetful_tokenizer), forgetful_tokenizer, [first, second])
    assert outcomes == ["full", "fallback"]
    outcomes = _chat_session(ChatTemplateRenderer(forgetful_tokenizer), forgetful_tokenizer, [second, second + [
        {"role": "assistant", "content": "d"}]])
    assert outcomes == ["full", "extended"]


def test_an_extended_turn_reuses_all_but_what_it_adds(tokenizer: Any) -> None:
    renderer = ChatTemplateRenderer(tokenizer)
    items = [{"role": "user", "content": "word " * 3000}]
    first = renderer.render(_request(items))
    second = renderer.render(_request(items + [{"role": "assistant", "content": "yes"},
                                               {"role": "user", "content": "and?"}]), first.known)
    assert second.outcome == "extended"
    added = len(second.token_ids) - len(first.token_ids)
    assert second.reused_tokens >= len(first.token_ids) - 4 and len(second.token_ids) - second.reused_tokens < added + 8


def _prefixing_tokenizer() -> Any:
    """A SentencePiece-like tokenizer: it writes a space before the first piece of its input only, so the text
    after a special token tokenizes differently alone."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    model = Tokenizer(models.BPE(unk_token="[UNK]"))
    model.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]", "<|im_start|>", "<|im_end|>"])
    model.train_from_iterator(["hello world the assistant user system said a b c 1 2 3"] * 50, trainer)
    prefixing = PreTrainedTokenizerFast(tokenizer_object=model)
    prefixing.chat_template = FORGETFUL_TEMPLATE
    return prefixing


def test_a_tokenizer_whose_splits_do_not_hold_is_never_cut() -> None:
    """The probe finds that this tokenizer's special tokens do not split it: every turn is tokenized in full, and
    right. Cut at them anyway (the probe skipped), the prompts come out wrong: the probe is what keeps them right."""
    prefixing = _prefixing_tokenizer()
    turns = [[{"role": "user", "content": "hello world"}],
             [{"role": "user", "content": "hello world"}, {"role": "assistant", "content": "said a b"},
              {"role": "user", "content": "hello"}]]
    assert IncrementalTokenizer(prefixing)._splits == {}
    renderer = ChatTemplateRenderer(prefixing)
    known = None
    for items in turns:
        rendered = renderer.render(_request(items, None), known)
        assert rendered.token_ids == prefixing.encode(rendered.text, add_special_tokens=False)
        assert rendered.reused_tokens == 0
        known = rendered.known
    unprobed = ChatTemplateRenderer(prefixing)
    unprobed._tokens._splits = {1: "<|im_start|>", 2: "<|im_end|>"}
    first = unprobed.render(_request(turns[0], None))
    second = unprobed.render(_request(turns[1], None), first.known)
    assert second.token_ids != prefixing.encode(second.text, add_special_tokens=False)


@SETTINGS
@given(turns=sessions(), with_tools=st.booleans())  # turns end in reasoning, calls or answers: analysis is dropped on some
def test_a_harmony_session_renders_as_render_conversation_for_completion(turns: list[list[dict[str, Any]]],
                                                                         with_tools: bool) -> None:
    from openai_harmony import RenderConversationConfig, Role

    path = HarmonyPath(ModelSettings(name="gpt-oss"), today=datetime.date(2026, 11, 27))
    encoding = path._encoding
    reused = []
    for items in turns:
        request = ResponsesRequest.model_validate({"model": "m", "input": items, "tools": TOOLS if with_tools else []})
        rendered = path.render(request)
        conversation = harmony_conversation(request, datetime.date(2026, 11, 27), tool_table(request))
        expected = encoding.render_conversation_for_completion(
            conversation, Role.ASSISTANT, config=RenderConversationConfig(auto_drop_analysis=True))
        assert rendered.token_ids == list(expected)
        reused.append(rendered.reused_tokens)
    assert reused[0] == 0 and all(count > 0 for count in reused[1:])  # the system message at least


def test_harmony_drops_earlier_analysis_once_a_final_answer_follows() -> None:
    """The case the per-message render must mirror: analysis before the first final answer is left out when the
    conversation's last assistant message is final, and kept while a call is the last."""
    from openai_harmony import Conversation, Message, RenderConversationConfig, Role

    path = HarmonyPath(ModelSettings(name="gpt-oss"))
    messages = [Message.from_role_and_content(Role.USER, "q"),
                Message.from_role_and_content(Role.ASSISTANT, "thinking").with_channel("analysis"),
                Message.from_role_and_content(Role.ASSISTANT, "answer").with_channel("final")]
    cache = HarmonyMessageTokens(path._encoding)
    for conversation in (messages, messages[:2], messages + [Message.from_role_and_content(Role.USER, "more")]):
        expected = path._encoding.render_conversation_for_completion(
            Conversation.from_messages(conversation), Role.ASSISTANT,
            config=RenderConversationConfig(auto_drop_analysis=True))
        assert cache.render_for_completion(conversation).token_ids == list(expected)


def test_known_prompts_are_bounded_by_bytes_and_a_prompt_under_several_keys_counts_once() -> None:
    def prompt(characters: int) -> KnownPrompt:
        from array import array

        return KnownPrompt("x" * characters, array("l", range(characters // 4)), array("l"), array("l"))

    size = prompt(10_000).size
    known = KnownPrompts(max_bytes=3 * size)
    shared = prompt(10_000)
    known.keep(["a", "b", "c"], shared)
    assert known.bytes == size and known.find(["b"]) is shared
    known.keep(["d"], prompt(10_000))
    known.keep(["e"], prompt(10_000))
    assert known.bytes == 3 * size
    known.keep(["f"], prompt(10_000))  # the least recently used goes: the shared prompt, under all its keys
    assert known.bytes <= 3 * size and known.find(["a", "b", "c"]) is None and known.find(["f"]) is not None
    known.keep(["g"], prompt(40_000))  # larger than the whole bound: not kept
    assert known.find(["g"]) is None


def test_prompt_keys_stay_within_their_project() -> None:
    ours = PromptKeys("alpha", previous_response_id="resp_1", cache_key="k", continuable=True)
    theirs = PromptKeys("beta", previous_response_id="resp_1", cache_key="k", continuable=True)
    assert not set(ours.finding()) & set(theirs.finding())
    assert ("alpha", "response", "resp_2") in ours.keeping("resp_2")
    assert ("alpha", "response", "resp_2") not in PromptKeys("alpha", cache_key="k").keeping("resp_2")


@given(first=st.text(max_size=300), second=st.text(max_size=300), shared=st.text(max_size=300))
@settings(derandomize=True, max_examples=200, deadline=None)
def test_common_prefix_length(first: str, second: str, shared: str) -> None:
    a, b = shared + first, shared + second
    length = common_prefix_length(a, b)
    assert a[:length] == b[:length]
    assert length == min(len(a), len(b)) or a[length] != b[length]
