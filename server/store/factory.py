"""The store named by `--store`: SQLite at a path (the embedded default), PostgreSQL at a URL, or none."""

from __future__ import annotations

from pathlib import Path

from server.store.interface import ResponseStore, RetentionPolicy
from server.store.measured import MeasuredStore


def open_store(url: str | None, retention: RetentionPolicy, default_path: Path,
               webhooks: bool = False) -> ResponseStore | None:
    """Timed into the store latency histogram. `sqlite:///PATH`, `postgresql://...` (or `postgres://`), `none`; no URL:
    SQLite at `default_path`. With `webhooks`, background endings are written to the webhook outbox."""
    if url == "none":
        return None
    if url is None or url.startswith("sqlite:///"):
        from server.store.sqlite import SqliteStore

        return MeasuredStore(SqliteStore(Path(url[len("sqlite://"):]) if url else default_path, retention,
                                        webhooks=webhooks), "sqlite")
    if url.startswith(("postgresql://", "postgres://")):
        from server.store.postgresql import PostgresStore

        return MeasuredStore(PostgresStore(url, retention, webhooks=webhooks), "postgresql")
    raise ValueError(f"--store {url!r}: use sqlite:///PATH, postgresql://USER@HOST/DB or none")
