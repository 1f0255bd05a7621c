"""Rendezvous (highest random weight) hashing: every process that sees the same set picks the same member for a key,
and only the keys of a member that comes or goes move."""

from __future__ import annotations

import hashlib
from typing import Iterable


def rendezvous(key: str, members: Iterable[str]) -> str:
    """The member with the highest hash of (key, member): the same on every process that sees the same members."""
    return max(members, key=lambda member: hashlib.sha256(f"{key}\0{member}".encode()).digest())


def rendezvous_order(key: str, members: Iterable[str]) -> list[str]:
    """Every member, by falling hash of (key, member): the first is `rendezvous`'s choice, the next where its keys
    go when it is gone, and so on."""
    return sorted(members, key=lambda member: hashlib.sha256(f"{key}\0{member}".encode()).digest(), reverse=True)
