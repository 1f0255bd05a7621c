"""Where and how the engine runs a response's requests: its project's partition of the prefix cache (`cache_salt`),
its priority, and the affinity key that keeps a conversation's turns on the worker that holds its prefix."""

from __future__ import annotations

from dataclasses import dataclass

from server.history.sealing import Sealer
from server.requests import ResponsesRequest

CACHE_SALT_PURPOSE = "prefix-cache-salt"


@dataclass(frozen=True)
class Placement:
    """The same for every engine request of one response (its passes between hosted calls, its compaction)."""

    cache_salt: str | None = None  # None: the prefix cache is shared with every project
    priority: int = 0
    affinity: str | None = None  # None: the response's own id (a new conversation starts on the worker it hashes to)


def placement(body: ResponsesRequest, project: str, history_start: str | None, sealer: Sealer,
              isolate_projects: bool, priority: int = 0) -> Placement:
    """A response's placement: salted by its project unless the operator lets projects share the cache; kept with
    its conversation by its `prompt_cache_key`, else where its history starts (the conversation, or the chain's first
    response)."""
    salt = sealer.tag(CACHE_SALT_PURPOSE, project) if isolate_projects else None
    return Placement(salt, priority, body.prompt_cache_key or history_start)
