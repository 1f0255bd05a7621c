"""A store whose every call is timed into the store latency histogram, by backend and operation."""

from __future__ import annotations

import inspect
from typing import Any

from server.metrics import STORE_SECONDS


class MeasuredStore:
    """Wraps a store: the same methods, each call observed in `responses_server_store_operation_seconds`."""

    def __init__(self, store: Any, backend: str) -> None:
        self._store = store
        self._backend = backend

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._store, name)
        if not inspect.iscoroutinefunction(attribute):
            return attribute
        histogram = STORE_SECONDS.labels(self._backend, name)

        async def timed(*args: Any, **kwargs: Any) -> Any:
            with histogram.time():
                return await attribute(*args, **kwargs)

        setattr(self, name, timed)  # built once per operation
        return timed
