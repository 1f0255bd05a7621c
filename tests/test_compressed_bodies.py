"""Compressed request bodies (Content-Encoding gzip, deflate, br, zstd) through the real app and the openai SDK: the
same answer as a plain body, a bomb a 413 read no further, an unknown encoding a 415, corrupt data a 400."""

from __future__ import annotations

import gzip
import json
import zlib
from typing import Any, Callable, Iterator

import brotli
import httpx
import openai
import pytest
import zstandard

from server.config import ServerConfig
from server.http.app import create_app
from server.runs.context import ServingContext
from streaming.ids import counting_ids
from tests.conftest import serve_in_thread
from tests.scripted_engine import ScriptedEngine, steps_from_tokens
from tests.test_server import MODEL, Harness

LIMIT = 64 * 1024
COMPRESS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress, "deflate": zlib.compress, "br": brotli.compress,
    "zstd": lambda data: zstandard.ZstdCompressor().compress(data)}


@pytest.fixture(scope="module")
def app(tokenizer: Any) -> Iterator[Harness]:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    context = ServingContext(config=ServerConfig(served_model_name=MODEL, max_body_bytes=LIMIT),
                             engine_factory=lambda: engine, ids=counting_ids())
    with serve_in_thread(create_app(context)) as base_url:
        yield Harness(engine, base_url)


class Compressing(httpx.BaseTransport):
    """A client that compresses each request body it sends (as Codex does with zstd)."""

    def __init__(self, encoding: str) -> None:
        self.encoding, self.inner = encoding, httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = COMPRESS[self.encoding](request.read())
        headers = {**request.headers, "content-encoding": self.encoding, "content-length": str(len(body))}
        return self.inner.handle_request(httpx.Request(request.method, request.url, headers=headers, content=body))


def _played(app: Harness, tokenizer: Any, text: str) -> None:
    ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
    app.play(steps_from_tokens(ids, cuts=[2]))


@pytest.mark.parametrize("encoding", list(COMPRESS))
def test_a_compressed_body_is_answered_as_the_same_body_plain(app: Harness, tokenizer: Any, encoding: str) -> None:
    client = openai.OpenAI(base_url=app.base_url, api_key="none", max_retries=0,
                           http_client=httpx.Client(transport=Compressing(encoding)))
    question = "Say hello. " + "Context that compresses well. " * 300
    _played(app, tokenizer, "Hello.")
    response = client.responses.create(model=MODEL, input=question, max_output_tokens=8)
    assert response.output_text == "Hello." and app.engine.requests[-1].prompt_token_ids
    prompt = tokenizer.decode(app.engine.requests[-1].prompt_token_ids)
    assert question.strip() in prompt
    _played(app, tokenizer, "Hello.")
    with client.responses.stream(model=MODEL, input=question, max_output_tokens=8) as stream:
        assert stream.get_final_response().output_text == "Hello."


def test_a_body_that_decodes_past_the_limit_is_a_413_read_no_further(app: Harness) -> None:
    bomb = {"model": MODEL, "input": "x" * (LIMIT * 64)}  # 4 MB of JSON, a few kilobytes compressed
    for encoding, compress in COMPRESS.items():
        body = compress(json.dumps(bomb).encode())
        assert len(body) < LIMIT
        answer = httpx.post(f"{app.base_url}/responses", content=body,
                            headers={"content-encoding": encoding, "content-type": "application/json"})
        assert answer.status_code == 413, (encoding, answer.text)
        assert answer.json()["error"]["code"] == "request_too_large"


def test_an_unknown_encoding_is_a_415_and_data_that_is_not_what_it_says_a_400(app: Harness) -> None:
    plain = json.dumps({"model": MODEL, "input": "hi"}).encode()
    answer = httpx.post(f"{app.base_url}/responses", content=plain, headers={"content-encoding": "compress"})
    assert answer.status_code == 415 and answer.json()["error"]["code"] == "unsupported_content_encoding"
    for encoding, compress in COMPRESS.items():
        for body in (plain, compress(plain)[: len(compress(plain)) // 2]):  # not compressed; cut short
            answer = httpx.post(f"{app.base_url}/responses", content=body, headers={"content-encoding": encoding})
            assert answer.status_code == 400, (encoding, answer.text)
            assert answer.json()["error"]["code"] == "invalid_content_encoding"


def test_encodings_applied_in_turn_are_undone_last_first(app: Harness, tokenizer: Any) -> None:
    plain = json.dumps({"model": MODEL, "input": "hi", "max_output_tokens": 8}).encode()
    _played(app, tokenizer, "Hello.")
    answer = httpx.post(f"{app.base_url}/responses", content=zstandard.ZstdCompressor().compress(gzip.compress(plain)),
                        headers={"content-encoding": "gzip, zstd", "content-type": "application/json"})
    assert answer.status_code == 200 and answer.json()["output"][0]["content"][0]["text"] == "Hello."


def test_a_websocket_message_compressed_by_permessage_deflate_is_read_within_the_limit(app: Harness,
                                                                                       tokenizer: Any) -> None:
    """WebSocket's own compression (permessage-deflate, which the SDK's websockets client offers): the message is
    taken; one that inflates past the limit is an error event, the socket still open."""
    from websockets.sync.client import connect

    with connect(app.base_url.replace("http", "ws", 1) + "/responses", compression="deflate",
                 max_size=None) as socket:
        assert socket.protocol.extensions  # deflate was agreed
        socket.send(json.dumps({"type": "response.create", "model": MODEL, "input": "x" * (LIMIT * 4)}))
        error = json.loads(socket.recv(timeout=30))
        assert (error["type"], error["status"]) == ("error", 413)
        _played(app, tokenizer, "Hello.")
        socket.send(json.dumps({"type": "response.create", "model": MODEL, "input": "hi", "max_output_tokens": 8}))
        events = []
        while not events or events[-1]["type"] != "response.completed":
            events.append(json.loads(socket.recv(timeout=30)))
        assert events[-1]["response"]["output"][0]["content"][0]["text"] == "Hello."
