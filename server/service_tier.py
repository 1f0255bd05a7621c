"""`service_tier`: the tiers a request may ask for, the one that serves it, and its step in the engine's priority.

A tier moves a request one step in the engine's priority scheduling (lower runs first) from its key's or project's
`priority`: `priority` one ahead, `flex` one behind, so flex work yields to the rest under load. It acts through
vLLM's priority scheduling (`--scheduling-policy priority`); without it every tier is served alike.
"""

from __future__ import annotations

# Each tier the openai SDK names, and the one that serves it here.
SERVED_BY = {"auto": "default", "default": "default", "scale": "default", "flex": "flex", "priority": "priority",
             "fast": "priority", "ultrafast": "priority"}
_STEP = {"priority": -1, "default": 0, "flex": 1}
BATCH_STEP = 2  # a batch's requests (server/batches) run behind every tier: they fill what interactive work leaves


def served_tier(asked: str | None) -> str:
    """The tier that serves a request that asked for `asked` (a value of SERVED_BY, or None: the default)."""
    return SERVED_BY[asked or "auto"]


def tier_priority(base: int, tier: str, batch: bool = False) -> int:
    """The engine priority of a request of the served `tier` whose key or project has priority `base` (`batch`: a
    batch's request, behind every tier)."""
    return base + (BATCH_STEP if batch else _STEP[tier])
