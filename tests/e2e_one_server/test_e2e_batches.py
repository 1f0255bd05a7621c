"""The Batch API through the real openai SDK on the bundled model: create from an uploaded file, poll, read the
output and error files, list; a second batch cancelled while it runs."""

from __future__ import annotations

import io
import json
import time
from typing import Any

from openai import OpenAI
from openai.types import Batch
from openai.types.responses import Response

from tests.servers import MODEL, RunningServer


def _batch(client: OpenAI, bodies: list[dict[str, Any]]) -> Batch:
    text = "".join(json.dumps({"custom_id": f"task-{n}", "method": "POST", "url": "/v1/responses",
                               "body": {"model": MODEL, **body}}) + "\n" for n, body in enumerate(bodies))
    file_id = client.files.create(file=("tasks.jsonl", io.BytesIO(text.encode())), purpose="batch").id
    return client.batches.create(input_file_id=file_id, endpoint="/v1/responses", completion_window="24h")


def _ended(client: OpenAI, batch_id: str) -> Batch:
    deadline = time.monotonic() + 300
    while (batch := client.batches.retrieve(batch_id)).status not in ("completed", "failed", "cancelled"):
        assert time.monotonic() < deadline, batch
        time.sleep(0.5)
    return batch


def test_a_batch_runs_on_the_bundled_model_and_its_files_are_read_through_the_sdk(server: RunningServer) -> None:
    client = server.client
    questions = ["Name a color.", "Name a fruit.", "Name a city."]
    batch = _batch(client, [{"input": question, "max_output_tokens": 8, "temperature": 0} for question in questions]
                   + [{"input": "Hi", "max_output_tokens": 8, "temperature": "hot"}])
    done = _ended(client, batch.id)
    assert done.status == "completed" and done.request_counts is not None
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (4, 3, 1)
    output = [json.loads(line) for line in client.files.content(done.output_file_id or "").text.splitlines()]
    assert [line["custom_id"] for line in output] == ["task-0", "task-1", "task-2"]
    for line in output:
        response = Response.model_validate(line["response"]["body"])
        assert response.status in ("completed", "incomplete") and response.output_text
        assert response.model == MODEL and response.usage is not None and response.usage.output_tokens <= 8
    errors = [json.loads(line) for line in client.files.content(done.error_file_id or "").text.splitlines()]
    assert [(line["custom_id"], line["response"]["status_code"]) for line in errors] == [("task-3", 400)]
    assert done.usage is not None and done.usage.output_tokens == sum(
        line["response"]["body"]["usage"]["output_tokens"] for line in output)
    assert batch.id in [listed.id for listed in client.batches.list(limit=100)]


def test_a_cancelled_batch_keeps_the_lines_that_ran(server: RunningServer) -> None:
    client = server.client
    batch = _batch(client, [{"input": f"Count to {n}.", "max_output_tokens": 16} for n in range(40)])
    deadline = time.monotonic() + 120
    while client.batches.retrieve(batch.id).status == "validating":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert client.batches.cancel(batch.id).status == "cancelling"
    cancelled = _ended(client, batch.id)
    assert cancelled.status == "cancelled" and cancelled.request_counts is not None
    kept = cancelled.request_counts.completed
    assert kept < 40
    lines = client.files.content(cancelled.output_file_id).text.splitlines() if cancelled.output_file_id else []
    assert len(lines) == kept
