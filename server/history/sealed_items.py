"""Items sealed for stateless clients: reasoning (`encrypted_content`) and compactions, sealed and opened again."""

from __future__ import annotations

from typing import Any, Callable

from server.errors import RequestError
from server.requests import CompactionItem, ContentPart, MessageItem, ReasoningItem, ResponsesRequest
from server.history.sealing import SealError, Sealer

REASONING_PURPOSE = "reasoning"
COMPACTION_PURPOSE = "compaction"
SUMMARY_HEADING = "Summary of the conversation so far:\n"


def reasoning_sealer(sealer: Sealer) -> Callable[[str], str]:
    """The builder's `seal_reasoning`: a reasoning item's text -> its encrypted_content."""
    return lambda text: sealer.seal(REASONING_PURPOSE, {"text": text})


def seal_compaction(sealer: Sealer, summary: str, user_messages: list[str | list[dict[str, Any]]]) -> str:
    """A compaction's encrypted_content: the model's summary and the user's own words, which it replaces."""
    return sealer.seal(COMPACTION_PURPOSE, {"summary": summary, "user_messages": user_messages})


def open_sealed_items(request: ResponsesRequest, sealer: Sealer) -> ResponsesRequest:
    """The request with sealed items opened: reasoning gets its text back (a client may have stripped the
    plaintext), and a compaction becomes the user messages it holds, then its summary as an assistant message.

    A value that does not open is a 400 `invalid_encrypted_content`, naming the item.
    """
    items = request.input_items()
    if not any(_sealed(item) for item in items):
        return request
    opened: list[Any] = []
    for index, item in enumerate(items):
        if isinstance(item, ReasoningItem) and item.encrypted_content:
            text = _open(sealer, REASONING_PURPOSE, item.encrypted_content, index).get("text")
            _check(isinstance(text, str), index, "holds no reasoning")
            opened.append(item.model_copy(update={"content": [ContentPart(type="reasoning_text", text=text)]}))
        elif isinstance(item, CompactionItem):
            payload = _open(sealer, COMPACTION_PURPOSE, item.encrypted_content, index)
            summary, users = payload.get("summary"), payload.get("user_messages")
            _check(isinstance(summary, str) and isinstance(users, list), index, "holds no compaction")
            opened += [_user_message(content, index) for content in users]
            opened.append(MessageItem(role="assistant", content=SUMMARY_HEADING + summary))
        else:
            opened.append(item)
    return request.model_copy(update={"input": opened})


def _user_message(content: Any, index: int) -> MessageItem:
    """A user message a compaction holds: its text, or its parts as they were sent."""
    try:
        return MessageItem.model_validate({"role": "user", "content": content if isinstance(content, list)
                                           else str(content)})
    except ValueError:
        raise _invalid(index, "holds a message that is no longer valid") from None


def _sealed(item: Any) -> bool:
    return isinstance(item, CompactionItem) or (isinstance(item, ReasoningItem) and bool(item.encrypted_content))


def _open(sealer: Sealer, purpose: str, value: str, index: int) -> dict[str, Any]:
    try:
        return sealer.open(purpose, value)
    except SealError as exc:
        raise RequestError(f"The encrypted_content of input[{index}] could not be opened: {exc}.",
                       param=f"input[{index}].encrypted_content", code="invalid_encrypted_content") from None


def _check(condition: bool, index: int, problem: str) -> None:
    if not condition:
        raise _invalid(index, problem)


def _invalid(index: int, problem: str) -> RequestError:
    return RequestError(f"The encrypted_content of input[{index}] {problem}.",
                        param=f"input[{index}].encrypted_content", code="invalid_encrypted_content")
