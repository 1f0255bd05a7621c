"""A batch outlives its server (issue 65): a server SIGKILLed in the middle of a batch leaves it in progress; the
server started again on the same store takes it over once its lease runs out, and the output file holds every
`custom_id` exactly once. The chat model is replayed (the restart is the store's and the runner's, not the engine's)."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from tests.servers import replayed_server

LEASE_SECONDS = 3
LINES = 300


@pytest.mark.e2e
def test_a_batch_killed_midway_completes_after_a_restart_with_every_line_once(tmp_path: Path) -> None:
    first = replayed_server(tmp_path, "killed", LEASE_SECONDS)
    try:
        client = first.client
        model = client.models.list().data[0].id
        requests = "".join(json.dumps({"custom_id": f"line-{n}", "method": "POST", "url": "/v1/responses",
                                       "body": {"model": model, "input": f"Say {n}.", "store": n % 2 == 0}}) + "\n"
                           for n in range(LINES))
        file_id = client.files.create(file=("requests.jsonl", io.BytesIO(requests.encode())), purpose="batch").id
        batch = client.batches.create(input_file_id=file_id, endpoint="/v1/responses", completion_window="24h")
        deadline = time.monotonic() + 120
        while (seen := client.batches.retrieve(batch.id)).request_counts.completed < 10:  # type: ignore[union-attr]
            assert time.monotonic() < deadline, seen
            time.sleep(0.05)
    finally:
        first.kill()
    assert seen.status == "in_progress" and seen.request_counts.completed < LINES  # type: ignore[union-attr]
    second = replayed_server(tmp_path, "restarted", LEASE_SECONDS)
    try:
        client = second.client
        deadline = time.monotonic() + 300
        while (done := client.batches.retrieve(batch.id)).status != "completed":
            assert time.monotonic() < deadline and done.status in ("in_progress", "finalizing"), done
            time.sleep(0.5)
        assert done.request_counts is not None and (done.request_counts.completed, done.request_counts.failed) == (
            LINES, 0)
        assert done.output_file_id is not None and done.error_file_id is None
        output = [json.loads(line) for line in client.files.content(done.output_file_id).text.splitlines()]
        assert sorted(line["custom_id"] for line in output) == sorted(f"line-{n}" for n in range(LINES))
        assert [line["custom_id"] for line in output] == [f"line-{n}" for n in range(LINES)]  # in the file's order
        stored = output[0]["response"]["body"]["id"]  # a line with `store: true` is a stored response
        assert client.responses.retrieve(stored).status == "completed"
    finally:
        second.stop()
