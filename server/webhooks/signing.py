"""Standard Webhooks signatures, as OpenAI signs its webhooks: `webhook-id`, `webhook-timestamp`, and
`webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">` under the secret's key."""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class WebhookSecret:
    """A signing key, given as OpenAI issues it: `whsec_` and the key in base64."""

    key: bytes

    @classmethod
    def parse(cls, text: str) -> "WebhookSecret":
        """The secret of a `whsec_...` string (ValueError for anything else)."""
        text = text.strip()
        if not text.startswith("whsec_"):
            raise ValueError("a webhook secret starts with whsec_ (followed by its key in base64)")
        try:
            key = base64.b64decode(text[len("whsec_"):], validate=True)
        except ValueError:
            raise ValueError("a webhook secret is whsec_ followed by base64") from None
        if len(key) < 24:
            raise ValueError("a webhook secret's key must be at least 24 bytes")
        return cls(key)

    @classmethod
    def from_file(cls, path: str | Path) -> "WebhookSecret":
        return cls.parse(Path(path).read_text())

    def headers(self, event_id: str, timestamp: int, body: str) -> dict[str, str]:
        """The headers that sign `body` as event `event_id`, sent at `timestamp` (Unix seconds)."""
        signed = hmac.new(self.key, f"{event_id}.{timestamp}.{body}".encode(), hashlib.sha256).digest()
        return {"webhook-id": event_id, "webhook-timestamp": str(timestamp),
                "webhook-signature": "v1," + base64.b64encode(signed).decode()}
