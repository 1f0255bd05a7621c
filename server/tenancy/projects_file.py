"""`--projects-file`: the projects and their keys an operator declares in TOML, keys given by their SHA-256 only.

    [[keys]]
    name = "alice-codex"
    project = "alpha"
    sha256 = "<hex SHA-256 of the key: printf %s KEY | sha256sum>"

    [[keys]]
    name = "ops"
    admin = true
    sha256 = "..."
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from server.tenancy.keys import DEFAULT_PROJECT, ApiKey

_HASH = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def read_projects_file(path: Path) -> list[ApiKey]:
    """The keys the file declares; ValueError naming the entry that is wrong."""
    try:
        document = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"--projects-file {path}: {exc}") from exc
    entries = document.get("keys", [])
    if not isinstance(entries, list):
        raise ValueError(f"--projects-file {path}: `keys` is an array of tables ([[keys]])")
    return [_key(entry, index, path) for index, entry in enumerate(entries)]


def _key(entry: Any, index: int, path: Path) -> ApiKey:
    where = f"--projects-file {path}: keys[{index}]"
    if not isinstance(entry, dict):
        raise ValueError(f"{where} is not a table")
    digest, name = str(entry.get("sha256", "")).lower(), entry.get("name", f"file-{index}")
    project, admin = entry.get("project", DEFAULT_PROJECT), entry.get("admin", False)
    if not _HASH.fullmatch(digest):
        raise ValueError(f"{where}: `sha256` must be the key's hex SHA-256 (64 hex digits), never the key itself")
    if not isinstance(name, str) or not _NAME.fullmatch(name) or not isinstance(project, str) \
            or not _NAME.fullmatch(project):
        raise ValueError(f"{where}: `name` and `project` are 1-64 letters, digits, '_', '.' or '-'")
    if not isinstance(admin, bool):
        raise ValueError(f"{where}: `admin` is true or false")
    return ApiKey(id=f"file_{digest[:12]}", name=name, project=project, hash=digest, admin=admin)
