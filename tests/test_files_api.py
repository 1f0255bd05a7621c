"""`/v1/files` (issue 44, part 1): upload, list, retrieve, content and delete through the SDK, on both stores; the
upload's size limit; expiry; each project's files its own; and `input_file` by `file_id` in a response's prompt."""

from __future__ import annotations

from typing import Any, Iterator

import httpx
import openai
import pytest

from server.config import ServerConfig
from server.http.app import create_app
from server.retrieval.files import PART_BYTES
from server.runs.context import ServingContext
from server.tenancy.projects_file import ProjectsFile
from tests.conftest import serve_in_thread
from tests.scripted_engine import ScriptedEngine
from tests.test_files import pdf
from tests.test_server import MODEL, Harness
from tests.test_store import open_url, say
from tests.test_tenancy_isolation import KEYS, declared


def _served(tokenizer: Any, store: Any, **config: Any) -> tuple[ScriptedEngine, Any]:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    context = ServingContext(config=ServerConfig(served_model_name=MODEL, **config), engine_factory=lambda: engine,
                             records=store)
    return engine, serve_in_thread(create_app(context))


@pytest.fixture
def files(tokenizer: Any, store_url: str) -> Iterator[Harness]:
    engine, server = _served(tokenizer, open_url(store_url), max_file_bytes=4 * PART_BYTES)
    with server as base_url:
        yield Harness(engine, base_url)


def test_a_file_goes_up_is_listed_read_back_and_deleted_through_the_sdk(files: Harness) -> None:
    content = bytes(range(256)) * (PART_BYTES // 256 * 2 + 3)  # two parts and a bit: stored a part at a time
    made = files.client.files.create(file=("data.bin", content), purpose="user_data")
    assert (made.object, made.filename, made.purpose, made.bytes, made.status) == (
        "file", "data.bin", "user_data", len(content), "processed")
    notes = files.client.files.create(file=("notes.txt", b"hello"), purpose="assistants")
    assert [file.id for file in files.client.files.list()] == [notes.id, made.id]  # newest first
    assert [file.id for file in files.client.files.list(purpose="user_data")] == [made.id]
    page = files.client.files.list(limit=1)
    assert [file.id for file in page.data] == [notes.id] and page.has_more
    assert [file.id for file in files.client.files.list(limit=1, after=notes.id).data] == [made.id]
    assert files.client.files.retrieve(made.id) == made
    assert files.client.files.content(made.id).read() == content
    assert files.client.files.delete(made.id).deleted
    with pytest.raises(openai.NotFoundError):
        files.client.files.retrieve(made.id)
    with pytest.raises(openai.NotFoundError):
        files.client.files.delete(made.id)


def test_an_upload_past_the_limit_is_a_413_and_nothing_is_kept(files: Harness) -> None:
    with pytest.raises(openai.APIStatusError) as refused:
        files.client.files.create(file=("big.bin", b"x" * (4 * PART_BYTES + 1)), purpose="user_data")
    assert refused.value.status_code == 413 and refused.value.body["code"] == "file_too_large"
    with pytest.raises(openai.APIStatusError) as refused:  # past the body's own limit: refused as it arrives
        files.client.files.create(file=("bigger.bin", b"x" * (5 * PART_BYTES)), purpose="user_data")
    assert refused.value.status_code == 413
    assert files.client.files.list().data == []


def test_expiry_is_checked_and_stated(files: Harness) -> None:
    made = files.client.files.create(file=("a.txt", b"a"), purpose="user_data",
                                     expires_after={"anchor": "created_at", "seconds": 3600})
    assert made.expires_at == made.created_at + 3600
    for expires_after in ({"anchor": "created_at", "seconds": 60}, {"anchor": "last_active_at", "seconds": 3600}):
        with pytest.raises(openai.BadRequestError):
            files.client.files.create(file=("a.txt", b"a"), purpose="user_data", expires_after=expires_after)
    with pytest.raises(openai.BadRequestError) as refused:
        files.client.files.create(file=("a.txt", b"a"), purpose="nonsense")  # type: ignore[arg-type]
    assert refused.value.body["param"] == "purpose"


def test_a_projects_files_are_its_own(tokenizer: Any, store_url: str) -> None:
    """Beta gets for alpha's file exactly what it gets for a file that does not exist, on every route."""
    engine, server = _served(tokenizer, open_url(store_url), projects=ProjectsFile(declared()))
    with server as base_url:
        alpha, beta = (httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {KEYS[name]}"})
                       for name in ("alpha", "beta"))
        made = alpha.post("/files", files={"file": ("secret.txt", b"alpha's secret")},
                          data={"purpose": "user_data"}).json()
        unknown = "file-" + "0" * 24
        for method, path in (("GET", "/files/{}"), ("GET", "/files/{}/content"), ("DELETE", "/files/{}")):
            theirs, nothing = (beta.request(method, path.format(file_id)) for file_id in (made["id"], unknown))
            assert theirs.status_code == nothing.status_code == 404
            assert theirs.json()["error"]["message"].replace(made["id"], unknown) == nothing.json()["error"]["message"]
        assert beta.get("/files").json()["data"] == []
        asked = beta.post("/responses", json={"model": MODEL, "input": [{"role": "user", "content": [
            {"type": "input_file", "file_id": made["id"]}]}]})
        assert asked.status_code == 400 and asked.json()["error"]["code"] == "file_not_found"
        assert alpha.get(f"/files/{made['id']}/content").content == b"alpha's secret"


def test_an_input_file_by_file_id_is_read_into_the_prompt(tokenizer: Any, tmp_path: Any) -> None:
    engine, server = _served(tokenizer, open_url(f"sqlite:///{tmp_path / 'responses.db'}"))
    with server as base_url:
        harness = Harness(engine, base_url)
        text = harness.client.files.create(file=("notes.txt", b"The launch code is 4417."), purpose="user_data")
        document = harness.client.files.create(file=("report.pdf", pdf("Quarterly revenue grew.")),
                                               purpose="user_data")
        harness.play(say(tokenizer, "Read."))
        answered = harness.post(input=[{"role": "user", "content": [
            {"type": "input_text", "text": "What do they say?"}, {"type": "input_file", "file_id": text.id},
            {"type": "input_file", "file_id": document.id}]}])
        assert answered.status_code == 200, answered.text
        prompt = tokenizer.decode(engine.requests[-1].prompt_token_ids)
        assert "The launch code is 4417." in prompt and "Quarterly revenue grew." in prompt
        assert 'name="notes.txt"' in prompt
        missing = harness.post(input=[{"role": "user", "content": [{"type": "input_file", "file_id": "file-nope"}]}])
        assert missing.status_code == 400 and missing.json()["error"]["param"] == "input[0].content[0].file_id"
