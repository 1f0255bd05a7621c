"""A real PostgreSQL server for tests: Debian's binaries, initdb and pg_ctl in a temporary directory, on loopback."""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from tests.conftest import free_port


def _binary(name: str) -> str:
    """A server program from Debian's `postgresql` package (scripts/setup.sh installs it), newest version first."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(Path(p).parts[4]), reverse=True)
    path = found[0] if found else shutil.which(name)
    if path is None:
        raise RuntimeError(f"PostgreSQL's {name} is not installed: run scripts/setup.sh (it installs `postgresql`)")
    return path


def _as_postgres(command: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run it as the package's `postgres` user."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@dataclass
class PostgresServer:
    """One cluster for a test session; each test gets a database of its own from `new_database()`."""

    directory: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="responses-pg-")))
    port: int = field(default_factory=free_port)
    _names: itertools.count[int] = field(default_factory=itertools.count)

    def start(self) -> "PostgresServer":
        data = self.directory / "data"
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres")
        subprocess.run(_as_postgres([_binary("initdb"), "-D", str(data), "--auth=trust", "-U", "postgres",
                                     "--no-sync"]), check=True, capture_output=True)
        self.resume()
        return self

    def pause(self) -> None:
        """Stop the server, keeping its data (an outage; `resume` ends it)."""
        subprocess.run(_as_postgres([_binary("pg_ctl"), "-D", str(self.directory / "data"), "-m", "fast", "-w",
                                     "stop"]), check=True, capture_output=True)

    def resume(self) -> None:
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        subprocess.run(_as_postgres([_binary("pg_ctl"), "-D", str(self.directory / "data"), "-l",
                                     str(self.directory / "log"), "-o", options, "-w", "start"]),
                       check=True, capture_output=True)

    def stop(self) -> None:
        subprocess.run(_as_postgres([_binary("pg_ctl"), "-D", str(self.directory / "data"), "-m", "immediate",
                                     "stop"]), capture_output=True)
        shutil.rmtree(self.directory, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """The URL of a new, empty database."""
        name = f"test_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name}")
        return self.url(name)
