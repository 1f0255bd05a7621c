"""Projects and their keys: made by `responses-server keys`, kept as SHA-256 only, refused at once when revoked on
every replica sharing the store; declared in a projects file by hash; `--api-key` still the default project's."""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import sys
import io
from contextlib import ExitStack, redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from server.config import ServerConfig
from server.http.app import create_app
from server.runs.context import ServingContext
from server.store.database import StoreUnavailable
from server.tenancy.authenticator import Authenticator
from server.records import open_key_records
from server.tenancy.commands import main as keys_main
from server.tenancy.keys import Caller
from server.tenancy.projects_file import read_projects_file
from streaming.ids import counting_ids
from tests.conftest import serve_in_thread
from tests.scripted_engine import ScriptedEngine
from tests.test_server import MODEL
from tests.test_store import open_url

ROOT = Path(__file__).resolve().parents[1]


def keys_cli(store_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`responses-server keys --store URL ...`, as an operator runs it."""
    return subprocess.run([sys.executable, "-m", "server", "keys", "--store", store_url, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def keys(store_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The same command, run in this process (seconds of imports less per call)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = keys_main(["--store", store_url, *args], Path("unused"), open_key_records)
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def created_key(store_url: str, *args: str) -> str:
    made = keys(store_url, "create", *args)
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


def get_models(base_url: str, key: str | None) -> int:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    return httpx.get(f"{base_url}/models", headers=headers, timeout=30).status_code


def test_a_created_key_is_shown_once_and_kept_only_as_its_hash(store_url: str, tmp_path: Path) -> None:
    made = keys_cli(store_url, "create", "--project", "alpha", "--name", "alice-codex")
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert key.startswith("rs-") and len(key) > 40
    assert "created for project alpha" in made.stderr and key not in made.stderr  # the audit line, keyless
    listed = keys_cli(store_url, "list")
    assert listed.returncode == 0 and "alice-codex" in listed.stdout and "alpha" in listed.stdout
    assert key not in listed.stdout + listed.stderr

    async def stored() -> list[Any]:
        records = open_url(store_url)
        store = records.keys
        try:
            return await store.list_keys()
        finally:
            await records.close()

    (record,) = asyncio.run(stored())
    assert record.hash == hashlib.sha256(key.encode()).hexdigest() and key not in repr(record)
    if store_url.startswith("sqlite:///"):  # nothing on disk holds the key
        folder = Path(store_url[len("sqlite:///"):]).parent
        assert not any(key.encode() in path.read_bytes() for path in folder.iterdir() if path.is_file())


@pytest.fixture
def keyed_replicas(store_url: str, tokenizer: Any) -> Iterator[tuple[list[str], dict[str, str]]]:
    """Two replicas on a store that holds keys when they start: keys are required."""
    made = {name: created_key(store_url, "--project", name) for name in ("alpha", "beta")}
    made["admin"] = created_key(store_url, "--admin", "--name", "ops")
    with ExitStack() as stack:
        urls = []
        for _ in range(2):
            engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
            context = ServingContext(config=ServerConfig(served_model_name=MODEL), engine_factory=lambda: engine,
                                     ids=counting_ids(), records=open_url(store_url))
            urls.append(stack.enter_context(serve_in_thread(create_app(context))))
        yield urls, made


def test_a_revoked_key_is_refused_at_once_on_every_replica(store_url: str,
                                                           keyed_replicas: tuple[list[str], dict[str, str]]) -> None:
    urls, made = keyed_replicas
    assert [get_models(url, made["alpha"]) for url in urls] == [200, 200]
    assert [get_models(url, None) for url in urls] == [401, 401]
    assert [get_models(url, "rs-" + "x" * 43) for url in urls] == [401, 401]
    (alpha_id,) = [line.split("\t")[0] for line in keys(store_url, "list").stdout.splitlines() if "\talpha\t" in line]
    revoked = keys(store_url, "revoke", alpha_id)
    assert revoked.returncode == 0, revoked.stderr
    assert [get_models(url, made["alpha"]) for url in urls] == [401, 401]
    assert [get_models(url, made["beta"]) for url in urls] == [200, 200]
    assert keys(store_url, "revoke", alpha_id).returncode == 1  # already revoked


def test_an_admin_key_cannot_call_inference(keyed_replicas: tuple[list[str], dict[str, str]]) -> None:
    urls, made = keyed_replicas
    answer = httpx.post(f"{urls[0]}/responses", json={"model": MODEL, "input": "hi"}, timeout=30,
                        headers={"Authorization": f"Bearer {made['admin']}"})
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "admin_key_not_allowed"
    assert made["admin"] not in answer.text


def test_a_projects_file_declares_keys_by_hash(tokenizer: Any, tmp_path: Path) -> None:
    key = "team-alpha-secret-key-0123456789"
    projects = tmp_path / "projects.toml"
    projects.write_text(f'[[keys]]\nname = "ci"\nproject = "alpha"\nsha256 = "{hashlib.sha256(key.encode()).hexdigest()}"\n')
    declared = read_projects_file(projects)
    assert [(k.name, k.project) for k in declared.keys] == [("ci", "alpha")]
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    context = ServingContext(config=ServerConfig(served_model_name=MODEL, api_keys=("legacy-key",),
                                                 projects=declared),
                             engine_factory=lambda: engine, ids=counting_ids())
    with serve_in_thread(create_app(context)) as base_url:
        assert get_models(base_url, key) == 200
        assert get_models(base_url, "legacy-key") == 200  # --api-key: the default project's, as before
        assert get_models(base_url, "team-alpha") == 401
        assert get_models(base_url, None) == 401


@pytest.mark.parametrize(("text", "complaint"), [
    ('[[keys]]\nname = "ci"\nsha256 = "team-alpha-secret-key"\n', "never the key itself"),
    ('[[keys]]\nname = "c i"\nsha256 = "' + "a" * 64 + '"\n', "letters, digits"),
    ("keys = 3\n", "arrays of tables"),
    ("[[keys]\n", "--projects-file"),
    ('[[projects]]\nname = "alpha"\nrequests_per_minute = 0\n', "projects\\[0\\]: `requests_per_minute` is a whole number"),
    ('[[projects]]\nrequests_per_minute = 5\n', "projects\\[0\\]: a table with a `name`"),
    ('[[keys]]\nsha256 = "' + "a" * 64 + '"\ntokens_per_day = "many"\n', "keys\\[0\\]: `tokens_per_day`"),
], ids=["a plain key", "a bad name", "not a list", "not TOML", "a zero limit", "a project with no name",
        "a limit not a number"])
def test_a_bad_projects_file_is_refused_naming_what_is_wrong(tmp_path: Path, text: str, complaint: str) -> None:
    projects = tmp_path / "projects.toml"
    projects.write_text(text)
    with pytest.raises(ValueError, match=complaint):
        read_projects_file(projects)


class _FlakyKeyTable:
    """A key table whose store is down for its first `down` reads, then holds no key."""

    def __init__(self, down: int) -> None:
        self.down = down

    async def has_keys(self) -> bool:
        if self.down:
            self.down -= 1
            raise StoreUnavailable("down")
        return False

    async def find_key(self, digest: str) -> None:
        return None

    async def touch_key(self, key_id: str, at: float) -> None:
        return None


def test_a_store_down_at_start_refuses_with_503_until_it_answers() -> None:
    """Whether keys are needed is not known while the store is down: requests are refused (503, try again), not
    told their key is wrong for the server's whole life (a process that lost a race for a new file did that)."""
    authenticator = Authenticator({}, _FlakyKeyTable(down=2))

    async def calls() -> list[object]:
        await authenticator.start()
        seen: list[object] = []
        for _ in range(3):
            try:
                seen.append(await authenticator.caller(b""))
            except StoreUnavailable:
                seen.append("503")
        return seen

    assert asyncio.run(calls()) == ["503", Caller(), Caller()]
