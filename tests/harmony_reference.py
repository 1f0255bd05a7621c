"""The reference for parsers/harmony.py: its per-token step as it was before the parser became linear, reading
StreamableParser's `state` and `messages` on every token (whose cost grows with the output). Tests compare the
linear parser's deltas with this one's, for the same tokens at every step size."""

from __future__ import annotations

from dataclasses import dataclass

from parsers.deltas import Delta
from parsers.harmony import HarmonyParser


@dataclass
class ReferenceHarmonyParser(HarmonyParser):
    """The old boundary logic (state and message count) over the shared mapping of messages to items: what the
    comparison checks is where messages begin and end, and what each token adds."""

    _messages: int = 0  # messages the harmony parser has completed

    def _token(self, token_id: int) -> list[Delta]:
        from openai_harmony import HarmonyError, StreamState

        parser = self._parser
        assert self._tokens is not None
        if token_id >= self._tokens.first_special:  # the same rule for special tokens
            admitted = self._admitted(token_id, parser.state == StreamState.CONTENT)
            if admitted is None:
                return []
            token_id = admitted
        was_analysis = parser.current_channel == "analysis"
        try:
            parser.process(token_id)
        except HarmonyError as exc:
            self.error = f"the model's output is not valid harmony: {exc}"
            return []
        deltas: list[Delta] = []
        if parser.state == StreamState.CONTENT:
            if self._open is None:
                deltas += self._open_message(parser.current_channel, parser.current_recipient)
            if parser.last_content_delta:
                deltas += self._content(parser.last_content_delta)
        if was_analysis or parser.current_channel == "analysis":
            self.reasoning_tokens += 1
        if len(parser.messages) > self._messages:  # a message ended with this token
            self._messages = len(parser.messages)
            deltas += self._close_message()
        return deltas
