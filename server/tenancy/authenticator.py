"""Who a request comes from: its bearer key, looked up by hash among the keys declared at start and the store's."""

from __future__ import annotations

import hmac
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

from server.store.database import StoreUnavailable
from server.tenancy.keys import DEFAULT_PROJECT, ApiKey, Caller, key_hash

logger = logging.getLogger(__name__)
TOUCH_SECONDS = 60.0  # a key's `last_used_at` is written at most this often per process


class KeyTable(Protocol):
    """The keys `responses-server keys create` made, kept in the shared store (so a revocation holds at once on
    every replica)."""

    async def find_key(self, digest: str) -> ApiKey | None:
        """The key with this hash, unless it is revoked or unknown."""
        ...

    async def touch_key(self, key_id: str, at: float) -> None: ...

    async def has_keys(self) -> bool:
        """Whether any key (revoked or not) was ever made: then every request needs one."""
        ...


def declared_keys(api_keys: tuple[str, ...], projects: tuple[ApiKey, ...]) -> dict[str, ApiKey]:
    """The keys known at start, by hash: `--api-key`'s (the default project), then the projects file's."""
    keys = [ApiKey(id=f"env_{digest[:12]}", name="api-key", project=DEFAULT_PROJECT, hash=digest)
            for digest in map(key_hash, api_keys)]
    return {key.hash: key for key in (*keys, *projects)}


@dataclass
class Authenticator:
    """Finds a request's caller. With no key declared and none in the store, every request is the default
    project's; else a request needs a known key, not revoked."""

    declared: dict[str, ApiKey]
    table: KeyTable | None = None
    clock: Callable[[], float] = time.time
    required: bool | None = None  # decided once: keys are declared, or the store has some; None: not yet known
    _touched: dict[str, float] = field(default_factory=dict)

    async def start(self) -> None:
        """Decide, once, whether requests need a key (a server started with none stays open until it restarts)."""
        try:
            await self._decide()
        except StoreUnavailable:  # it may hold keys: requests are refused (503) until the store answers
            logger.warning("the key store is unavailable at start: requests are refused until it answers")

    async def _decide(self) -> bool:
        if self.required is None:
            self.required = bool(self.declared) or (self.table is not None and await self.table.has_keys())
        return self.required

    async def caller(self, authorization: bytes) -> Caller | None:
        """The caller a request's `Authorization` header names; None: a key is needed and this is not one.
        StoreUnavailable when the key table cannot be read."""
        if not await self._decide():
            return Caller()
        scheme, _, given = authorization.partition(b" ")
        token = given.strip()
        if scheme.lower() != b"bearer" or not token:
            return None
        digest = key_hash(token.decode(errors="replace"))
        key = self.declared.get(digest)
        if key is None and self.table is not None:
            key = await self.table.find_key(digest)
            if key is not None:
                await self._touch(key)
        if key is None or not hmac.compare_digest(key.hash, digest):
            return None
        return Caller(key.project, key.id, key.admin)

    async def _touch(self, key: ApiKey) -> None:
        now = self.clock()
        if now - self._touched.get(key.id, float("-inf")) >= TOUCH_SECONDS:
            self._touched[key.id] = now
            await self.table.touch_key(key.id, now)  # type: ignore[union-attr]
