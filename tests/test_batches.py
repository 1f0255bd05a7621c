"""The Batch API through the openai SDK on a server with a scripted engine, SQLite and PostgreSQL: a batch's lines
run once each at the batch priority and its files are OpenAI's lines; an invalid file fails the batch naming each
line; cancel stops new lines; another project's batch is a missing one; batch work is apart from the limits and
counted apart in usage."""

from __future__ import annotations

import hashlib
import io
import json
import time
from contextlib import contextmanager
from typing import Any, Iterator

import httpx
import openai
import pytest
from openai import OpenAI
from openai.types.responses import Response

from server.batches.batch_run import BatchSettings
from server.config import ServerConfig
from server.http.app import create_app
from server.runs.context import ServingContext
from server.tenancy.keys import ApiKey
from server.tenancy.limits import Limits
from server.tenancy.projects_file import ProjectsFile
from tests.conftest import serve_in_thread
from tests.scripted_engine import ScriptedEngine, steps_from_tokens
from tests.test_server import MODEL
from tests.test_store import open_url

KEYS = {"alpha": "alpha-secret-key-0123456789abcdef", "beta": "beta-secret-key-0123456789abcdef",
        "admin": "admin-secret-key-0123456789abcdef"}


def _projects() -> ProjectsFile:
    keys = tuple(ApiKey(id=f"key_{name}", name=name, project="alpha" if name == "admin" else name,
                        hash=hashlib.sha256(key.encode()).hexdigest(), admin=name == "admin")
                 for name, key in KEYS.items())
    return ProjectsFile(keys, project_limits={"alpha": Limits(requests_per_minute=2)})


@contextmanager
def _server(store_url: str, tokenizer: Any, step_delay: float = 0.0,
            step_aside: bool = False) -> Iterator[tuple[str, ScriptedEngine]]:
    answer = steps_from_tokens(tokenizer.encode("Paris is the capital.", add_special_tokens=False)
                               + [tokenizer.eos_token_id], cuts=[1, 3])
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[answer], step_delay=step_delay)
    config = ServerConfig(served_model_name=MODEL, projects=_projects(),
                          batches=BatchSettings(lines_at_once=2, poll_seconds=0.05, step_aside=step_aside))
    context = ServingContext(config=config, engine_factory=lambda: engine, records=open_url(store_url))
    with serve_in_thread(create_app(context)) as url:
        yield url, engine


def _client(url: str, project: str) -> OpenAI:
    return OpenAI(base_url=url, api_key=KEYS[project], max_retries=0, _strict_response_validation=True)


def _line(custom_id: str, **body: Any) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/responses",
            "body": {"model": MODEL, "input": f"Question {custom_id}?", **body}}


def _upload(client: OpenAI, lines: list[Any], purpose: str = "batch") -> str:
    text = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n"
    return client.files.create(file=("requests.jsonl", io.BytesIO(text.encode())), purpose=purpose).id  # type: ignore


def _ended(client: OpenAI, batch_id: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while (batch := client.batches.retrieve(batch_id)).status not in ("completed", "failed", "cancelled", "expired"):
        assert time.monotonic() < deadline, batch
        time.sleep(0.05)
    return batch


def _lines_of(client: OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return [json.loads(line) for line in client.files.content(file_id).text.splitlines()]


def test_a_batch_answers_every_line_once_in_its_files(store_url: str, tokenizer: Any) -> None:
    """Five lines, one of them a bad request: four answers in the output file (each a Response the SDK takes), the
    bad one's 400 in the error file, naming its field; the lines ran behind interactive work in the engine; the batch
    is not held to the project's requests per minute, and the usage API says its tokens were batch."""
    with _server(store_url, tokenizer) as (url, engine):
        alpha = _client(url, "alpha")
        interactive = alpha.responses.create(model=MODEL, input="Hello?")
        lines = [_line(f"q{n}", max_output_tokens=16) for n in range(4)] + [_line("bad", temperature="hot")]
        file_id = _upload(alpha, lines)
        batch = alpha.batches.create(input_file_id=file_id, endpoint="/v1/responses", completion_window="24h",
                                     metadata={"run": "nightly"})
        assert batch.status == "validating" and batch.metadata == {"run": "nightly"}
        done = _ended(alpha, batch.id)
        assert done.status == "completed", done
        assert done.request_counts is not None and (done.request_counts.total, done.request_counts.completed,
                                                    done.request_counts.failed) == (5, 4, 1)
        assert done.model == MODEL and done.completed_at and done.in_progress_at and done.finalizing_at
        output, errors = _lines_of(alpha, done.output_file_id), _lines_of(alpha, done.error_file_id)
        assert sorted(line["custom_id"] for line in output) == ["q0", "q1", "q2", "q3"]
        for line in output:
            assert line["response"]["status_code"] == 200 and line["error"] is None
            assert Response.model_validate(line["response"]["body"]).output_text == "Paris is the capital."
        assert [(line["custom_id"], line["response"]["status_code"]) for line in errors] == [("bad", 400)]
        assert errors[0]["response"]["body"]["error"]["param"] == "temperature"  # as the route answers it
        assert done.usage is not None and done.usage.input_tokens == sum(
            Response.model_validate(line["response"]["body"]).usage.input_tokens for line in output)  # type: ignore
        file = alpha.files.retrieve(done.output_file_id)  # type: ignore[arg-type]
        assert file.purpose == "batch_output"
        priorities = [request.priority for request in engine.requests]
        assert priorities[0] == 0 and set(priorities[1:]) == {2}, priorities  # behind every tier
        with pytest.raises(openai.RateLimitError):  # two interactive requests a minute: the batch took none
            alpha.responses.create(model=MODEL, input="Hello?", previous_response_id=interactive.id)
            alpha.responses.create(model=MODEL, input="Hello?")
        usage = httpx.get(f"{url}/organization/usage/completions", headers={"Authorization": f"Bearer {KEYS['admin']}"},
                          params={"start_time": int(time.time()) - 600, "bucket_width": "1d", "group_by": "batch"})
        results = {result["batch"]: result for bucket in usage.json()["data"] for result in bucket["results"]}
        assert results[True]["num_model_requests"] == 4 and results[True]["input_tokens"] == done.usage.input_tokens
        assert results[False]["num_model_requests"] == 2


def test_an_invalid_file_fails_the_batch_naming_each_line(store_url: str, tokenizer: Any) -> None:
    with _server(store_url, tokenizer) as (url, engine):
        alpha = _client(url, "alpha")
        wrong_url = {**_line("c"), "url": "/v1/chat/completions"}
        file_id = _upload(alpha, [_line("a"), "{not json", _line("a"), wrong_url, {**_line("d"), "method": "GET"}])
        batch = alpha.batches.create(input_file_id=file_id, endpoint="/v1/responses", completion_window="24h")
        failed = _ended(alpha, batch.id)
        assert failed.status == "failed" and failed.failed_at and failed.errors is not None
        assert [(error.code, error.line) for error in failed.errors.data or []] == [
            ("invalid_json_line", 2), ("duplicate_custom_id", 3), ("invalid_url", 4), ("invalid_method", 5)]
        other_model = _upload(alpha, [_line("a", model="not-served"), _line("b", model="not-served")])
        failed = _ended(alpha, alpha.batches.create(input_file_id=other_model, endpoint="/v1/responses",
                                                    completion_window="24h").id)
        assert [(error.code, error.param) for error in failed.errors.data or []] == [  # type: ignore[union-attr]
            ("model_not_found", "body.model")]
        mixed = _upload(alpha, [_line("a"), _line("b", model="not-served")])
        failed = _ended(alpha, alpha.batches.create(input_file_id=mixed, endpoint="/v1/responses",
                                                    completion_window="24h").id)
        assert [error.code for error in failed.errors.data or []] == ["mismatched_model"]  # type: ignore[union-attr]
        assert not engine.requests  # nothing of a failed batch runs
        for wrong, param in ((dict(endpoint="/v1/embeddings"), "endpoint"), (dict(completion_window="1h"),
                                                                              "completion_window"),
                             (dict(input_file_id=_upload(alpha, [_line("a")], "assistants")), "input_file_id")):
            with pytest.raises(openai.BadRequestError) as refused:
                alpha.batches.create(**{"input_file_id": file_id, "endpoint": "/v1/responses",  # type: ignore
                                        "completion_window": "24h", **wrong})
            assert refused.value.body["param"] == param  # type: ignore[index]
        with pytest.raises(openai.NotFoundError):
            alpha.batches.create(input_file_id="file-missing", endpoint="/v1/responses", completion_window="24h")


def test_cancel_stops_new_lines_and_keeps_those_that_ran(store_url: str, tokenizer: Any) -> None:
    with _server(store_url, tokenizer, step_delay=0.1) as (url, engine):
        alpha = _client(url, "alpha")
        batch = alpha.batches.create(input_file_id=_upload(alpha, [_line(f"q{n}") for n in range(20)]),
                                     endpoint="/v1/responses", completion_window="24h")
        deadline = time.monotonic() + 30
        while not engine.requests:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert alpha.batches.cancel(batch.id).status == "cancelling"
        cancelled = _ended(alpha, batch.id)
        assert cancelled.status == "cancelled" and cancelled.cancelled_at and cancelled.cancelling_at
        output = _lines_of(alpha, cancelled.output_file_id)
        assert cancelled.request_counts is not None and 0 < cancelled.request_counts.completed == len(output) < 20
        assert len({line["custom_id"] for line in output}) == len(output) == len(engine.requests)
        assert alpha.batches.cancel(batch.id).status == "cancelled"  # an ended batch stays as it ended


def test_another_projects_batch_is_a_missing_one(store_url: str, tokenizer: Any) -> None:
    with _server(store_url, tokenizer) as (url, _):
        alpha, beta = _client(url, "alpha"), _client(url, "beta")
        file_id = _upload(alpha, [_line("a")])
        batch = alpha.batches.create(input_file_id=file_id, endpoint="/v1/responses", completion_window="24h")
        _ended(alpha, batch.id)
        random_id = "batch_" + "0" * (len(batch.id) - len("batch_"))
        for route in (lambda batch_id: beta.batches.retrieve(batch_id), lambda batch_id: beta.batches.cancel(batch_id)):
            answers = []
            for batch_id in (batch.id, random_id):
                with pytest.raises(openai.NotFoundError) as missing:
                    route(batch_id)
                answers.append(missing.value.body["message"].replace(batch_id, "ID"))  # type: ignore[index]
            assert answers[0] == answers[1]
        assert beta.batches.list().data == [] and [found.id for found in alpha.batches.list()] == [batch.id]
        with pytest.raises(openai.NotFoundError):  # nor can beta run alpha's file
            beta.batches.create(input_file_id=file_id, endpoint="/v1/responses", completion_window="24h")
        assert alpha.batches.retrieve(batch.id).status == "completed"


def test_batch_lines_step_aside_for_an_interactive_turn_and_run_again(store_url: str, tokenizer: Any) -> None:
    """With `--batch-step-aside`, the lines running when an interactive turn arrives are stopped (their engine
    requests aborted) and run again later: the turn has the engine to itself, and the batch still answers every line
    once."""
    with _server(store_url, tokenizer, step_delay=0.2, step_aside=True) as (url, engine):
        alpha = _client(url, "alpha")
        batch = alpha.batches.create(input_file_id=_upload(alpha, [_line(f"q{n}") for n in range(6)]),
                                     endpoint="/v1/responses", completion_window="24h")
        deadline = time.monotonic() + 30
        while len(engine.requests) < 2:  # two lines at once
            assert time.monotonic() < deadline
            time.sleep(0.02)
        lines_running = {request.request_id for request in engine.requests}
        turn = alpha.responses.create(model=MODEL, input="Hello?")
        assert turn.status == "completed"
        assert lines_running <= set(engine.aborted), "the lines running stepped aside"
        done = _ended(alpha, batch.id)
        assert done.status == "completed" and done.request_counts is not None
        assert (done.request_counts.completed, done.request_counts.failed) == (6, 0)
        assert sorted(line["custom_id"] for line in _lines_of(alpha, done.output_file_id)) == [f"q{n}" for n in range(6)]


def test_a_batch_past_its_window_expires_with_its_lines_not_run_in_the_error_file(store_url: str) -> None:
    """A runner that takes a batch after its 24 hours (a clock a day on) runs none of its lines: the batch ends
    `expired`, each line in the error file as `batch_expired`."""
    import asyncio

    from server.batches.batch_run import BatchRun, Room
    from server.retrieval.files import StoredFile

    async def scenario() -> None:
        records = open_url(store_url)
        batches = records.project_batches("alpha")
        content = "".join(json.dumps(_line(f"q{n}")) + "\n" for n in range(3)).encode()
        file = StoredFile("file-input", "alpha", "in.jsonl", "batch", len(content), int(time.time()))
        await batches.files.save_file(file, [content])
        batch = await batches.create({"input_file_id": file.id, "endpoint": "/v1/responses",
                                      "completion_window": "24h"}, None)
        claimed = await records.batches.claim("runner", 30.0, [])
        assert claimed == (batch.id, "alpha")
        answered: list[dict[str, Any]] = []

        async def answer(_: Any, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            answered.append(body)
            return 200, {}

        run = BatchRun(batches, batch, "runner", answer, Room(lambda: 0, BatchSettings(poll_seconds=0.01)),
                       lambda model: True, clock=lambda: time.time() + 25 * 3600)
        await run.run()
        ended = await batches.get(batch.id)
        assert ended is not None and ended.status == "expired" and ended.times.get("expired_at")
        assert not answered and ended.output_file_id is None and ended.error_file_id is not None
        found = await batches.files.file_content(ended.error_file_id, 1 << 20)
        assert found is not None and found[1] is not None
        lines = [json.loads(line) for line in found[1].decode().splitlines()]
        assert [(line["custom_id"], line["error"]["code"]) for line in lines] == [
            (f"q{n}", "batch_expired") for n in range(3)]
        assert (ended.counts.completed, ended.counts.failed) == (0, 3)
        await records.close()

    asyncio.run(scenario())
