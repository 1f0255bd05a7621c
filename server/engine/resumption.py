"""What may become of a request whose worker was lost, decided in one place, and how a peer goes on with it.

A worker lost before it generated a token: the request starts again on a peer (nothing reached the client). Lost
after: a peer goes on from the prompt followed by every token already generated, with the budget that is left, and
the client sees one stream; unless a grammar constrains the output (a JSON schema, a forced call, a structural tag,
a reasoning budget), whose state a peer cannot take up from tokens in its prompt: then the response ends failed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from server.engine.interface import EngineRequest, EngineStep

Move = Literal["restart", "resume", "lost"]


@dataclass
class Progress:
    """One request's tokens so far, over every worker that ran part of it."""

    request: EngineRequest
    generated: list[int] = field(default_factory=list)
    attempts: int = 0  # workers asked so far
    _offset: int = 0  # the tokens generated before the attempt now running (in its prompt)

    def after_loss(self) -> Move:
        """What the loss of the worker running the request now means for it."""
        if not self.generated:
            return "restart"
        sampling = self.request.sampling
        return "resume" if sampling.structural_tag is None and sampling.thinking_token_budget is None else "lost"

    def next_attempt(self) -> EngineRequest | None:
        """The request a peer is sent now: the prompt and what was generated, the budget left (None: nothing is
        left to generate)."""
        self._offset = len(self.generated)
        self.attempts += 1
        if not self.generated:
            return self.request
        left = self.request.sampling.max_tokens - self._offset
        if left <= 0:
            return None
        return replace(self.request, prompt_token_ids=self.request.prompt_token_ids + self.generated,
                       sampling=replace(self.request.sampling, max_tokens=left))

    def budget_spent(self) -> EngineStep:
        """The step that ends a request lost with its whole budget generated: it ended as it would have."""
        return EngineStep([], "length", prompt_tokens=None)

    def seen(self, step: EngineStep) -> EngineStep:
        """`step` as the client's response counts it: the prompt is the client's (a peer's prompt held the tokens
        generated before it; they are output, counted once), and so is the cached share of it."""
        self.generated.extend(step.token_ids)
        if not self._offset or step.prompt_tokens is None:
            return step
        prompt = step.prompt_tokens - self._offset
        return replace(step, prompt_tokens=prompt, cached_tokens=min(step.cached_tokens, prompt))
