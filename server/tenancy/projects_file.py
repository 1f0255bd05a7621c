"""`--projects-file`: the projects and their keys an operator declares in TOML, keys given by their SHA-256 only,
and the limits of each project (and of a key, on top of its project's).

    [[projects]]
    name = "alpha"
    requests_per_minute = 600
    tokens_per_minute = 200000
    concurrent_requests = 16
    tokens_per_day = 20000000

    [[keys]]
    name = "alice-codex"
    project = "alpha"
    sha256 = "<hex SHA-256 of the key: printf %s KEY | sha256sum>"
    requests_per_minute = 60         # optional: this key's own limits
    priority = -1                    # optional: its requests' priority in vLLM's scheduler (lower runs first;
                                     # the engine needs --scheduling-policy priority), over its project's

    [[keys]]
    name = "ops"
    admin = true
    sha256 = "..."
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any

from server.tenancy.keys import DEFAULT_PROJECT, ApiKey
from server.tenancy.limits import Limits

_HASH = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass(frozen=True)
class ProjectsFile:
    """What a projects file declares: keys, and limits by project name and by key id."""

    keys: tuple[ApiKey, ...] = ()
    project_limits: dict[str, Limits] = field(default_factory=dict)
    key_limits: dict[str, Limits] = field(default_factory=dict)
    project_priorities: dict[str, int] = field(default_factory=dict)
    key_priorities: dict[str, int] = field(default_factory=dict)

    def priority(self, project: str, key_id: str | None) -> int:
        """A request's priority in the engine's scheduler: its key's, else its project's, else 0."""
        if key_id is not None and key_id in self.key_priorities:
            return self.key_priorities[key_id]
        return self.project_priorities.get(project, 0)


def read_projects_file(path: Path) -> ProjectsFile:
    """The keys and limits the file declares; ValueError naming the entry that is wrong."""
    try:
        document = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"--projects-file {path}: {exc}") from exc
    entries, projects = document.get("keys", []), document.get("projects", [])
    if not isinstance(entries, list) or not isinstance(projects, list):
        raise ValueError(f"--projects-file {path}: `keys` and `projects` are arrays of tables ([[keys]], [[projects]])")
    keys = [_key(entry, index, path) for index, entry in enumerate(entries)]
    key_limits = {key.id: Limits.from_table(entry, f"--projects-file {path}: keys[{index}]")
                  for index, (key, entry) in enumerate(zip(keys, entries))}
    project_priorities = {entry["name"]: _priority(entry, f"--projects-file {path}: projects[{index}]")
                          for index, entry in enumerate(projects) if "priority" in entry}
    key_priorities = {key.id: _priority(entry, f"--projects-file {path}: keys[{index}]")
                      for index, (key, entry) in enumerate(zip(keys, entries)) if "priority" in entry}
    return ProjectsFile(tuple(keys), _project_limits(projects, path),
                        {key_id: limits for key_id, limits in key_limits.items() if limits},
                        project_priorities, key_priorities)


def _priority(entry: dict[str, Any], where: str) -> int:
    value = entry["priority"]
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{where}: `priority` is a whole number (lower runs first)")
    return value


def _project_limits(projects: list[Any], path: Path) -> dict[str, Limits]:
    limits: dict[str, Limits] = {}
    for index, entry in enumerate(projects):
        where = f"--projects-file {path}: projects[{index}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not _NAME.fullmatch(entry["name"]):
            raise ValueError(f"{where}: a table with a `name` of 1-64 letters, digits, '_', '.' or '-'")
        limits[entry["name"]] = Limits.from_table(entry, where)
    return limits


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
