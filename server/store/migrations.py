"""Schema migrations: each capability keeps numbered SQL files in its own `migrations/<backend>/`; the database applies
them in order of their number, once each. One number may span several capabilities: its scripts apply together."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True)
class Migrations:
    """The migrations of the capabilities whose packages are named (the records the server keeps)."""

    packages: tuple[str, ...]

    def of(self, backend: str) -> list[tuple[int, list[str]]]:
        """(version, its SQL scripts) of every migration of `backend` ("sqlite" or "postgresql"), oldest first."""
        versions: dict[int, list[tuple[str, str]]] = {}
        for package in self.packages:
            folder = resources.files(package).joinpath("migrations", backend)
            if not folder.is_dir():
                continue
            for entry in folder.iterdir():
                if entry.name.endswith(".sql"):
                    versions.setdefault(int(entry.name.split("_", 1)[0]), []).append((entry.name, entry.read_text()))
        return [(number, [script for _, script in sorted(scripts)]) for number, scripts in sorted(versions.items())]

    def latest(self, backend: str) -> int:
        """The version a database is at once every migration is in."""
        found = self.of(backend)
        return found[-1][0] if found else 0
