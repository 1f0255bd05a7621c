"""Where and how the engine runs a response's requests: its project's partition of the prefix cache (`cache_salt`),
its priority, and the affinity key that keeps a conversation's turns on the worker that holds its prefix."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from server.history.sealing import Sealer
from server.requests import MessageItem, ResponsesRequest

CACHE_SALT_PURPOSE = "prefix-cache-salt"


@dataclass(frozen=True)
class Placement:
    """The same for every engine request of one response (its passes between hosted calls, its compaction)."""

    cache_salt: str | None = None  # None: the prefix cache is shared with every project
    priority: int = 0
    affinity: str | None = None  # None: the response's own id (a new conversation starts on the worker it hashes to)
    project: str = "default"  # whose response (a fleet's queue is fair between projects)


def placement(body: ResponsesRequest, project: str, history_start: str | None, sealer: Sealer,
              isolate_projects: bool, priority: int = 0) -> Placement:
    """A response's placement: salted by its project unless the operator lets projects share the cache; kept with
    its conversation by its `prompt_cache_key`, else where its history starts (the conversation, or the chain's first
    response), else, not stored, by its leading items (a stateless client that sends no key: every turn of its
    session sends the same instructions and first user message, so they find the worker that holds their prefix)."""
    salt = sealer.tag(CACHE_SALT_PURPOSE, project) if isolate_projects else None
    stateless = body.store is False  # a stored response may start a chain, keyed by its own id from its next turn
    key = body.prompt_cache_key or history_start or (leading_key(body, project) if stateless else None)
    return Placement(salt, priority, key, project)


def leading_key(body: ResponsesRequest, project: str) -> str | None:
    """A key for a session from what each of its turns sends first: its model, instructions and first user
    message (None: the input has no user message)."""
    first = next((item for item in body.input_items() if isinstance(item, MessageItem) and item.role == "user"), None)
    if first is None:
        return None
    seen = "\0".join((project, body.model or "", body.instructions or "", first.text()))
    return "lead:" + hashlib.sha256(seen.encode()).hexdigest()[:32]
