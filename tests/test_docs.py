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


TOOL_TABLE_HEAD = "| tool type | what the server does |\n| --- | --- |\n"


def test_the_tools_page_lists_every_tool_type_the_sdk_sends_as_the_server_handles_it() -> None:
    """docs/tools.md's table is TOOL_SUPPORT, row for row, and TOOL_SUPPORT knows every type of the SDK's ToolParam."""
    from typing import get_args, get_type_hints

    from openai.types.responses.tool_param import ToolParam

    from server.tools.support import TOOL_SUPPORT

    sdk_types = {kind for param in get_args(ToolParam) for kind in get_args(get_type_hints(param)["type"])}
    assert sdk_types <= set(TOOL_SUPPORT), sdk_types - set(TOOL_SUPPORT)
    rows = "".join(f"| `{kind}` | {support.handling}: {support.note} |\n" for kind, support in TOOL_SUPPORT.items())
    page = (ROOT / "docs" / "tools.md").read_text()
    assert TOOL_TABLE_HEAD + rows in page, "docs/tools.md's tool table differs from server/tools/support.py"
