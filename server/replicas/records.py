"""The replicas' own records: each replica that takes forwarded requests beats here, on the database's clock."""

from __future__ import annotations

from dataclasses import dataclass

from server.store.database import Database


@dataclass(frozen=True)
class Replica:
    """A live replica that takes forwarded requests, at `url` (its `--advertise-url`)."""

    id: str
    url: str


@dataclass
class ReplicaRecords:
    """The replicas' heartbeats in `database`."""

    database: Database

    async def heartbeat(self, replica: Replica, draining: bool) -> None:
        """`replica` is alive now (draining: alive, but takes no forwarded requests)."""
        now = self.database.dialect.now
        await self.database.run("heartbeat", lambda db: db.execute(
            f"INSERT INTO replicas (id, url, heartbeat_at, draining) VALUES (?, ?, {now}, ?) ON CONFLICT (id) DO "
            "UPDATE SET url = excluded.url, heartbeat_at = excluded.heartbeat_at, draining = excluded.draining",
            (replica.id, replica.url, draining)))

    async def live_replicas(self, within_seconds: float) -> list[Replica]:
        """The replicas, not draining, whose last heartbeat is at most `within_seconds` old."""
        now = self.database.dialect.now
        return await self.database.run("live_replicas", lambda db: [Replica(*row) for row in db.execute(
            f"SELECT id, url FROM replicas WHERE NOT draining AND heartbeat_at >= {now} - ? ORDER BY id",
            (within_seconds,)).fetchall()])

    async def leave(self, replica_id: str) -> None:
        """The replica stops: it takes no more forwarded requests."""
        await self.database.run("leave", lambda db: db.execute("DELETE FROM replicas WHERE id = ?", (replica_id,)))
