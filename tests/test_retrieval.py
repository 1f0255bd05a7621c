"""Vector stores and `file_search` (issue 44) through the real app and the SDK, with the embedding engine's test
double (tests/retrieval_doubles.py) and the real SQLite index: ingestion, search and its filters and ranking, each
project's stores its own, failures that say so, leases that survive a restart, and the tool's items, events and
citations."""

from __future__ import annotations

import asyncio
import io
import random
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conformance.contract import validate_events
from server.config import ServerConfig
from server.http.app import create_app
from server.records import MIGRATIONS
from server.retrieval.chunking import (SEGMENT_CHARS, ChunkingStrategy, _tokenizer, document_chunks, encoded,
                                       special_tokens)
from server.retrieval.embedding_model import ensure_embedding_model
from server.retrieval.filters import MAX_DEPTH, checked_filter
from server.retrieval.index import Ranked
from server.retrieval.search import fused
from server.retrieval.index import VectorIndex
from server.retrieval.service import Retrieval, RetrievalSettings, open_index
from server.retrieval.vector_stores import StoreFile
from server.runs.context import ServingContext
from server.errors import RequestError
from server.tenancy.projects_file import ProjectsFile
from tests.conftest import serve_in_thread
from tests.retrieval_doubles import WordsEmbedder, words_model
from tests.scripted_engine import ScriptedEngine, steps_from_tokens
from tests.test_hosted_tools import call_text, prompt_text, script
from tests.hostile import pdf_file
from tests.sse import events_of, parse_frames
from tests.test_server import MODEL, Harness
from tests.test_store import open_url
from tests.test_tenancy_isolation import KEYS, declared

DOCS = {"cats.txt": "Cats are small carnivorous mammals. They sleep sixteen hours a day and purr when content.",
        "rockets.txt": "A rocket engine burns propellant to produce thrust. Liquid oxygen and kerosene power rockets.",
        "bread.txt": "Bread is made from flour, water and yeast. The dough rises as the yeast ferments sugars."}


@pytest.fixture(scope="module")
def embedding_path() -> str:
    return str(ensure_embedding_model())


class Served(Harness):
    """The app with a scripted chat engine, the test embedder, and a client per project."""

    def __init__(self, engine: ScriptedEngine, base_url: str, context: ServingContext, embedder: WordsEmbedder):
        super().__init__(engine, base_url)
        self.context, self.embedder = context, embedder
        self.projects = {name: openai.OpenAI(base_url=base_url, api_key=key, max_retries=0,
                                             _strict_response_validation=True) for name, key in KEYS.items()}
        self.client = self.projects["alpha"]

    def upload(self, name: str, text: str | bytes, project: str = "alpha") -> str:
        data = text.encode() if isinstance(text, str) else text
        return self.projects[project].files.create(file=(name, io.BytesIO(data)), purpose="assistants").id

    def store_of(self, docs: dict[str, str], project: str = "alpha", **batch: Any) -> str:
        client = self.projects[project]
        store = client.vector_stores.create(name="docs")
        ids = [self.upload(name, text, project) for name, text in docs.items()]
        done = client.vector_stores.file_batches.create_and_poll(vector_store_id=store.id, file_ids=ids,
                                                                 poll_interval_ms=50, **batch)
        assert done.status == "completed", done
        return store.id

    def post_as(self, project: str, path: str, body: dict[str, Any]) -> httpx.Response:
        return httpx.post(f"{self.base_url}{path}", json=body, headers={"Authorization": f"Bearer {KEYS[project]}"})

    def post(self, **body: Any) -> httpx.Response:
        return self.post_as("alpha", "/responses", {"model": MODEL, **body})

    def raw_stream(self, **body: Any) -> list[dict[str, Any]]:
        with httpx.stream("POST", f"{self.base_url}/responses", json={"model": MODEL, "stream": True, **body},
                          headers={"Authorization": f"Bearer {KEYS['alpha']}"}, timeout=30) as response:
            assert response.status_code == 200, response.read()
            return events_of(parse_frames(response.iter_lines()))


def served_app(tokenizer: Any, url: str, embedding_path: str,
               embedder: WordsEmbedder | None = None) -> tuple[ServingContext, ScriptedEngine, WordsEmbedder]:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    config = ServerConfig(served_model_name=MODEL, tool_call_parser="hermes", projects=ProjectsFile(declared()))
    context = ServingContext(config=config, engine_factory=lambda: engine, records=open_url(url))
    embedder = embedder or WordsEmbedder(_tokenizer(embedding_path))

    async def start(_: Any) -> WordsEmbedder:
        return embedder

    context.retrieval = Retrieval.open(RetrievalSettings(words_model(embedding_path)), _index(url),
                                       context.project_files, "test-process", 1.0, start)
    return context, engine, embedder


def _index(url: str) -> VectorIndex:
    index = open_index(url, Path("unused"), MIGRATIONS)
    assert index is not None
    return index


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The index on both stores: a SQLite file, or a PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('retrieval') / 'responses.db'}"
    return request.getfixturevalue("postgres").new_database()


@pytest.fixture(scope="module")
def served(tokenizer: Any, embedding_path: str, database_url: str) -> Iterator[Served]:
    context, engine, embedder = served_app(tokenizer, database_url, embedding_path)
    with serve_in_thread(create_app(context)) as base_url:
        yield Served(engine, base_url, context, embedder)


# -- chunking, fusion and filters, pure ----------------------------------------------------------------------------


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pages=st.lists(st.lists(st.sampled_from(list("ab cdé\n.,") + ["word ", "Ünïcode ", "x" * 30]),
                               max_size=300).map("".join), min_size=1, max_size=4),
       size=st.integers(100, 300), overlap_share=st.floats(0, 0.5), window=st.integers(20, 64))
def test_chunks_cover_the_document_in_overlapping_spans_each_embedded_whole(embedding_path: str, pages: list[str],
                                                                           size: int, overlap_share: float,
                                                                           window: int) -> None:
    tokenizer = _tokenizer(embedding_path)
    strategy = ChunkingStrategy("static", size, int(size * overlap_share) // 1)
    chunks = document_chunks(pages, True, strategy, tokenizer, window)
    text = "\n\n".join(pages)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    wrap = special_tokens(tokenizer)
    assert [chunk.position for chunk in chunks] == list(range(len(chunks)))
    covered = [token for chunk in chunks for token in range(*chunk.tokens)]
    assert set(covered) == set(range(len(ids))), "every token is in a chunk"
    for before, after in zip(chunks, chunks[1:]):
        assert after.tokens[0] == before.tokens[0] + size - strategy.overlap, "chunks step by size - overlap"
    for chunk in chunks:
        assert chunk.tokens[1] - chunk.tokens[0] <= size
        assert chunk.text == text[chunk.chars[0]:chunk.chars[1]]
        inner = [token for prompt in chunk.prompts for token in prompt[len(wrap.before):len(prompt) - len(wrap.after)]]
        assert inner == ids[chunk.tokens[0]:chunk.tokens[1]], "the prompts embed the chunk's tokens, all of them"
        assert all(len(prompt) <= window for prompt in chunk.prompts), "each prompt fits the model's window"
        first_page = 1 + sum(1 for start in _page_starts(pages)[1:] if start <= chunk.chars[0])
        assert chunk.pages is not None and chunk.pages[0] == first_page


def test_a_long_text_is_tokenized_in_segments_exactly_as_whole(embedding_path: str) -> None:
    tokenizer = _tokenizer(embedding_path)
    rng = random.Random(7)
    words = ["river", "bank", "naïve", "co-operate", "x" * 40, "3.14", "\n", "!", "unbelievably"]
    text = " ".join(rng.choice(words) for _ in range(40_000))  # ~3 segments, cut at whitespace
    assert len(text) > 3 * SEGMENT_CHARS
    whole = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    ids, offsets = encoded(text, tokenizer)
    assert ids.tolist() == whole["input_ids"] and offsets == [tuple(pair) for pair in whole["offset_mapping"]]


def _page_starts(pages: list[str]) -> list[int]:
    starts, at = [], 0
    for page in pages:
        starts.append(at)
        at += len(page) + 2
    return starts


def test_fusion_scores_run_from_0_to_1_and_a_zero_weight_list_adds_nothing() -> None:
    vector = [Ranked(1, 0.9), Ranked(2, 0.8), Ranked(3, 0.1)]
    keyword = [Ranked(2, 9.0), Ranked(4, 3.0)]
    scores = dict(fused([(vector, 1.0), (keyword, 1.0)]))
    assert max(scores.values()) < 1.0 and scores[2] > scores[1] > scores[3], "first in one, second in the other"
    assert dict(fused([(vector, 1.0), (vector, 1.0)]))[1] == pytest.approx(1.0), "first everywhere is 1"
    alone = fused([(vector, 1.0), (keyword, 0.0)])
    assert [chunk for chunk, _ in alone[:3]] == [1, 2, 3] and 4 in dict(alone) and dict(alone)[4] == 0.0


def test_a_filter_nested_past_the_limit_is_a_400_however_deep() -> None:
    for depth in (MAX_DEPTH + 1, 1000, 50_000):
        nested: dict[str, Any] = {"type": "eq", "key": "a", "value": 1}
        for _ in range(depth):
            nested = {"type": "and", "filters": [nested]}
        with pytest.raises(RequestError, match="nested"):
            checked_filter(nested)


# -- stores, files, batches and search through the SDK -------------------------------------------------------------


def test_the_sdk_uploads_a_batch_polls_it_and_searches_the_store(served: Served) -> None:
    client = served.client
    store = client.vector_stores.create(name="docs", metadata={"team": "a"})
    files = [(name, io.BytesIO(text.encode())) for name, text in DOCS.items()]
    batch = client.vector_stores.file_batches.upload_and_poll(vector_store_id=store.id, files=files,
                                                              poll_interval_ms=50)
    assert batch.status == "completed" and batch.file_counts.completed == 3 and batch.file_counts.total == 3
    again = client.vector_stores.retrieve(store.id)
    assert again.file_counts.completed == 3 and again.usage_bytes > 0 and again.status == "completed"
    assert again.metadata == {"team": "a"}
    for query, expected in (("how long do cats sleep", "cats.txt"), ("rocket propellant thrust", "rockets.txt"),
                            ("yeast dough", "bread.txt")):
        page = client.vector_stores.search(vector_store_id=store.id, query=query, max_num_results=2)
        assert page.data[0].filename == expected, (query, page.data)
        assert 0 < page.data[0].score <= 1 and page.data[0].content[0].text in DOCS[expected]
        assert page.data[0].attributes and page.data[0].attributes["chunk_index"] == 0
    listed = client.vector_stores.files.list(vector_store_id=store.id)
    assert sorted(file.status for file in listed.data) == ["completed"] * 3
    assert all(file.chunking_strategy.static.max_chunk_size_tokens == 800 for file in listed.data)  # type: ignore[union-attr]


def pages_pdf(pages: list[str]) -> bytes:
    """A PDF of one line of text on each page."""
    count = len(pages)
    font = 3 + 2 * count
    kids = " ".join(f"{3 + 2 * index} 0 R" for index in range(count))
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", f"<< /Type /Pages /Kids [{kids}] /Count {count} >>".encode()]
    for index, text in enumerate(pages):
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
        objects += [f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * index} 0 R "
                    f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode(),
                    b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream"]
    return pdf_file([*objects, b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"])


def test_a_pdfs_results_say_their_pages_and_its_content_reads_back(served: Served) -> None:
    pages = [f"Page {number} is about {topic} only. " * 12 for number, topic in  # ~130 tokens a page
             enumerate(["volcanoes", "glaciers", "deserts", "rainforests"], 1)]
    file_id = served.upload("atlas.pdf", pages_pdf(pages))
    client = served.client
    store = client.vector_stores.create(name="atlas").id
    done = client.vector_stores.files.create_and_poll(vector_store_id=store, file_id=file_id, poll_interval_ms=50,
                                                      chunking_strategy={"type": "static", "static": {
                                                          "max_chunk_size_tokens": 100, "chunk_overlap_tokens": 0}})
    assert done.status == "completed", done.last_error
    hit = client.vector_stores.search(vector_store_id=store, query="glaciers").data[0]
    assert hit.attributes is not None and hit.attributes["page_start"] <= 2 <= hit.attributes["page_end"]
    assert hit.attributes["page_end"] - hit.attributes["page_start"] <= 1, "a 100-token chunk spans two pages at most"
    content = client.vector_stores.files.content(file_id, vector_store_id=store)
    text = "".join(part.text or "" for part in content)
    assert all(page.strip() in text for page in pages), text


def test_each_search_mode_finds_by_its_own_signal(served: Served) -> None:
    store = served.store_of({"a.txt": "alpha beta gamma", "b.txt": "delta epsilon", "c.txt": "zeta eta theta"})

    def first(query: str, **weights: float) -> str:
        options = {"hybrid_search": weights} if weights else {}
        response = served.post_as("alpha", f"/vector_stores/{store}/search",
                                  {"query": query, "ranking_options": options})
        assert response.status_code == 200, response.text
        return response.json()["data"][0]["filename"]

    assert first("epsilon", embedding_weight=0.0) == "b.txt"  # keywords alone
    assert first("theta", text_weight=0.0) == "c.txt"  # vectors alone
    assert first("gamma") == "a.txt"


def test_score_threshold_drops_weak_results_and_a_list_query_fuses_its_queries(served: Served) -> None:
    store = served.store_of(DOCS)
    client = served.client
    everything = client.vector_stores.search(vector_store_id=store, query="cats", max_num_results=3)
    assert len(everything.data) == 3
    cutoff = everything.data[0].score - 1e-6
    strict = client.vector_stores.search(vector_store_id=store, query="cats",
                                         ranking_options={"score_threshold": cutoff})
    assert [hit.filename for hit in strict.data] == ["cats.txt"]
    both = client.vector_stores.search(vector_store_id=store, query=["cats purr", "rocket thrust"], max_num_results=2)
    assert {hit.filename for hit in both.data} == {"cats.txt", "rockets.txt"}


def test_filters_are_applied_in_the_query_before_the_best_are_cut(served: Served) -> None:
    """60 files match the query better than the one the filter keeps: a filter applied after the index's cut to its
    best 50 would find nothing."""
    docs = {f"loud{index}.txt": "thunder thunder thunder storm" for index in range(60)}
    store = served.store_of(docs)
    quiet = served.upload("quiet.txt", "a storm far away")
    served.client.vector_stores.files.create_and_poll(vector_store_id=store, file_id=quiet, poll_interval_ms=50,
                                                      attributes={"keep": True})
    page = served.client.vector_stores.search(vector_store_id=store, query="thunder storm", max_num_results=1,
                                              filters={"type": "eq", "key": "keep", "value": True})
    assert [hit.filename for hit in page.data] == ["quiet.txt"]


ATTRIBUTES = [{"n": n, "s": s, "b": b} for n, s, b in
              [(1, "red", True), (2, "green", False), (3, "blue", True), (5, "red", False), (8, "blue", False)]]
COMPARED = st.sampled_from([("n", st.integers(0, 9)), ("s", st.sampled_from(["red", "green", "blue", "x"])),
                            ("b", st.booleans())])


def _comparison() -> st.SearchStrategy[dict[str, Any]]:
    def made(key_values: tuple[str, Any], op: str, data: st.DataObject) -> dict[str, Any]:
        key, values = key_values
        if op in ("in", "nin"):
            if key == "b":
                return {"type": "eq", "key": key, "value": data.draw(values)}
            return {"type": op, "key": key, "value": data.draw(st.lists(values, min_size=1, max_size=3))}
        if key == "b" and op not in ("eq", "ne"):
            op = "eq"
        return {"type": op, "key": key, "value": data.draw(values)}

    return st.builds(made, COMPARED, st.sampled_from(["eq", "ne", "gt", "gte", "lt", "lte", "in", "nin"]), st.data())


FILTERS = st.recursive(_comparison(), lambda inner: st.builds(
    lambda op, filters: {"type": op, "filters": filters}, st.sampled_from(["and", "or"]),
    st.lists(inner, min_size=1, max_size=3)), max_leaves=6)


def matches(attributes: dict[str, Any], where: dict[str, Any]) -> bool:
    """What a filter means (OpenAI's operators), for the property below."""
    if where["type"] in ("and", "or"):
        results = [matches(attributes, inner) for inner in where["filters"]]
        return all(results) if where["type"] == "and" else any(results)
    value, wanted, op = attributes.get(where["key"]), where["value"], where["type"]
    if op in ("in", "nin"):
        found = value in wanted and not isinstance(value, bool)
        return found if op == "in" else not found
    same_kind = value is not None and isinstance(value, bool) == isinstance(wanted, bool) and \
        isinstance(value, str) == isinstance(wanted, str)
    if op == "eq":
        return same_kind and value == wanted
    if op == "ne":
        return not (same_kind and value == wanted)
    return same_kind and {"gt": value > wanted, "gte": value >= wanted, "lt": value < wanted,
                          "lte": value <= wanted}[op]


@pytest.fixture(scope="module")
def attributed(served: Served) -> str:
    client = served.client
    store = client.vector_stores.create(name="attributed").id
    for index, attributes in enumerate(ATTRIBUTES):
        file_id = served.upload(f"doc{index}.txt", f"document number {index} about filters")
        client.vector_stores.files.create_and_poll(vector_store_id=store, file_id=file_id, attributes=attributes,
                                                   poll_interval_ms=50)
    return store


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=FILTERS)
def test_every_filter_selects_exactly_the_files_whose_attributes_match(served: Served, attributed: str,
                                                                      where: dict[str, Any]) -> None:
    response = served.post_as("alpha", f"/vector_stores/{attributed}/search",
                              {"query": "document filters", "filters": where, "max_num_results": 50})
    assert response.status_code == 200, response.text
    found = sorted(hit["filename"] for hit in response.json()["data"])
    expected = sorted(f"doc{index}.txt" for index, attributes in enumerate(ATTRIBUTES) if matches(attributes, where))
    assert found == expected, where


def test_another_projects_store_and_files_are_not_found(served: Served) -> None:
    store = served.store_of({"secret.txt": "the launch code is swordfish"})
    beta = served.projects["beta"]
    for call in (lambda: beta.vector_stores.retrieve(store),
                 lambda: beta.vector_stores.search(vector_store_id=store, query="launch code"),
                 lambda: beta.vector_stores.files.list(vector_store_id=store),
                 lambda: beta.vector_stores.delete(store)):
        with pytest.raises(openai.NotFoundError):
            call()
    assert store not in [listed.id for listed in beta.vector_stores.list().data]
    own = beta.vector_stores.create(name="mine").id
    alpha_file = served.upload("alpha.txt", "alpha's own words")
    with pytest.raises(openai.NotFoundError):
        beta.vector_stores.files.create(vector_store_id=own, file_id=alpha_file)
    searched = served.post_as("beta", "/responses", {"model": MODEL, "input": "hi",
                                                     "tools": [{"type": "file_search", "vector_store_ids": [store]}]})
    assert searched.status_code == 404 and "vector store" in searched.json()["error"]["message"]
    assert served.client.vector_stores.retrieve(store).file_counts.completed == 1, "still there, for alpha"


def test_a_file_that_cannot_be_read_fails_with_its_error_and_the_batch_says_so(served: Served) -> None:
    client = served.client
    store = client.vector_stores.create(name="mixed").id
    good, bad = served.upload("good.txt", "plain words"), served.upload("bad.bin", b"\xff\xfe\x00binary")
    empty = served.upload("empty.txt", "   ")
    batch = client.vector_stores.file_batches.create_and_poll(vector_store_id=store, file_ids=[good, bad, empty],
                                                              poll_interval_ms=50)
    assert (batch.file_counts.completed, batch.file_counts.failed) == (1, 2)
    failed = {file.id: file for file in client.vector_stores.files.list(vector_store_id=store, filter="failed").data}
    assert failed[bad].last_error is not None and failed[bad].last_error.code == "unsupported_file"
    assert failed[empty].last_error is not None and failed[empty].last_error.code == "invalid_file"


def test_a_cancelled_batch_stores_nothing_of_its_files(served: Served) -> None:
    client = served.client
    store = client.vector_stores.create(name="cancelled").id
    gate, original = threading.Event(), served.embedder.embed

    async def held(prompts: list[list[int]]) -> list[list[float]]:  # ingestion waits here until the batch is cancelled
        await asyncio.to_thread(gate.wait, 10)
        return await original(prompts)

    served.embedder.embed = held  # type: ignore[method-assign]
    try:
        ids = [served.upload(f"c{index}.txt", "cancel me please") for index in range(3)]
        batch = client.vector_stores.file_batches.create(vector_store_id=store, file_ids=ids)
        cancelled = client.vector_stores.file_batches.cancel(batch.id, vector_store_id=store)
        assert cancelled.status == "cancelled" and cancelled.file_counts.cancelled == 3
    finally:
        gate.set()
        served.embedder.embed = original  # type: ignore[method-assign]
    deadline = time.monotonic() + 10
    while served.context.retrieval.ingestion._running and time.monotonic() < deadline:  # type: ignore[union-attr]
        time.sleep(0.05)
    assert client.vector_stores.search(vector_store_id=store, query="cancel me").data == []
    assert client.vector_stores.file_batches.retrieve(batch.id, vector_store_id=store).status == "cancelled"


def _loop(served: Served) -> asyncio.AbstractEventLoop | None:
    ingestion = served.context.retrieval.ingestion  # type: ignore[union-attr]
    return ingestion._loop.get_loop() if ingestion._loop is not None else None


def test_a_file_whose_process_died_is_claimed_and_completed_by_the_next(tokenizer: Any, embedding_path: str,
                                                                      store_url: str) -> None:
    """A file left in progress under a lease that ran out (its process was killed) completes in the next process;
    one this process left under its own name (it restarted, as a replica keeps its id) completes at once."""
    context, _, _ = served_app(tokenizer, store_url, embedding_path)
    with serve_in_thread(create_app(context)) as base_url:
        client = openai.OpenAI(base_url=base_url, api_key=KEYS["alpha"], max_retries=0)
        file_id = client.files.create(file=("left.txt", io.BytesIO(b"left behind words")), purpose="assistants").id
        own = client.files.create(file=("own.txt", io.BytesIO(b"restarted words")), purpose="assistants").id
        store = client.vector_stores.create(name="left").id
    index = _index(store_url)

    async def leave() -> None:  # as processes that added the files and died would have left them
        record = StoreFile(store, file_id, "alpha", "left.txt", "in_progress", {}, ChunkingStrategy(), 0)
        await index.add_files([record], None, "dead-process", lease_until=time.time() + 1.0)
        await index.add_files([replace(record, file_id=own)], None, "test-process", lease_until=time.time() + 3600)
        await index.close()

    asyncio.run(leave())
    context, _, _ = served_app(tokenizer, store_url, embedding_path)
    with serve_in_thread(create_app(context)) as base_url:
        client = openai.OpenAI(base_url=base_url, api_key=KEYS["alpha"], max_retries=0)
        for name in (file_id, own):  # the dead process's, after its lease; this process's own, at once
            deadline = time.monotonic() + 20
            while (file := client.vector_stores.files.retrieve(name, vector_store_id=store)).status == "in_progress":
                assert time.monotonic() < deadline, f"{name} stayed in progress"
                time.sleep(0.2)
            assert file.status == "completed"
        assert client.vector_stores.search(vector_store_id=store, query="left behind").data[0].file_id == file_id


def test_a_store_made_on_one_replica_is_searched_on_another(tokenizer: Any, embedding_path: str, postgres: Any) -> None:
    """Two replicas on one PostgreSQL database, each with its own ingestion: a store made and filled through A is
    listed, searched and used by file_search through B."""
    url = postgres.new_database()
    (first, _, _), (second, engine, _) = (served_app(tokenizer, url, embedding_path),
                                          served_app(tokenizer, url, embedding_path))
    with serve_in_thread(create_app(first)) as a_url, serve_in_thread(create_app(second)) as b_url:
        a = Served(ScriptedEngine(tokenizer=tokenizer, scripts=[[]]), a_url, first, WordsEmbedder(None))
        store = a.store_of(DOCS)
        b = Served(engine, b_url, second, WordsEmbedder(None))
        assert store in [listed.id for listed in b.client.vector_stores.list().data]
        assert b.client.vector_stores.search(vector_store_id=store, query="yeast dough").data[0].filename == "bread.txt"
        b.play(script(tokenizer, call_text("file_search", {"queries": ["rocket thrust"]})), script(tokenizer, "Fuel."))
        answer = b.client.responses.create(model=MODEL, input="Rockets?", tools=[_tool(store)],
                                           include=["file_search_call.results"])
        assert answer.output[0].results[0].filename == "rockets.txt"  # type: ignore[union-attr]


def test_a_store_embedded_by_another_model_is_a_400_not_a_wrong_answer(served: Served) -> None:
    store = served.store_of({"m.txt": "model words"})
    index = served.context.retrieval.index  # type: ignore[union-attr]
    loop = _loop(served)
    assert loop is not None
    asyncio.run_coroutine_threadsafe(index.update_store(store, "alpha", {"embedding_model": "other-model"}),
                                     loop).result(5)
    response = served.post_as("alpha", f"/vector_stores/{store}/search", {"query": "model"})
    assert response.status_code == 400 and "other-model" in response.json()["error"]["message"]


# -- the file_search tool ------------------------------------------------------------------------------------------


def _tool(store: str, **fields: Any) -> dict[str, Any]:
    return {"type": "file_search", "vector_store_ids": [store], **fields}


def test_file_search_streams_its_call_results_and_the_answers_citations(served: Served, tokenizer: Any) -> None:
    store = served.store_of(DOCS)
    served.play(script(tokenizer, call_text("file_search", {"queries": ["rocket thrust"]})),
                script(tokenizer, "Rockets burn propellant [1], unlike cats [9]."))
    events = served.raw_stream(input="What powers rockets?", tools=[_tool(store, max_num_results=2)],
                               include=["file_search_call.results"])
    final = validate_events(events)
    assert [item.type for item in final.output] == ["file_search_call", "message"]
    call = final.output[0]
    assert call.queries == ["rocket thrust"] and call.status == "completed"  # type: ignore[union-attr]
    assert call.results and call.results[0].filename == "rockets.txt"  # type: ignore[union-attr]
    assert "[1] rockets.txt" in prompt_text(served, tokenizer), "the answer's pass reads the numbered results"
    text = final.output[1].content[0]  # type: ignore[union-attr]
    assert [(a.type, a.filename, a.index) for a in text.annotations] == [  # type: ignore[union-attr]
        ("file_citation", "rockets.txt", text.text.index("[1]"))], "[9] names no result: no citation"
    kinds = [event["type"] for event in events]
    assert kinds.index("response.file_search_call.in_progress") < kinds.index("response.file_search_call.searching") \
        < kinds.index("response.file_search_call.completed") < kinds.index("response.output_text.annotation.added")


def test_results_are_in_the_item_only_when_included_and_a_chain_never_searches_again(served: Served,
                                                                                      tokenizer: Any) -> None:
    store = served.store_of(DOCS)
    served.play(script(tokenizer, call_text("file_search", {"queries": ["bread yeast"]})), script(tokenizer, "Yeast."))
    first = served.client.responses.create(model=MODEL, input="Bread?", tools=[_tool(store)])
    assert first.output[0].type == "file_search_call" and first.output[0].results is None  # type: ignore[union-attr]
    embedded = served.embedder.embedded
    served.play(script(tokenizer, "Still yeast."))
    chained = served.client.responses.create(model=MODEL, input="And again?", previous_response_id=first.id,
                                             tools=[_tool(store)])
    assert chained.output_text == "Still yeast." and served.embedder.embedded == embedded, "no second search"
    served.play(script(tokenizer, call_text("file_search", {"queries": ["bread yeast"]})), script(tokenizer, "Yes."))
    included = served.client.responses.create(model=MODEL, input="Bread?", tools=[_tool(store)],
                                              include=["file_search_call.results"])
    item = included.output[0].model_dump(mode="json", exclude_none=True)
    served.play(script(tokenizer, "From the results."))
    stateless = served.client.responses.create(model=MODEL, tools=[_tool(store)], store=False, input=[
        {"role": "user", "content": "Bread?"}, item, {"role": "user", "content": "Summarize."}])
    assert stateless.output_text == "From the results."
    assert "yeast" in prompt_text(served, tokenizer).lower(), "the results sent back are what the model reads"


def test_a_search_that_fails_is_a_failed_call_never_an_empty_success(served: Served, tokenizer: Any) -> None:
    store = served.store_of(DOCS)
    served.play(script(tokenizer, call_text("file_search", {"queries": ["cats"]})), script(tokenizer, "Sorry."))
    served.embedder.fail = RuntimeError("the embedding engine died")
    try:
        events = served.raw_stream(input="Cats?", tools=[_tool(store)], include=["file_search_call.results"])
    finally:
        served.embedder.fail = None
    final = validate_events(events)
    call = final.output[0]
    assert call.type == "file_search_call" and call.status == "failed" and call.results is None  # type: ignore[union-attr]
    assert "search failed" in prompt_text(served, tokenizer), "the model reads why"


def test_a_file_search_tool_is_checked_before_anything_runs(served: Served) -> None:
    store = served.store_of({"x.txt": "x"})
    for tool, param in ((_tool("vs_missing"), "tools[0].vector_store_ids"),
                        ({"type": "file_search"}, "tools[0].vector_store_ids"),
                        (_tool(store, max_num_results=0), "tools[0].max_num_results"),
                        (_tool(store, filters={"type": "gt", "key": "a", "value": True}), "tools[0].filters.value"),
                        (_tool(store, ranking_options={"score_threshold": 2}),
                         "tools[0].ranking_options.score_threshold")):
        response = served.post(input="hi", tools=[tool])
        assert response.status_code in (400, 404), response.text
        assert response.json()["error"]["param"] == param, (tool, response.text)


def test_a_search_call_cut_by_the_budget_ends_incomplete_alike_streamed_or_not(served: Served, tokenizer: Any) -> None:
    """The budget ends the pass after the call's arguments, before its end tag: the call is never run, and the response is incomplete
    with the call incomplete, the same over JSON and SSE (streamed, it was a server error)."""
    store = served.store_of(DOCS)
    whole = call_text("file_search", {"queries": ["rocket thrust and the propellant it burns"]})
    arguments = tokenizer.encode(whole.removesuffix("\n</tool_call>"), add_special_tokens=False)  # the JSON, whole
    cut = steps_from_tokens(arguments, cuts=[3, 7, 20], finish="length")
    body = dict(input="What powers rockets?", tools=[_tool(store)], tool_choice={"type": "file_search"},
                max_output_tokens=len(arguments), include=["file_search_call.results"])
    served.play(cut)
    streamed = validate_events(served.raw_stream(**body))
    served.play(cut)
    unstreamed = served.client.responses.create(model=MODEL, **body)
    for response in (streamed, unstreamed):
        assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
        assert [(item.type, item.status) for item in response.output] == [("file_search_call", "incomplete")]



AFTER_A_CALL = ["", "Done.", call_text("file_search", {"queries": ["cats"]}), "\n\n<tool_call>\n{\"name\": \"fi"]


@pytest.mark.parametrize("after", AFTER_A_CALL)
def test_any_output_after_a_search_call_at_any_budget_ends_by_the_contract_alike_on_both_transports(
        served: Served, tokenizer: Any, after: str) -> None:
    """Whatever the model writes after a hosted call in the same pass, wherever the budget cuts it (every cut from
    inside the call's arguments to the end), the response ends as the contract says (never failed), and JSON and SSE
    give the same response."""
    store = served.store_of(DOCS)
    call = tokenizer.encode(call_text("file_search", {"queries": ["rocket thrust"]}), add_special_tokens=False)
    tokens = tokenizer.encode(call_text("file_search", {"queries": ["rocket thrust"]}) + after,
                              add_special_tokens=False) + [tokenizer.eos_token_id]
    for cut in range(len(call) - 8, len(tokens) + 1):
        first = steps_from_tokens(tokens[:cut], cuts=[2, 9], finish="length" if cut < len(tokens) else "stop")
        body = dict(input="What powers rockets?", tools=[_tool(store)], max_output_tokens=cut,
                    include=["file_search_call.results"])
        endings = []
        for transport in ("sse", "json"):
            served.play(first, script(tokenizer, "Rockets burn propellant [1]."))
            if transport == "sse":
                response = validate_events(served.raw_stream(**body))
            else:
                response = served.client.responses.create(model=MODEL, **body)
            assert response.status in ("completed", "incomplete"), (cut, response.status, response.error)
            endings.append((response.status, [(item.type, item.status) for item in response.output]))
        assert endings[0] == endings[1], cut


def test_a_file_search_call_is_traced_with_its_embedding_and_index_queries(served: Served, tokenizer: Any,
                                                                          traces: Any) -> None:
    """Issue 56: the call's span, and beneath it the query's embedding and the two index searches; no query,
    document or result text in any attribute."""
    from tests.test_tracing import assert_clean, one, parent_of, trace_of

    store = served.store_of(DOCS)
    served.play(script(tokenizer, call_text("file_search", {"queries": ["rocket thrust"]})),
                script(tokenizer, "Rockets burn propellant [1]."))
    response = served.client.responses.create(model=MODEL, input="What powers rockets?", tools=[_tool(store)])
    spans = trace_of(traces, response.id)
    call = one(spans, "execute_tool file_search")
    assert call.attributes["gen_ai.tool.type"] == "file_search" and call.status == "unset"
    for phase in ("embeddings", "vector_search", "keyword_search"):
        assert parent_of(spans, one(spans, phase)) == call, phase
    assert one(spans, "embeddings").attributes["gen_ai.request.model"]
    assert_clean(spans, "rocket thrust", "propellant", "What powers rockets", "rockets.txt")
