"""How a gateway reaches a model's workers: the bearer key they want (vLLM's `--api-key`) and the CA it trusts."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from functools import cached_property


@dataclass(frozen=True)
class WorkerAccess:
    """A model's workers' key (never in a log line or a repr) and, for https workers, the CA file to trust (None:
    the system's)."""

    api_key: str | None = field(default=None, repr=False)
    ca_file: str | None = None

    def headers(self) -> dict[str, str]:
        """What every request to a worker carries."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    @cached_property
    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for https workers (None: the default, the system's CAs)."""
        return ssl.create_default_context(cafile=self.ca_file) if self.ca_file else None
