"""The one-way flow as contracts (`[tool.importlinter]` in pyproject.toml), checked with import-linter."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
# Modules of server/ outside the domain: the web layer, the command line and its entry point.
NOT_DOMAIN = {"http", "console", "cli", "launch", "api_processes", "__main__", "__init__"}  # the web (its pages too) and the command line


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports over the packages in `tree` (found there first), with `tree`'s pyproject.toml."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([str(LINT_IMPORTS), "--config", str(tree / "pyproject.toml"), "--no-cache"], cwd=tree,
                          env=env, capture_output=True, text=True, timeout=300)


def test_the_layering_contracts_are_kept() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(("module", "back_import", "contract"), [
    ("server/history/truncation.py", "import server.http.errors", "only the HTTP layer itself"),
    ("parsers/hermes.py", "import streaming.builder", "parsers know nothing"),
    ("server/store/database.py", "import server.tenancy.keys", "the store keeps the database"),
    ("server/tenancy/limiter.py", "import server.responses.rows", "responses and conversations keep their SQL"),
    ("server/history/chains.py", "import server.retrieval.file_records", "retrieval keeps its files' records"),
    ("server/paths/base.py", "import server.runs.prepare", "the server's layers"),
    ("server/runs/prepare.py", "import fastapi", "the domain knows nothing of the web framework"),
], ids=["domain imports http", "parser imports streaming", "store imports a capability",
        "a room reads another room's SQL", "a room reads another room's records", "a layer imports one above it",
        "domain imports fastapi"])
def test_a_back_import_breaks_a_contract(tmp_path: Path, module: str, back_import: str, contract: str) -> None:
    tree = tmp_path / "tree"
    for package in ("server", "parsers", "streaming"):
        shutil.copytree(ROOT / package, tree / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    with (tree / module).open("a") as source:
        source.write(f"\n{back_import}  # noqa: E402 (a deliberate back-import)\n")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert f"{contract}" in result.stdout and "BROKEN" in result.stdout


def test_every_domain_module_is_under_the_framework_contract() -> None:
    """A new module of server/ is covered by the web-framework contract, or this fails until it is."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["name"] == "the domain knows nothing of the web framework"]
    modules = {path.stem for path in (ROOT / "server").iterdir()
               if path.suffix == ".py" or (path.is_dir() and (path / "__init__.py").exists())}
    assert {f"server.{name}" for name in modules - NOT_DOMAIN} <= set(contract["source_modules"])


def test_the_docs_layout_names_every_module_and_only_modules_that_exist() -> None:
    readme = (ROOT / "docs" / "architecture.md").read_text()
    modules = {str(path.relative_to(ROOT)) for package in ("server", "parsers", "streaming")
               for path in (ROOT / package).rglob("*.py") if path.name != "__init__.py"}
    named = set(re.findall(r"`((?:server|parsers|streaming)/[\w/]+\.py)`", readme))
    assert modules - named == set(), "modules the docs' layout table (docs/architecture.md) does not name"
    assert named - modules == set(), "paths the docs' layout table names that are not in the tree"


def test_the_docs_draw_the_layers_the_contract_keeps() -> None:
    """docs/architecture.md's list of layers is the `layers` contract, line for line."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    drawn = re.search(r"```layers\n(.*?)```", (ROOT / "docs" / "architecture.md").read_text(), re.S)
    assert drawn is not None, "docs/architecture.md has no ```layers block"
    assert drawn.group(1).splitlines() == contract["layers"]
    every_package = {f"server.{path.stem}" for path in (ROOT / "server").iterdir()
                     if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").exists()}
    layered = {name.strip() for layer in contract["layers"] for name in layer.split("|")}
    assert every_package - layered == set(), "packages of server/ that no layer names"
