"""The webhook outbox: each background response's ending, written in the transaction that ends it, waits here until a
replica delivers it. Replicas claim due deliveries under a lease, so one replica sends each attempt."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from server.store.database import Database, Session


@dataclass(frozen=True)
class WebhookDelivery:
    """A webhook event waiting to be sent: the ending (`type`, `response.completed` ...) of a background response,
    made at `created_at`, tried `attempts` times so far."""

    id: str  # the event's id (`evt_...`), the same on every attempt
    response_id: str
    type: str
    created_at: int
    attempts: int = 0


def webhook_event_id() -> str:
    """A new webhook event's id."""
    return f"evt_{secrets.token_hex(16)}"


def enqueue_ending(db: Session, response_id: str, status: str) -> None:
    """The delivery of a background response's ending, due at once (inside the transaction that ends it)."""
    now = db.dialect.now
    db.execute(f"INSERT INTO webhook_outbox (id, response_id, type, created_at, next_attempt_at) "
               f"VALUES (?, ?, ?, CAST({now} AS BIGINT), {now})", (webhook_event_id(), response_id,
                                                                   f"response.{status}"))


@dataclass
class WebhookOutbox:
    """The deliveries waiting in `database`."""

    database: Database

    async def claim(self, owner: str, lease_seconds: float, limit: int) -> list[WebhookDelivery]:
        """Up to `limit` deliveries that are due and claimed by no replica (or whose claim lapsed), now `owner`'s."""
        dialect = self.database.dialect
        return await self.database.run("claim_webhooks", lambda db: [WebhookDelivery(*row) for row in db.execute(
            f"UPDATE webhook_outbox SET claimed_by = ?, claimed_until = {dialect.now} + ? WHERE id IN (SELECT id FROM "
            f"webhook_outbox WHERE next_attempt_at <= {dialect.now} AND (claimed_until IS NULL OR claimed_until < "
            f"{dialect.now}) ORDER BY next_attempt_at LIMIT ?{dialect.skip_locked}) "
            "RETURNING id, response_id, type, created_at, attempts", (owner, lease_seconds, limit)).fetchall()])

    async def sent(self, delivery_id: str, owner: str) -> None:
        """The delivery arrived (or is given up): it leaves the outbox."""
        await self.database.run("webhook_sent", lambda db: db.execute(
            "DELETE FROM webhook_outbox WHERE id = ? AND claimed_by = ?", (delivery_id, owner)))

    async def failed(self, delivery_id: str, owner: str, retry_in: float) -> None:
        """The attempt failed: the delivery is due again in `retry_in` seconds, for any replica."""
        now = self.database.dialect.now
        await self.database.run("webhook_failed", lambda db: db.execute(
            f"UPDATE webhook_outbox SET attempts = attempts + 1, next_attempt_at = {now} + ?, claimed_by = NULL, "
            "claimed_until = NULL WHERE id = ? AND claimed_by = ?", (retry_in, delivery_id, owner)))
