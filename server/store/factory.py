"""The database named by `--store`: SQLite at a path (the embedded default), PostgreSQL at a URL, or none."""

from __future__ import annotations

from pathlib import Path

from server.store.database import Database
from server.store.migrations import Migrations


def open_database(url: str | None, default_path: Path, migrations: Migrations) -> Database | None:
    """`sqlite:///PATH`, `postgresql://...` (or `postgres://`), `none`; no URL: SQLite at `default_path`. Migrated
    with `migrations` on first use."""
    if url == "none":
        return None
    if url is None or url.startswith("sqlite:///"):
        from server.store.sqlite import SqliteDatabase

        return SqliteDatabase(sqlite_path(url, default_path), migrations)
    if url.startswith(("postgresql://", "postgres://")):
        from server.store.postgresql import PostgresDatabase

        return PostgresDatabase(url, migrations)
    raise ValueError(f"--store {url!r}: use sqlite:///PATH, postgresql://USER@HOST/DB or none")


def sqlite_path(url: str | None, default_path: Path) -> Path:
    """The file a `sqlite:///PATH` URL names (no URL: `default_path`)."""
    return Path(url[len("sqlite://"):]) if url else default_path
