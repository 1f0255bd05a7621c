"""A file batch interrupted by SIGKILL completes when the server comes back (issue 44): the killed process's leases
run out, the new process claims the files and ingests them, on the real embedding model. The chat model is replayed
(nothing here generates)."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest

from tests.servers import replayed_server

LEASE_SECONDS = 3


@pytest.mark.e2e
def test_a_batch_killed_mid_ingestion_completes_after_a_restart(tmp_path: Path) -> None:
    first = replayed_server(tmp_path, "killed", LEASE_SECONDS)
    try:
        client = first.client
        store = client.vector_stores.create(name="interrupted").id
        texts = {f"part{index}.txt": f"Section {index}. " + "The quick brown fox jumps over the lazy dog. " * 40
                 for index in range(4)}  # ~450 tokens each: 3 chunks of 200
        ids = [client.files.create(file=(name, io.BytesIO(text.encode())), purpose="assistants").id
               for name, text in texts.items()]
        batch = client.vector_stores.file_batches.create(vector_store_id=store, file_ids=ids, chunking_strategy={
            "type": "static", "static": {"max_chunk_size_tokens": 200, "chunk_overlap_tokens": 0}})
        assert client.vector_stores.file_batches.retrieve(batch.id, vector_store_id=store).status == "in_progress"
    finally:
        first.kill()  # the embedding model is still starting: every file is in progress
    second = replayed_server(tmp_path, "restarted", LEASE_SECONDS)
    try:
        client = second.client
        deadline = time.monotonic() + 240
        while (done := client.vector_stores.file_batches.retrieve(batch.id, vector_store_id=store)).status == \
                "in_progress":
            assert time.monotonic() < deadline, "the batch stayed in progress"
            time.sleep(1)
        assert done.status == "completed" and done.file_counts.completed == len(texts), done
        page = client.vector_stores.search(vector_store_id=store, query="Section 2 quick brown fox")
        assert page.data and {hit.filename for hit in page.data} <= set(texts)
        assert any(hit.attributes and hit.attributes["chunk_index"] >= 1 for hit in page.data), "long files chunked"
    finally:
        second.stop()
