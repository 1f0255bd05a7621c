"""A test double for a vLLM scale-out worker (`vllm serve --enable-scale-out`): its HTTP protocol over any engine.

`POST /inference/v1/generate` reads the body as vLLM's worker does, plays the engine's steps as the worker streams
them (token ids, the finish reason on the last, a usage chunk, `[DONE]`), and closes the engine's iterator when the
client goes away; `/inference/v1/abort_requests`, `/health`, `/metrics` and `/v1/models` answer as the worker's.
With it, the tests that drive an engine run through the server's remote engine as well (tests/test_server.py).
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
from contextlib import aclosing, contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Iterator

from server.engine.interface import EngineRequest, EngineStep, SamplingSettings

_SAMPLING = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
             "frequency_penalty", "seed", "logprobs", "thinking_token_budget")


@dataclass
class ScaleOutWorker:
    """An ASGI app serving `engine` as the model `model`; `healthy` False makes /health answer 503."""

    engine: Any
    model: str
    max_model_len: int = 8192
    healthy: bool = True
    waiting: int = 0  # what its /metrics says of its queue
    drop_after: int | None = None  # it dies after this many chunks (0: before its first), when it has another to
    # send: the connection breaks, /health fails
    hang_after: int | None = None  # its engine hangs after this many chunks: the stream stops, /health stays 200
    metrics_broken: bool = False  # its /metrics answers 500
    api_key: str | None = None  # as vLLM's --api-key: /v1 and /inference want it as a bearer token
    scale_out: bool = True  # False: started without --enable-scale-out (its /inference routes are 404)
    tokenizer: Any = None  # what its /tokenize uses (None: the engine's)
    on_chunk: Callable[[int], None] | None = None  # called with the count of chunks sent, after each
    chunks_sent: int = 0
    bodies: list[dict[str, Any]] = field(default_factory=list)  # every generate body, as sent
    abort_requests: list[str] = field(default_factory=list)
    generate_clients: list[tuple[str, int]] = field(default_factory=list)  # each generate's client (host, port)
    health_checks: int = 0  # the /health requests it answered

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path, body = scope["path"], await _body(receive)
        headers = dict(scope["headers"])
        if self.api_key and path.startswith(("/v1", "/inference")) and \
                headers.get(b"authorization") != f"Bearer {self.api_key}".encode():
            await _answer(send, 401, b'{"error": "Unauthorized"}')
        elif path.startswith("/inference") and not self.scale_out:
            await _answer(send, 404, b'{"detail": "Not Found"}')
        elif path == "/tokenize":
            request = json.loads(body)
            tokenizer = self.tokenizer or self.engine.tokenizer
            tokens = tokenizer.encode(request["prompt"], add_special_tokens=request.get("add_special_tokens", True))
            await _answer(send, 200, json.dumps({"tokens": tokens, "count": len(tokens)}).encode())
        elif path == "/inference/v1/generate":
            self.generate_clients.append(tuple(scope["client"]))
            await self._generate(json.loads(body), receive, send)
        elif path == "/inference/v1/abort_requests":
            self.abort_requests.extend(json.loads(body)["request_ids"])
            await _answer(send, 200, b"")
        elif path == "/health":
            self.health_checks += 1
            await _answer(send, 200 if self.healthy else 503, b"")
        elif path == "/metrics" and self.metrics_broken:
            await _answer(send, 500, b"")
        elif path == "/metrics":
            await _answer(send, 200, f'vllm:num_requests_waiting{{engine="0",model_name="{self.model}"}} '
                                     f'{self.waiting}.0\n'.encode())
        elif path == "/v1/models":
            models = {"object": "list", "data": [{"id": self.model, "max_model_len": self.max_model_len}]}
            await _answer(send, 200, json.dumps(models).encode())
        else:
            await _answer(send, 404, b"")

    async def _generate(self, body: dict[str, Any], receive: Any, send: Any) -> None:
        self.bodies.append(body)
        request = engine_request(body)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        gone = asyncio.ensure_future(_disconnected(receive))
        prompt_tokens, cached = len(request.prompt_token_ids), 0
        try:
            interval = body["sampling_params"].get("stream_interval") or 1
            async with aclosing(self.engine.generate(request)) as steps:
                try:
                    async for step in _by_interval(steps, interval):
                        if gone.done():
                            return  # the client left: closing the iterator aborts the engine's request
                        prompt_tokens = step.prompt_tokens or prompt_tokens
                        cached = max(cached, step.cached_tokens)
                        if self.drop_after is not None and self.chunks_sent >= self.drop_after:
                            self.healthy = False  # dead: its /health no longer answers 200
                            raise ConnectionAbortedError("the worker died")  # uvicorn breaks the connection
                        await _chunk(send, _step_chunk(request.request_id, step))
                        self.chunks_sent += 1
                        if self.on_chunk is not None:
                            self.on_chunk(self.chunks_sent)
                        if self.hang_after is not None and self.chunks_sent >= self.hang_after:
                            await gone  # stuck until the client leaves
                            return
                except ConnectionAbortedError:
                    raise
                except Exception as exc:  # as vLLM streams a generation error
                    await _chunk(send, {"error": {"message": str(exc), "type": "InternalServerError", "code": 500}})
                    await _chunk(send, "[DONE]", last=True)
                    return
            await _chunk(send, {"request_id": request.request_id, "choices": [],
                                "usage": {"prompt_tokens": prompt_tokens,
                                          "prompt_tokens_details": {"cached_tokens": cached}}})
            await _chunk(send, "[DONE]", last=True)
        finally:
            gone.cancel()



async def _by_interval(steps: AsyncIterator[EngineStep], interval: int) -> AsyncIterator[EngineStep]:
    """The engine's steps as vLLM's output processor sends them with a `stream_interval`: the first token's at once,
    then one for every `interval` tokens, the last at once."""
    pending: list[EngineStep] = []
    sent = 0
    async for step in steps:
        if not step.token_ids and step.finish_reason is None and not pending:
            yield step  # the engine took it: no token yet
            continue
        pending.append(step)
        count = sum(len(one.token_ids) for one in pending)
        if sent == 0 or count >= interval or step.finish_reason is not None:
            yield EngineStep([token for one in pending for token in one.token_ids], step.finish_reason,
                             max(one.cached_tokens for one in pending),
                             [logprob for one in pending for logprob in one.logprobs], pending[0].prompt_tokens)
            sent, pending = sent + count, []


def engine_request(body: dict[str, Any]) -> EngineRequest:
    """The engine request a worker makes of the generate body (what the engine double then sees)."""
    params = body["sampling_params"]
    structured = params.get("structured_outputs") or {}
    sampling = SamplingSettings(
        max_tokens=params["max_tokens"],
        stop_token_ids=tuple(params.get("stop_token_ids") or ()),
        banned_token_ids=tuple(sorted(int(token) for token in params.get("logit_bias") or {})),
        structural_tag=structured.get("structural_tag"),
        **{key: params[key] for key in _SAMPLING if key in params},
    )
    return EngineRequest(body["request_id"], list(body["token_ids"]), sampling, cache_salt=body.get("cache_salt"),
                         priority=body.get("priority", 0), images=_images(body.get("content_parts") or []))


def _images(parts: list[dict[str, Any]]) -> tuple[Any, ...]:
    """The images of vLLM's `content_parts`, decoded from their data URLs as the worker's media connector does."""
    from PIL import Image

    images = []
    for part in parts:
        assert part["type"] == "image_url", part
        header, _, data = part["url"].partition(",")
        assert header.startswith("data:image/") and header.endswith(";base64"), header
        images.append(Image.open(io.BytesIO(base64.b64decode(data))))
    return tuple(images)


def _step_chunk(request_id: str, step: EngineStep) -> dict[str, Any]:
    logprobs = None
    if step.logprobs:
        logprobs = {"content": [{"token_id": lp.token_id, "logprob": lp.logprob, "rank": None,
                                 "top_logprobs": [{"token_id": lp.token_id, "logprob": lp.logprob, "rank": 99}]
                                 + [{"token_id": token, "logprob": value, "rank": rank}
                                    for rank, (token, value) in enumerate(lp.top, start=1)]}
                                for lp in step.logprobs]}
    return {"request_id": f"generate-tokens-{request_id}", "usage": None, "output_mode": "tokens",
            "choices": [{"index": 0, "finish_reason": step.finish_reason if step.finish_reason != "error" else "error",
                         "token_ids": step.token_ids, "logprobs": logprobs}]}


async def _chunk(send: Any, payload: Any, last: bool = False) -> None:
    data = payload if isinstance(payload, str) else json.dumps(payload)
    await send({"type": "http.response.body", "body": f"data: {data}\n\n".encode(), "more_body": not last})


async def _body(receive: Any) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _disconnected(receive: Any) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _answer(send: Any, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
    with suppress(Exception):
        await send({"type": "http.response.body", "body": body})


@contextmanager
def engine_served(engine: Any, how: str, model: str = "test-model") -> Iterator[Callable[[], Any]]:
    """What starts `engine` for a ServingContext: the engine itself (`in_process`), or (`scale_out`) the server's
    remote engine driving it behind a ScaleOutWorker on a real socket."""
    if how == "in_process":
        yield lambda: engine
        return
    from server.engine.model_inputs import ModelInputs
    from server.engine.remote import RemoteEngine
    from server.engine.workers import WorkerSet
    from tests.conftest import serve_asgi

    with serve_asgi(ScaleOutWorker(engine, model, engine.max_model_len)) as port:
        def start() -> RemoteEngine:
            inputs = ModelInputs(engine.input_modalities, engine.image_placeholder)  # no renderer: no expansion
            remote = RemoteEngine(WorkerSet.of(model, [f"http://127.0.0.1:{port}"]), engine.tokenizer,
                                  engine.model_type, engine.sampling_defaults, engine.max_model_len, inputs=inputs)
            remote.probe_all()
            return remote

        yield start
