"""API keys as the server keeps them: a SHA-256 hash, never the key itself, and the project the key acts for."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

KEY_PREFIX = "rs-"  # a key this server made (`responses-server keys create`)
DEFAULT_PROJECT = "default"  # the project of `--api-key` keys, of a server with no keys, and of rows stored before projects


@dataclass(frozen=True)
class ApiKey:
    """One key: its id (safe to show and log), its hash, and whom it acts for. An admin key manages keys and reads
    usage; it cannot call inference."""

    id: str
    name: str
    project: str
    hash: str
    admin: bool = False
    created_at: float = 0.0
    last_used_at: float | None = None
    revoked_at: float | None = None


@dataclass(frozen=True)
class Caller:
    """Who a request comes from: the project it acts for, and its key (None: the server asks for no key)."""

    project: str = DEFAULT_PROJECT
    key_id: str | None = None
    admin: bool = False


def new_key() -> str:
    """A new secret key, shown once to whoever creates it."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_hash(key: str) -> str:
    """The hex SHA-256 of a key: what is stored and compared. Keys are long random strings, so a plain hash (no
    salt, no stretching) cannot be reversed, and one lookup by hash finds a key in constant time."""
    return hashlib.sha256(key.encode()).hexdigest()


def new_key_id() -> str:
    return f"key_{secrets.token_hex(8)}"
