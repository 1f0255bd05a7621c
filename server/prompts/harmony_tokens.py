"""Harmony conversations rendered a message at a time, each message's tokens kept by its content.

openai_harmony renders a conversation as the concatenation of its messages' renders (each depending only on the
message and on whether the conversation has function tools), less the analysis it drops, then the completion's
`<|start|>assistant`. So a turn renders only the messages it has not seen; the rest are reused. The same tokens as
`render_conversation_for_completion` (with `auto_drop_analysis`), proven by tests/test_incremental_prompts.py.
"""

from __future__ import annotations

import hashlib
from array import array
from dataclasses import dataclass
from typing import Any

from server.lru import BytesLru
from server.prompts.known import DEFAULT_KNOWN_PROMPT_BYTES


@dataclass(frozen=True)
class HarmonyRendered:
    """A conversation's tokens, and how many of them were reused rather than rendered."""

    token_ids: list[int]
    reused_tokens: int


class HarmonyMessageTokens:
    """Each message's tokens, kept by a digest of the message (least recently used dropped past `max_bytes`)."""

    def __init__(self, encoding: Any, max_bytes: int = DEFAULT_KNOWN_PROMPT_BYTES) -> None:
        from openai_harmony import Conversation, Role

        self._encoding = encoding
        self._tokens: BytesLru[bytes, array] = BytesLru(max_bytes)
        self._completion = list(encoding.render_conversation_for_completion(Conversation.from_messages([]),
                                                                            Role.ASSISTANT))

    def render_for_completion(self, messages: list[Any]) -> HarmonyRendered:
        """The conversation's tokens for the assistant's next message, analysis dropped as gpt-oss was trained."""
        from openai_harmony import RenderOptions

        options = RenderOptions(conversation_has_function_tools=_has_function_tools(messages))
        tokens = array("l")
        reused = 0
        for message in _kept(messages):
            key = hashlib.blake2b(f"{int(options.conversation_has_function_tools)}{message.to_json()}".encode(),
                                  digest_size=16).digest()
            rendered = self._tokens.get(key)
            if rendered is None:
                rendered = array("l", self._encoding.render(message, render_options=options))
                self._tokens.keep(key, rendered, _size(rendered))
            else:
                reused += len(rendered)
            tokens += rendered
        return HarmonyRendered(tokens.tolist() + self._completion, reused)

def _kept(messages: list[Any]) -> list[Any]:
    """The messages harmony renders with `auto_drop_analysis`: when the last assistant message is a final answer,
    the analysis before the first final message is left out."""
    last_assistant = next((message for message in reversed(messages) if message.author.role.value == "assistant"),
                          None)
    if last_assistant is None or last_assistant.channel != "final":
        return messages
    first_final = next((index for index, message in enumerate(messages) if message.channel == "final"), None)
    if first_final is None:
        return messages
    return [message for index, message in enumerate(messages)
            if not (index < first_final and message.channel == "analysis")]


def _has_function_tools(messages: list[Any]) -> bool:
    """Whether a developer message offers tools in the `functions` namespace (harmony's render option)."""
    from openai_harmony import DeveloperContent

    return any(isinstance(content, DeveloperContent) and content.tools and content.tools.get("functions") is not None
               and bool(content.tools["functions"].tools)
               for message in messages for content in message.content)


def _size(rendered: array) -> int:
    return rendered.itemsize * len(rendered) + 64  # with its digest and the cache's entry
