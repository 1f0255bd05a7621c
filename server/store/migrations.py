"""The stores' schema migrations: numbered SQL files kept in `migrations/<backend>/`, applied in order once each."""

from __future__ import annotations

from importlib import resources


def migrations(backend: str) -> list[tuple[int, str]]:
    """(version, SQL script) of every migration of `backend` ("sqlite" or "postgresql"), oldest first."""
    folder = resources.files("server.store").joinpath("migrations", backend)
    scripts = [(int(entry.name.split("_", 1)[0]), entry.read_text()) for entry in folder.iterdir()
               if entry.name.endswith(".sql")]
    return sorted(scripts)
