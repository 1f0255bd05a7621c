"""Fixtures: the bundled model's tokenizer, and the real app served by uvicorn in a thread."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest
import uvicorn

from conformance.openresponses import SpecCheckingApp


@pytest.fixture(scope="session")
def bundled_model() -> Path:
    from server.bundled_model import ensure_bundled_model

    return ensure_bundled_model()


@pytest.fixture(scope="session")
def tiny_gpt_oss() -> Path:
    """The tiny gpt-oss checkpoint (tests/tiny_gpt_oss.py), built once into the cache beside the bundled model."""
    from server.bundled_model import cache_dir
    from tests.tiny_gpt_oss import TINY_GPT_OSS_NAME, ensure_tiny_gpt_oss

    return ensure_tiny_gpt_oss(cache_dir() / "models" / TINY_GPT_OSS_NAME)


@pytest.fixture(scope="session")
def tokenizer(bundled_model: Path) -> Any:
    from server.engine.vllm_engine import load_tokenizer

    return load_tokenizer(str(bundled_model))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serve_asgi(app: Any, host: str = "127.0.0.1", port: int | None = None, **config: Any) -> Iterator[int]:
    """Any ASGI app on a free port (or `port`) of `host` (uvicorn in a thread, with `config` for uvicorn) until the
    block ends; yields the port."""
    port = port or free_port()
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", **config))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextmanager
def serve_in_thread(app: Any) -> Iterator[str]:
    """Run the app on a real socket (uvicorn in a thread); yields the base URL ending in /v1.

    Every JSON body it answers with is checked against the Open Responses schema; a violation fails the test."""
    checked = SpecCheckingApp(app)
    with serve_asgi(checked) as port:
        yield f"http://127.0.0.1:{port}/v1"
    assert not checked.violations, "answers the Open Responses schema rejects:\n" + "\n".join(checked.violations)


@pytest.fixture(scope="session")
def codex(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Codex CLI from the npm registry (its native binary arrives as an npm optional dependency)."""
    prefix = tmp_path_factory.mktemp("codex")
    subprocess.run(["npm", "install", "--silent", "--prefix", str(prefix), "@openai/codex"], check=True,
                   timeout=600, capture_output=True)
    return prefix / "node_modules" / ".bin" / "codex"


def codex_provider(base_url: str, websockets: bool = False, catalog: bool = True) -> str:
    """Codex's config.toml lines for a custom provider `local` at `base_url`, its key in $LOCAL_API_KEY: given by a
    command with `catalog` (as the README shows; Codex then reads the server's catalog), else as `env_key`."""
    key = ('\n[model_providers.local.auth]\ncommand = "printenv"\nargs = ["LOCAL_API_KEY"]\n' if catalog
           else 'env_key = "LOCAL_API_KEY"\n')
    return ('model_provider = "local"\n\n[model_providers.local]\nname = "responses-server"\n'
            f'base_url = "{base_url}"\nwire_api = "responses"\nsupports_websockets = {str(websockets).lower()}\n{key}')


def run_codex(codex: Path, base_url: str, model: str, tmp_path: Path, prompt: str,
              *flags: str, websockets: bool = False, catalog: bool = False) -> subprocess.CompletedProcess[str]:
    """`codex exec --json PROMPT` against `base_url`, in a fresh Codex home and an empty work directory; with
    `websockets`, the provider says `supports_websockets = true` (Codex then talks over one WebSocket); with
    `catalog`, the key comes from a command, as the README shows (Codex then reads the server's model catalog)."""
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir(exist_ok=True)
    (home / "config.toml").write_text(f'model = "{model}"\n' + codex_provider(base_url, websockets, catalog))
    return subprocess.run([str(codex), "exec", "--skip-git-repo-check", "--json", *flags, prompt],
                          cwd=work, env={**os.environ, "CODEX_HOME": str(home), "LOCAL_API_KEY": "x"},
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Any]:
    """A real PostgreSQL server for the session (Debian's package, installed by scripts/setup.sh)."""
    from tests.postgres import PostgresServer

    server = PostgresServer().start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each store test runs on both backends: a fresh SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'responses.db'}"
    return request.getfixturevalue("postgres").new_database()


@pytest.fixture(scope="session")
def traces() -> Iterator[Any]:
    """Tracing on in this process from the first test that asks, exporting over OTLP/HTTP (the server's own
    configuration, from its flag) to a receiver that decodes what it gets; the last spans sent at the session's end."""
    from server import tracing
    from tests.otlp import receiving

    with receiving() as receiver:
        assert tracing.configure(receiver.url), "tracing is on"
        yield receiver
        tracing.shutdown()


# On pytest-xdist workers (`make test TEST_WORKERS=2`: `-n 2 --dist loadscope`), a group of tests runs at a time on
# one worker: a module's tests together (its module-scoped servers start once), a package's whose servers are
# package-scoped, and the modules that run three or more vLLM engines at once one after another on the same worker
# (each engine holds its KV cache, 3 GiB here: two such modules at once would fill the machine's 24). The groups that
# start real engines go first, the longest first, so that the many short ones even out the end.
# Each worker's engines run on a core of their own: vLLM's `auto` binding keeps one of two cores for the frontend and
# binds every engine's OpenMP threads to the other, so both workers' engines would share core 0. gw0 on core 0, gw1
# on core 1. One thread runs the bundled model's steps as fast as two here (a 200-token turn: 27.2 s bound, 29.3 auto).
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER.startswith("gw") and int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", str(int(_WORKER[2:]) % (os.cpu_count() or 1)))
SHARED_SERVER_PACKAGES = ("e2e_one_server", "e2e_default_server")
SEVERAL_ENGINES = ("test_e2e_fleet.py", "test_e2e_replicas.py", "test_e2e_vision.py")
FIRST = ("several-engines", "e2e_one_server", "e2e_default_server", "test_e2e_gpt_oss.py", "test_fuzz.py",
         "test_e2e_codex.py", "test_e2e_ingestion_restart.py")


def group_of(path: str) -> str:
    """The group of the tests in the file at `path` (relative or not), as above."""
    parts = path.replace("\\", "/").split("/")
    if len(parts) > 1 and parts[-2] in SHARED_SERVER_PACKAGES:
        return parts[-2]
    return "several-engines" if parts[-1] in SEVERAL_ENGINES else parts[-1]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """On xdist's workers, the groups in FIRST before the rest, in that order; each group's tests in the order
    collected."""
    if not _WORKER:
        return

    def rank(item: pytest.Item) -> int:
        group = group_of(str(item.path))
        return FIRST.index(group) if group in FIRST else len(FIRST)

    items.sort(key=rank)  # stable: a module's tests stay together and in order


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With `--dist loadscope`, a scope is a group as above (xdist's `loadgroup` marks no longer work on pytest 9)."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        """xdist's scheduling by scope, each scope a group of tests (group_of), in the order collected."""

        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid.split("::", 1)[0])

    config.option.loadscopereorder = False  # (by the number of tests in it, not how long they take)
    return GroupScheduling(config, log)


SERVER_LOG_LINES = 80  # of each server's log, shown under a failed test that used it


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test that used a running server (a fixture with a `log` file) shows the end of that log: what the
    server and its engine printed is what CI keeps of a failure that happened inside them."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    for name, value in getattr(item, "funcargs", {}).items():
        log = getattr(value, "log", None)
        if isinstance(log, Path) and log.is_file():
            tail = log.read_text(errors="replace").splitlines()[-SERVER_LOG_LINES:]
            report.sections.append((f"server log of {name} ({log})", "\n".join(tail)))
