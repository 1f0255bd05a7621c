"""A retry budget, as Envoy and Linkerd bound retries: a sick fleet is not stormed by the gateway's own retries."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RetryBudget:
    """Retries in flight are at most `share` of the requests in flight, or `minimum`, whichever is more."""

    share: float = 0.2
    minimum: int = 3
    requests: int = 0  # requests in flight to the workers
    retries: int = 0  # of them, those on a retry now

    def allows(self) -> bool:
        """Whether one more request may be retried now."""
        return self.retries < max(self.minimum, int(self.share * self.requests))
