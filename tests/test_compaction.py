"""POST /v1/responses/compact: the model's summary sealed into one compaction item that later requests open."""

from __future__ import annotations

from typing import Any, Iterator

import httpx
import openai
import pytest

from server.config import ServerConfig
from server.history.compaction import SUMMARY_INSTRUCTION
from server.history.sealing import Sealer
from server.http.app import create_app
from server.runs.context import ServingContext
from streaming.ids import counting_ids
from tests.conftest import serve_in_thread
from tests.scripted_engine import ScriptedEngine
from tests.test_server import MODEL, SEALER, Harness  # noqa: F401
from tests.test_server import in_process_harness as harness  # noqa: F401  (the fixture, by this name)
from tests.test_store import say
from conformance.contract import validate_events

HISTORY = [{"role": "user", "content": "My cat is called Miso."},
           {"role": "assistant", "content": "A lovely name."},
           {"role": "user", "content": "She is three years old."}]


def compact(harness: Harness, tokenizer: Any, summary: str, **body: Any) -> Any:  # noqa: F811
    harness.play(say(tokenizer, summary))
    return harness.client.responses.compact(model=MODEL, **body)  # strict response validation


def test_compact_returns_one_sealed_item_made_by_the_model(harness: Harness, tokenizer: Any) -> None:  # noqa: F811
    compacted = compact(harness, tokenizer, "The user has a three-year-old cat, Miso.", input=HISTORY)
    prompt = tokenizer.decode(harness.engine.requests[-1].prompt_token_ids)
    assert SUMMARY_INSTRUCTION in prompt and "My cat is called Miso." in prompt
    assert compacted.object == "response.compaction"
    [item] = compacted.output
    assert item.type == "compaction" and item.id.startswith("cmp_")  # type: ignore[union-attr]
    assert "Miso" not in item.encrypted_content  # type: ignore[union-attr]
    assert compacted.usage.input_tokens == len(harness.engine.requests[-1].prompt_token_ids)
    assert compacted.usage.output_tokens > 0
    opened = SEALER.open("compaction", item.encrypted_content)  # type: ignore[union-attr]
    assert opened == {"summary": "The user has a three-year-old cat, Miso.",
                      "user_messages": ["My cat is called Miso.", "She is three years old."]}


def test_a_compaction_in_later_input_is_rendered_as_context(harness: Harness, tokenizer: Any) -> None:  # noqa: F811
    compacted = compact(harness, tokenizer, "Cat: Miso, three years old.", input=HISTORY)
    item = compacted.output[0].model_dump(exclude_none=True)
    harness.play(say(tokenizer, "Miso."))
    answer = harness.client.responses.create(model=MODEL, input=[item, {"role": "user", "content": "Her name?"}])
    assert answer.status == "completed"
    prompt = tokenizer.decode(harness.engine.requests[-1].prompt_token_ids)
    for text in ("My cat is called Miso.", "She is three years old.", "Cat: Miso, three years old.", "Her name?"):
        assert text in prompt
    assert "A lovely name." not in prompt  # what the summary replaced
    again = compact(harness, tokenizer, "Still Miso.", input=[item, {"role": "user", "content": "Her name?"}])
    users = SEALER.open("compaction", again.output[0].encrypted_content)["user_messages"]  # type: ignore[union-attr]
    assert users == ["My cat is called Miso.", "She is three years old.", "Her name?"]


def test_a_bad_compaction_or_request_is_a_400(harness: Harness, tokenizer: Any) -> None:  # noqa: F811
    sealed = compact(harness, tokenizer, "x", input=HISTORY).output[0].encrypted_content  # type: ignore[union-attr]
    for value in (sealed[:-6], Sealer.ephemeral().seal("compaction", {"summary": "", "user_messages": []}),
                  SEALER.seal("reasoning", {"text": "moved"}), SEALER.seal("compaction", {"text": "wrong"})):
        response = harness.post(input=[{"type": "compaction", "encrypted_content": value},
                                       {"role": "user", "content": "hi"}])
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] == "invalid_encrypted_content"
    no_model = httpx.post(f"{harness.base_url}/responses/compact", json={"input": "hi"}, timeout=30)
    assert no_model.status_code == 400 and no_model.json()["error"]["param"] == "model"
    try:
        harness.client.responses.compact(model=MODEL, input=[])
        raise AssertionError("an empty compaction was accepted")
    except openai.BadRequestError as exc:
        assert exc.body["param"] == "input"  # type: ignore[index]


LONG_HISTORY = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"Fact {i}: the number {i} is "
                 + ("even" if i % 2 == 0 else "odd") + ". " * 20} for i in range(60)]


def test_context_management_compacts_past_the_threshold_and_answers_from_it(harness: Harness,  # noqa: F811
                                                                           tokenizer: Any) -> None:
    harness.play(say(tokenizer, "Sixty facts about parity were listed."), say(tokenizer, "Yes."))
    events = harness.raw_stream(input=LONG_HISTORY + [{"role": "user", "content": "Is 4 even?"}],
                                context_management=[{"type": "compaction", "compact_threshold": 1000}])
    final = validate_events(events)
    summary_prompt, answer_prompt = (tokenizer.decode(r.prompt_token_ids) for r in harness.engine.requests[-2:])
    assert SUMMARY_INSTRUCTION in summary_prompt and "Fact 57" in summary_prompt
    assert "Fact 57" not in answer_prompt and "Sixty facts about parity were listed." in answer_prompt
    assert "Is 4 even?" in answer_prompt
    assert [item.type for item in final.output] == ["compaction", "message"] and final.output_text == "Yes."
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert added[0]["item"]["type"] == "compaction" and added[0]["output_index"] == 0
    # While the summary is sampled the client is told (the item opens first, and closes with the sealed content)
    kinds = [e["type"] for e in events]
    assert kinds[2:4] == ["response.output_item.added", "response.compaction.compacting"], kinds[:6]
    compacting = events[3]
    assert (compacting["item_id"], compacting["output_index"]) == (final.output[0].id, 0)
    assert final.usage.input_tokens == sum(len(r.prompt_token_ids) for r in harness.engine.requests[-2:])
    # A later request that carries the compaction item continues from it; what came before it is not read.
    harness.play(say(tokenizer, "Yes, 6 too."))
    later = harness.client.responses.create(model=MODEL, input=LONG_HISTORY[:4] + [
        final.output[0].model_dump(exclude_none=True), {"role": "user", "content": "And 6?"}])
    prompt = tokenizer.decode(harness.engine.requests[-1].prompt_token_ids)
    assert later.output_text == "Yes, 6 too." and "Sixty facts" in prompt and "Fact 1:" not in prompt


def test_below_the_threshold_nothing_is_compacted(harness: Harness, tokenizer: Any) -> None:  # noqa: F811
    harness.play(say(tokenizer, "Yes."))
    answer = harness.client.responses.create(model=MODEL, input="Is 4 even?",
                                             extra_body={"context_management": [{"type": "compaction",
                                                                                 "compact_threshold": 1000}]})
    assert [item.type for item in answer.output] == ["message"]
    assert SUMMARY_INSTRUCTION not in tokenizer.decode(harness.engine.requests[-1].prompt_token_ids)
    bad = harness.post(input="hi", context_management=[{"type": "compaction", "compact_threshold": 5}])
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "context_management[0].compact_threshold"


TRIGGER = {"type": "compaction_trigger"}


def test_a_compaction_trigger_makes_the_response_one_compaction_item(harness: Harness,  # noqa: F811
                                                                     tokenizer: Any) -> None:
    """Codex's remote compaction: the history, then `compaction_trigger`, in an ordinary request; the output is one
    `compaction` item, the response completed (streamed and not, stored and not); Codex then sends its user messages,
    the item, and its next message."""
    for stream, store in ((True, False), (False, True)):
        harness.play(say(tokenizer, "Cat: Miso, three years old."))
        body = {"input": [*HISTORY, TRIGGER], "store": store, "tools": [], "parallel_tool_calls": True}
        final = validate_events(harness.raw_stream(**body)) if stream else harness.client.responses.create(
            model=MODEL, **body)
        assert final.status == "completed" and [item.type for item in final.output] == ["compaction"]
        summary_prompt = tokenizer.decode(harness.engine.requests[-1].prompt_token_ids)
        assert SUMMARY_INSTRUCTION in summary_prompt and "She is three years old." in summary_prompt
        warmed = tokenizer.decode(harness.engine.prefilled[-1].prompt_token_ids)  # the next turn's context, computed
        assert "Cat: Miso, three years old." in warmed and "A lovely name." not in warmed
        item = final.output[0].model_dump(exclude_none=True)
        harness.play(say(tokenizer, "Miso."))
        answer = harness.client.responses.create(model=MODEL, input=[
            HISTORY[0], HISTORY[2], item, {"role": "user", "content": "Her name?"}])
        prompt = tokenizer.decode(harness.engine.requests[-1].prompt_token_ids)
        assert answer.output_text == "Miso." and "Cat: Miso, three years old." in prompt and "Her name?" in prompt
        assert "A lovely name." not in prompt and prompt.startswith(warmed[:len(warmed) // 2])


def test_a_compaction_trigger_over_a_websocket(harness: Harness, tokenizer: Any) -> None:  # noqa: F811
    """As Codex's built-in provider sends it: over its WebSocket, then the next turn on the same connection."""
    from tests.test_websocket import Socket, checked

    harness.play(say(tokenizer, "Cat: Miso, three years old."), say(tokenizer, "Miso."))
    socket = Socket(harness.base_url)
    socket.send({"type": "response.create", "model": MODEL, "input": [*HISTORY, TRIGGER], "store": False})
    final = validate_events(checked(socket.until_terminal()))
    assert final.status == "completed" and [item.type for item in final.output] == ["compaction"]
    socket.send({"type": "response.create", "model": MODEL, "store": False, "input": [
        HISTORY[0], HISTORY[2], final.output[0].model_dump(exclude_none=True), {"role": "user", "content": "Name?"}]})
    answer = validate_events(checked(socket.until_terminal()))
    assert answer.output_text == "Miso."
    assert "Cat: Miso, three years old." in tokenizer.decode(harness.engine.requests[-1].prompt_token_ids)


def test_a_compaction_trigger_compacts_a_history_larger_than_the_window(harness: Harness,  # noqa: F811
                                                                        tokenizer: Any) -> None:
    """Codex compacts when its history has outgrown the window, most of it in a few huge tool outputs."""
    huge = [item for n in range(3) for item in (
        {"type": "function_call", "call_id": f"c{n}", "name": "shell", "arguments": "{}"},
        {"type": "function_call_output", "call_id": f"c{n}", "output": f"line {n}\n" * 2000})]
    history = [HISTORY[0], *huge, {"role": "user", "content": "Summarize the logs."}]
    assert harness.post(input=history, store=False).status_code == 400  # as a turn, it does not fit
    harness.play(say(tokenizer, "Three long logs were read."))
    final = harness.client.responses.create(model=MODEL, input=[*history, TRIGGER], store=False)  # type: ignore[list-item]
    assert final.status == "completed" and [item.type for item in final.output] == ["compaction"]
    assert len(harness.engine.requests[-1].prompt_token_ids) < harness.engine.max_model_len


def test_a_summary_keeps_the_whole_conversation_by_cutting_huge_tool_outputs(harness: Harness,  # noqa: F811
                                                                             tokenizer: Any) -> None:
    """A history dominated by a few huge tool outputs (Codex's, when a command prints thousands of lines): the
    summarizing request keeps every item, each huge output cut to its head and tail with a marker the model reads,
    rather than losing the oldest items (the user's goal among them) to make room."""
    huge = [item for n in range(3) for item in (
        {"type": "function_call", "call_id": f"c{n}", "name": "shell", "arguments": "{}"},
        {"type": "function_call_output", "call_id": f"c{n}", "output": f"first of {n}\n" + "line\n" * 4000
         + f"last of {n}"})]
    harness.play(say(tokenizer, "Three long logs were read."))
    compacted = harness.client.responses.compact(model=MODEL, input=[HISTORY[0], *huge, HISTORY[2]])  # type: ignore[list-item]
    assert compacted.output[0].type == "compaction"
    prompt = tokenizer.decode(harness.engine.requests[-1].prompt_token_ids)
    assert "My cat is called Miso." in prompt and "She is three years old." in prompt
    for n in range(3):
        assert f"first of {n}" in prompt and f"last of {n}" in prompt
    assert prompt.count("characters of this output were cut") == 3


@pytest.fixture(scope="module")
def compacting(tokenizer: Any) -> Iterator[Harness]:
    """The app as `--compact-on-overflow` (the command line's default) serves it."""
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    context = ServingContext(config=ServerConfig(served_model_name=MODEL, compact_on_overflow=True),
                             engine_factory=lambda: engine, ids=counting_ids(), sealer=SEALER)
    with serve_in_thread(create_app(context)) as base_url:
        yield Harness(engine, base_url)


def huge_session(lines: int = 2000) -> list[dict[str, Any]]:
    """A Codex-like session that has outgrown the window: three commands whose outputs fill it."""
    calls = [item for n in range(3) for item in (
        {"type": "function_call", "call_id": f"c{n}", "name": "shell", "arguments": "{}"},
        {"type": "function_call_output", "call_id": f"c{n}", "output": f"line {n}\n" * lines})]
    return [HISTORY[0], *calls, {"role": "user", "content": "What is my cat called?"}]


def test_an_overflowing_turn_is_compacted_first_and_answered(compacting: Harness, tokenizer: Any) -> None:
    """A client that never learned the window (Codex on its built-in provider) sends more than fits, truncation
    unset: the server summarizes the history, answers from the summary, and the compaction item comes first in the
    output, so the client's next turn carries it instead of the history; streamed and not."""
    history = huge_session()
    for stream in (False, True):
        compacting.play(say(tokenizer, "The user's cat is Miso; three logs were read."), say(tokenizer, "Miso."))
        final = validate_events(compacting.raw_stream(input=history, store=False)) if stream else \
            compacting.client.responses.create(model=MODEL, input=history, store=False)  # type: ignore[arg-type]
        assert final.status == "completed" and [item.type for item in final.output] == ["compaction", "message"]
        assert final.output_text == "Miso."
        summary_prompt, answer_prompt = (tokenizer.decode(r.prompt_token_ids)
                                         for r in compacting.engine.requests[-2:])
        assert SUMMARY_INSTRUCTION in summary_prompt and "What is my cat called?" in summary_prompt
        assert "line 2" not in answer_prompt and "The user's cat is Miso" in answer_prompt
        assert all(len(r.prompt_token_ids) < compacting.engine.max_model_len for r in compacting.engine.requests[-2:])
    compacting.play(say(tokenizer, "Three."))
    later = compacting.client.responses.create(model=MODEL, store=False, input=[  # type: ignore[list-item]
        final.output[0].model_dump(exclude_none=True), {"role": "user", "content": "How many logs?"}])
    assert later.output_text == "Three." and [item.type for item in later.output] == ["message"]


def test_an_overflowing_turn_over_a_websocket_is_compacted(compacting: Harness, tokenizer: Any) -> None:
    """As Codex's built-in provider sends it: over its WebSocket, stateless."""
    from tests.test_websocket import Socket, checked

    compacting.play(say(tokenizer, "Miso, and three logs."), say(tokenizer, "Miso."))
    socket = Socket(compacting.base_url)
    socket.send({"type": "response.create", "model": MODEL, "input": huge_session(), "store": False})
    final = validate_events(checked(socket.until_terminal()))
    assert [item.type for item in final.output] == ["compaction", "message"] and final.output_text == "Miso."


def test_an_overflow_the_client_asked_to_refuse_is_a_400(compacting: Harness, harness: Harness) -> None:  # noqa: F811
    """`truncation: "disabled"` said outright, or a server run with --no-compact-on-overflow: OpenAI's 400."""
    for served, body in ((compacting, {"truncation": "disabled"}), (harness, {})):
        refused = served.post(input=huge_session(), store=False, **body)
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "context_length_exceeded"
    last_user_alone = compacting.post(input="word " * 9000, store=False)  # nothing older to summarize
    assert last_user_alone.status_code == 400 and last_user_alone.json()["error"]["code"] == "context_length_exceeded"


def test_a_compaction_keeps_only_the_newest_user_messages_that_fit(compacting: Harness, tokenizer: Any) -> None:
    """A session of many long user messages overflows: the compaction item keeps the newest of them, up to as many
    characters as the window has tokens (the older are in the summary), so the answer after it fits."""
    many = [{"role": "user", "content": f"Message {i}: " + "word " * 100} for i in range(100)]  # ~10k tokens
    compacting.play(say(tokenizer, "A hundred messages of words."), say(tokenizer, "Done."))
    final = compacting.client.responses.create(model=MODEL, input=many, store=False)  # type: ignore[arg-type]
    assert [item.type for item in final.output] == ["compaction", "message"] and final.output_text == "Done."
    users = SEALER.open("compaction", final.output[0].encrypted_content)["user_messages"]  # type: ignore[union-attr]
    assert users[-1].startswith("Message 99:") and 1 < len(users) < 100
    assert sum(len(text) for text in users) <= compacting.engine.max_model_len
    answer_prompt = compacting.engine.requests[-1].prompt_token_ids
    assert len(answer_prompt) < compacting.engine.max_model_len and "Message 0:" not in tokenizer.decode(answer_prompt)


def test_an_overflowing_turn_renders_its_whole_history_once_before_the_summary(tokenizer: Any,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A turn that overflows is rendered whole once (to learn that it does not fit), then summarized: what stands in
    for its run until the compacted one replaces it is never generated from, and costs no render of the history
    (it rendered the history again, and again for each step of the truncation's search)."""
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    context = ServingContext(config=ServerConfig(served_model_name=MODEL, compact_on_overflow=True),
                             engine_factory=lambda: engine, ids=counting_ids(), sealer=SEALER)
    history = huge_session()
    with serve_in_thread(create_app(context)) as base_url:
        harness = Harness(engine, base_url)
        path = context.model(None).path
        rendered_items: list[int] = []
        render = path.render

        def counted(request: Any, **kwargs: Any) -> Any:
            rendered_items.append(len(request.input_items()))
            return render(request, **kwargs)

        monkeypatch.setattr(path, "render", counted)
        harness.play(say(tokenizer, "The user's cat is Miso."), say(tokenizer, "Miso."))
        final = harness.client.responses.create(model=MODEL, input=history, store=False)  # type: ignore[arg-type]
    assert [item.type for item in final.output] == ["compaction", "message"]
    summary_render = rendered_items.index(len(history) + 1)  # the history and the instruction to summarize it
    assert rendered_items[:summary_render].count(len(history)) == 1, rendered_items
    assert max(rendered_items[1:summary_render], default=0) <= 2, rendered_items  # the stand-in: the newest alone
