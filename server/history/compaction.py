"""Compaction (`POST /v1/responses/compact`): the model summarizes the conversation, and the summary with the
user's messages is sealed into one `compaction` item that later requests open back into context."""

from __future__ import annotations

from typing import Any

from openai.types.responses import Response

from server.requests import MessageItem, ResponsesRequest, ToolOutput
from server.history.sealed_items import seal_compaction
from server.history.sealing import Sealer
from streaming.ids import ITEM_PREFIXES, RESPONSE, IdFactory

SUMMARY_INSTRUCTION = (
    "Summarize the conversation so far so that it can be continued from your summary alone: the user's goal, "
    "what has been done and found, and what is left to do. Reply with the summary only.")
SUMMARY_MAX_TOKENS = 512
KEPT_OUTPUT_CHARS = 4000  # of one tool output in a summarizing request: its first and last 2,000 characters
NO_USAGE = {"input_tokens": 0, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 0,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 0}


def summary_request(conversation: ResponsesRequest) -> ResponsesRequest:
    """The conversation with a request to summarize it after it, as one plain answer; huge tool outputs are cut to
    their head and tail, and the oldest items are dropped if it still does not fit, since compaction is asked for
    when the context is full."""
    items = [_cut(item) for item in conversation.input_items()] + [MessageItem(role="user",
                                                                               content=SUMMARY_INSTRUCTION)]
    return conversation.model_copy(update={
        "input": items, "tool_choice": "none", "text": None, "truncation": "auto", "store": False,
        "stream": False, "background": False, "previous_response_id": None, "conversation": None,
        "include": None, "max_output_tokens": SUMMARY_MAX_TOKENS})


def _cut(item: Any) -> Any:
    """A tool output longer than KEPT_OUTPUT_CHARS as its head and tail with a marker between them (a summary
    needs what a command printed first and last, not its thousands of lines); any other item as it is."""
    if not isinstance(item, ToolOutput) or not all(part.is_text() for part in item.parts()):
        return item  # an output with images or files is kept as it is
    text = item.text()
    if len(text) <= KEPT_OUTPUT_CHARS:
        return item
    half = KEPT_OUTPUT_CHARS // 2
    marker = f"\n[... {len(text) - 2 * half} characters of this output were cut for the summary ...]\n"
    return item.model_copy(update={"output": text[:half] + marker + text[-half:]})


def user_messages(conversation: ResponsesRequest, most_chars: int) -> list[str | list[dict[str, Any]]]:
    """The user's own messages, oldest first (those of an earlier compaction included: it was opened into them):
    the text, or the parts as sent when there is more than text (images and files are kept, not re-encoded).
    Only the newest whose text adds up to `most_chars` are kept, the last always: the older ones are in the
    summary, and a compaction that kept them all would not fit the window either."""
    messages = [item for item in conversation.input_items() if isinstance(item, MessageItem) and item.role == "user"]
    kept: list[str | list[dict[str, Any]]] = []
    total = 0
    for message in reversed(messages):
        parts = message.parts()
        total += sum(len(part.text or "") for part in parts if part.is_text())
        if kept and total > most_chars:
            break
        kept.append(message.text() if all(part.is_text() for part in parts)
                    else [part.model_dump(exclude_none=True) for part in parts])
    return kept[::-1]


def compacted_response(summary: Response, conversation: ResponsesRequest, sealer: Sealer,
                       ids: IdFactory, context_length: int) -> dict[str, Any]:
    """The SDK's `CompactedResponse`: one compaction item, and the usage of the summarizing pass. It keeps the
    user's newest messages up to as many characters as the context has tokens (about a quarter of it).

    The user messages travel inside the sealed item rather than beside it: the SDK's output item types have no
    user message, so a strict client could not read them there.
    """
    sealed = seal_compaction(sealer, summary.output_text, user_messages(conversation, context_length))
    usage = summary.usage.model_dump(mode="json") if summary.usage else NO_USAGE
    return {"id": ids(RESPONSE), "object": "response.compaction", "created_at": int(summary.created_at),
            "output": [{"type": "compaction", "id": ids(ITEM_PREFIXES["compaction"]), "encrypted_content": sealed}],
            "usage": usage}
