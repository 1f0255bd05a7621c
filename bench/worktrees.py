"""Another revision of this repository, checked out beside it for a benchmark's baseline."""

from __future__ import annotations

import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def worktree(revision: str) -> Iterator[Path]:
    """`revision` in a temporary git worktree of this repository, removed on exit."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path), revision], check=True)
        try:
            yield path
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], check=False)
