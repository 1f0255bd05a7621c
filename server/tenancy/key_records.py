"""The keys `responses-server keys create` made, in the shared database: hashes only, so a revocation holds at once
on every replica (the Authenticator's KeyTable)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from server.store.database import Database
from server.tenancy.keys import ApiKey

_COLUMNS = "id, name, project, hash, admin, created_at, last_used_at, revoked_at"


@dataclass
class KeyRecords:
    """The API keys in `database`."""

    database: Database

    async def add_key(self, key: ApiKey) -> None:
        await self.database.run("add_key", lambda db: db.execute(
            f"INSERT INTO api_keys ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (key.id, key.name, key.project, key.hash, key.admin, key.created_at, key.last_used_at, key.revoked_at)))

    async def find_key(self, digest: str) -> ApiKey | None:
        """The key with this hash, unless it is revoked or unknown."""
        rows = await self.database.run("find_key", lambda db: db.execute(
            f"SELECT {_COLUMNS} FROM api_keys WHERE hash = ? AND revoked_at IS NULL", (digest,)).fetchall())
        return _api_key(rows[0]) if rows else None

    async def list_keys(self) -> list[ApiKey]:
        return [_api_key(row) for row in await self.database.run("list_keys", lambda db: db.execute(
            f"SELECT {_COLUMNS} FROM api_keys ORDER BY created_at, id").fetchall())]

    async def revoke_key(self, key_id: str, at: float) -> bool:
        return await self.database.run("revoke_key", lambda db: db.execute(
            "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (at, key_id)).rowcount > 0)

    async def touch_key(self, key_id: str, at: float) -> None:
        await self.database.run("touch_key", lambda db: db.execute(
            "UPDATE api_keys SET last_used_at = ? WHERE id = ?", (at, key_id)))

    async def has_keys(self) -> bool:
        """Whether any key (revoked or not) was ever made: then every request needs one."""
        return bool(await self.database.run("has_keys", lambda db: db.execute(
            "SELECT 1 FROM api_keys LIMIT 1").fetchall()))


def _api_key(row: Any) -> ApiKey:
    """An `api_keys` row as an ApiKey."""
    key_id, name, project, digest, admin, created_at, last_used_at, revoked_at = row
    return ApiKey(key_id, name, project, digest, bool(admin), created_at, last_used_at, revoked_at)
