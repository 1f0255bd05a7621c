"""The webhook sender of one API process: it claims due deliveries from the store's outbox (one replica per attempt,
under a lease), posts each signed, and deletes it once delivered or reschedules it with backoff."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field

import httpx
from opentelemetry.trace import SpanKind

from server import tracing
from server.metrics import WEBHOOK_DELIVERIES
from server.store.database import StoreUnavailable
from server.webhooks.outbox import WebhookDelivery, WebhookOutbox
from server.webhooks.signing import WebhookSecret

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WebhookSettings:
    """Where endings are posted, how they are signed, and how hard the sender tries."""

    url: str
    secret: WebhookSecret
    first_retry_seconds: float = 5.0  # then doubled after each failed attempt, up to MAX_RETRY_SECONDS
    max_attempts: int = 12  # 5 s, 10 s, ... 1 h: about 3.4 hours of trying in all, then given up (logged)
    timeout_seconds: float = 10.0  # to connect and answer; a delivery's claim lasts three times this
    poll_seconds: float = 1.0  # how often the outbox is read for due deliveries


MAX_RETRY_SECONDS = 3600.0
_BATCH = 32


def event_body(delivery: WebhookDelivery) -> str:
    """The event as OpenAI sends it (the SDK's `Response*WebhookEvent`): its id, type, time and the response's id."""
    return json.dumps({"id": delivery.id, "object": "event", "created_at": delivery.created_at,
                       "type": delivery.type, "data": {"id": delivery.response_id}}, separators=(",", ":"))


@dataclass
class WebhookSender:
    """Sends the outbox's due deliveries, as `owner`, until stopped."""

    settings: WebhookSettings
    outbox: WebhookOutbox
    owner: str
    _task: asyncio.Task[None] | None = None
    _client: httpx.AsyncClient = field(init=False)

    def start(self) -> None:
        self._client = httpx.AsyncClient(timeout=self.settings.timeout_seconds, follow_redirects=False)
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            await self._client.aclose()

    async def _run(self) -> None:
        while True:
            try:
                claimed = await self.outbox.claim(self.owner, 3 * self.settings.timeout_seconds, _BATCH)
                await asyncio.gather(*(self._deliver(delivery) for delivery in claimed))
            except StoreUnavailable:  # logged by the store; the claims lapse and are taken again
                claimed = []
            except Exception:  # a fault of its own: logged, and the sender goes on (what it claimed is sent again)
                logger.exception("the webhook sender failed; it goes on")
                claimed = []
            if len(claimed) < _BATCH:
                await asyncio.sleep(self.settings.poll_seconds)

    async def _deliver(self, delivery: WebhookDelivery) -> None:
        body = event_body(delivery)
        headers = {"content-type": "application/json", "user-agent": "responses-server",
                   **self.settings.secret.headers(delivery.id, int(time.time()), body)}
        with tracing.span("webhook deliver", SpanKind.CLIENT, {
                "responses_server.webhook.event": delivery.type, "responses_server.webhook.attempt": delivery.attempts,
                "gen_ai.response.id": delivery.response_id}) as span:
            try:
                answer = await self._client.post(self.settings.url, content=body, headers=tracing.inject(headers))
                outcome = None if 200 <= answer.status_code < 300 else f"HTTP {answer.status_code}"
            except httpx.HTTPError as exc:
                outcome = type(exc).__name__
            if outcome is not None:
                tracing.failed(span, outcome)
        try:
            await self._record(delivery, outcome)
        except StoreUnavailable:  # the claim lapses, and the delivery is tried again: at least once
            pass
        except Exception:  # likewise, logged
            logger.exception("webhook %s: its outcome could not be recorded", delivery.id)

    async def _record(self, delivery: WebhookDelivery, failure: str | None) -> None:
        attempt = delivery.attempts + 1
        if failure is None:
            WEBHOOK_DELIVERIES.labels("delivered").inc()
            await self.outbox.sent(delivery.id, self.owner)
            return
        if attempt >= self.settings.max_attempts:
            WEBHOOK_DELIVERIES.labels("given_up").inc()
            logger.warning("webhook %s (%s of %s) not delivered after %d attempts (last: %s); given up",
                           delivery.id, delivery.type, delivery.response_id, attempt, failure)
            await self.outbox.sent(delivery.id, self.owner)
            return
        WEBHOOK_DELIVERIES.labels("failed_attempt").inc()
        retry_in = min(self.settings.first_retry_seconds * 2 ** (attempt - 1), MAX_RETRY_SECONDS)
        logger.info("webhook %s attempt %d failed (%s); next in %.1f s", delivery.id, attempt, failure, retry_in)
        await self.outbox.failed(delivery.id, self.owner, retry_in)
