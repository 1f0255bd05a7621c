"""The docs: the site builds in strict mode (a broken link, anchor or a page left out of the navigation fails),
and the README stays a landing page whose map names every page."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
                           cwd=ROOT, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0, built.stderr[-3000:]
    assert (tmp_path / "console.html").is_file()


def test_the_readme_is_a_landing_page_with_a_map_of_every_page() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 200
    pages = {path.name for path in (ROOT / "docs").glob("*.md")} - {"index.md"}
    assert set(re.findall(r"\]\(docs/([\w-]+\.md)\)", readme)) == pages
