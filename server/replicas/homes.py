"""A request's home: the replica whose prefix cache holds the start of its prompt.

- `previous_response_id`: the replica that generated that response;
- `conversation`: the replica whose response last added to it;
- `prompt_cache_key` (and no home found above): rendezvous hashing over the live replicas, so every replica picks the
  same one for a key, and only the keys of a replica that comes or goes move.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from server.rendezvous import rendezvous
from server.replicas.registry import ReplicaRegistry
from server.requests import ResponsesRequest
from server.responses.project_store import ProjectStore

HomeKey = Literal["previous_response", "conversation", "prompt_cache_key"]


@dataclass(frozen=True)
class Home:
    """Where a request's prefix is: `replica`, reached at `url` (None: that replica is not live now), found by `key`."""

    key: HomeKey
    replica: str
    url: str | None


async def find_home(body: ResponsesRequest, store: ProjectStore, registry: ReplicaRegistry) -> Home | None:
    """The request's home (found in the store as the request's project sees it); None when nothing in it names one
    (it is served where it landed)."""
    if body.previous_response_id is not None:
        replica = await store.response_home(body.previous_response_id)
        if replica is not None:
            return Home("previous_response", replica, registry.url_of(replica))
    if body.conversation is not None:
        replica = await store.conversation_home(body.conversation)
        if replica is not None:
            return Home("conversation", replica, registry.url_of(replica))
    if body.prompt_cache_key is not None and registry.live():
        replica = rendezvous(body.prompt_cache_key, registry.live())
        return Home("prompt_cache_key", replica, registry.url_of(replica))
    return None
