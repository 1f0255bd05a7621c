"""The engine of a fleet model: vLLM scale-out workers (`vllm serve MODEL --enable-scale-out`) driven over HTTP.

The gateway renders, tokenizes and parses as for the engine in its process; a worker only generates: token ids in,
token ids out (and a model that sees, its images beside them). The model's tokenizer, config and generation defaults
are read from its `path` on the gateway.
Each worker's condition is workers.py's state machine, fed by health checks and by requests alike; a request tries the
workers in its affinity's order: one lost before it answered is retried on the next (under a retry budget), one lost
after goes on on a peer as resumption.py decides. A stream that sends nothing for too long (stall.py) is lost too.
Closing a request's steps aborts it on its worker.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from contextlib import suppress
from concurrent.futures import Future
from contextvars import ContextVar
from pathlib import Path
from typing import Any, AsyncIterator

import aiohttp
import httpx

from server.engine.access import WorkerAccess
from server.engine.interface import (TAKEN, EngineRequest, EngineStep, EngineUnavailable, Prefilled,
                                     prefill_by_generating)
from server.engine.model_inputs import ModelInputs
from server.engine.resumption import Progress
from server.engine.retries import RetryBudget
from server.engine.scale_out import (ABORT_PATH, GENERATE_PATH, ChunkReader, WorkerError, generate_body,
                                     sse_payloads)
from server.engine.stall import StallLimits, StallWatch
from server.engine.worker_checks import WorkerMismatch, worker_checks, Checks
from server.engine.workers import Condition, Worker, WorkerSet
from server.metrics import ENGINE_RETRIES, ENGINE_STREAMS_MOVED

logger = logging.getLogger(__name__)
# The event loop a model started in a thread (on a reload of the fleet file) runs its health checks in
SERVING_LOOP: ContextVar[asyncio.AbstractEventLoop] = ContextVar("serving_loop")
CONNECT_SECONDS = 2.0  # a worker that does not accept a connection within this is down
PROBE_SECONDS = 2.0  # /health, /metrics and /v1/models must answer within this
# A busy gateway reads its workers' queues every this many health checks: a worker's /metrics is tens of kilobytes,
# and read at every check it was most of a gateway's CPU per token at 15 tokens/s (bench/fleet.py).
LOAD_EVERY = 5
TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError)  # the worker's connection failed or timed out
ENGINE_ID_PREFIX = "generate-tokens-"  # the worker's name for a request it was sent as `request_id`
KEEPALIVE_SECONDS = 3.0  # an idle connection to a worker is closed after this: less than vLLM's own 5 s
RETRIED_STATUSES = (429, 502, 503, 504)  # a worker or router that answers these did not take the request
WORKER_LOST = "The engine worker running this response stopped answering; send the request again."
BUSY = "No engine worker of the model '{model}' could take the request; try again shortly."


class _Lost(Exception):
    """A worker failed a request: before it answered (nothing reached the client from it), or in its stream."""

    def __init__(self, problem: str, reason: str, before_answer: bool = False, counts: bool = True) -> None:
        super().__init__(problem)
        self.reason = reason  # refused, reset, timeout, status
        self.before_answer = before_answer
        self.counts = counts  # a failure of the worker's (a 429 says it is busy, not sick)


class RemoteEngine:
    """Streams token-id steps from the model's workers; closing the iterator aborts the request on its worker.

    aiohttp carries the streams: its parser is compiled, and per streamed token it cost half of httpx's CPU in the
    gateway (bench/fleet.py); httpx checks the workers once, before the event loop runs."""

    def __init__(self, workers: WorkerSet, tokenizer: Any, model_type: str | None = None,
                 sampling_defaults: dict[str, float] | None = None, max_model_len: int | None = None,
                 config_window: int | None = None, health_seconds: float = 2.0, vocab_size: int | None = None,
                 inputs: ModelInputs | None = None, limits: StallLimits = StallLimits(),
                 budget: RetryBudget | None = None, access: WorkerAccess = WorkerAccess()) -> None:
        """`max_model_len`: the operator's window (None: the smallest its workers report, else `config_window`);
        `inputs`: what the model reads (None: text); `limits`: how long a stream may send nothing."""
        self.workers = workers
        self.tokenizer = tokenizer
        self.model_type = model_type
        self.sampling_defaults = dict(sampling_defaults or {})
        self.inputs = inputs or ModelInputs()
        self.input_modalities = self.inputs.input_modalities
        self.image_placeholder = self.inputs.image_placeholder
        self._declared_window = max_model_len
        self._config_window = config_window
        self._vocab_size = vocab_size
        self._health_seconds = health_seconds
        self._limits = limits
        self.access = access
        self._probe_ids: list[int] | None = None
        self.budget = budget or RetryBudget()
        self._session: aiohttp.ClientSession | None = None  # made in the serving event loop, at its first use
        self._watching: asyncio.Task[None] | Future[None] | None = None
        self._checks = 0
        self._aborts: set[asyncio.Task[None]] = set()
        self._closing: set[asyncio.Task[None]] = set()

    @classmethod
    def for_model(cls, path: str, workers: WorkerSet, max_model_len: int | None = None,
                  health_seconds: float = 2.0, limits: StallLimits = StallLimits(),
                  budget: RetryBudget | None = None, access: WorkerAccess = WorkerAccess()) -> "RemoteEngine":
        """The engine of the model whose tokenizer, config and generation defaults are at `path` on the gateway."""
        from server.engine.vllm_engine import load_tokenizer, model_sampling_defaults

        config = _model_config(path)
        return cls(workers, load_tokenizer(path), config.get("model_type"), model_sampling_defaults(path),
                   max_model_len, config.get("max_position_embeddings"), health_seconds, config.get("vocab_size"),
                   ModelInputs.for_model(path, max_model_len), limits, budget, access)

    @property
    def max_model_len(self) -> int:
        """The window: the fleet file's, else the smallest its workers report, else the model config's."""
        if self._declared_window is not None:
            return self._declared_window
        windows = [worker.max_model_len for worker in self.workers.workers if worker.max_model_len]
        return min(windows) if windows else int(self._config_window or 2048)

    def probe_all(self) -> None:
        """At start (blocking, before serving): each worker checked once (worker_checks.py). One that cannot serve
        the model as the fleet file says refuses the start (WorkerMismatch naming the fix); one that cannot be
        reached is reported and watched until it comes up."""
        with httpx.Client(timeout=PROBE_SECONDS, headers=self.access.headers(),
                          verify=self.access.ssl_context or True) as client:
            for worker in self.workers.workers:
                try:
                    checks = self._questions(worker)
                    answer = None
                    while True:
                        method, path, body = checks.send(answer)  # type: ignore[arg-type]
                        reply = client.request(method, worker.url + path, json=body)
                        answer = (reply.status_code, reply.content)
                except StopIteration:
                    worker.came_up()
                except httpx.HTTPError as exc:
                    worker.refused(f"not reachable at start ({exc.__class__.__name__}); retried every "
                                   f"{self._health_seconds:g} s")
                except WorkerMismatch:
                    raise
                except ValueError as exc:
                    worker.refused(f"its answers are not vLLM's: {exc}")

    def _questions(self, worker: Worker) -> Checks:
        if self._probe_ids is None:
            from server.engine.worker_checks import TOKENIZER_PROBE

            self._probe_ids = list(self.tokenizer.encode(TOKENIZER_PROBE, add_special_tokens=False))
        return worker_checks(worker, self.workers.model, self.access.api_key is not None, self._probe_ids)

    async def _checked(self, worker: Worker) -> None:
        """The start's checks again, for a worker coming back (WorkerMismatch or ValueError: it stays down)."""
        checks = self._questions(worker)
        answer = None
        try:
            while True:
                method, path, body = checks.send(answer)  # type: ignore[arg-type]
                async with self._http().request(method, worker.url + path, json=body,
                                                timeout=aiohttp.ClientTimeout(total=PROBE_SECONDS)) as reply:
                    answer = (reply.status, await reply.read())
        except StopIteration:
            return

    def watch(self) -> None:
        """Starts reading each worker's health and load every `health_seconds`, in the serving event loop: the one
        running here, or (a model started in a thread, on a reload of the fleet) the one SERVING_LOOP names."""
        if self._watching is not None:
            return
        try:
            self._watching = asyncio.get_running_loop().create_task(self._watch())
        except RuntimeError:
            self._watching = asyncio.run_coroutine_threadsafe(self._watch(), SERVING_LOOP.get())

    def reconfigure(self, health_seconds: float, limits: StallLimits, budget: RetryBudget,
                    access: WorkerAccess) -> None:
        """The fleet file's settings for this model changed: new requests and checks follow them (a new key or CA
        takes a new session; the streams on the old one finish)."""
        self._health_seconds, self._limits = health_seconds, limits
        self.budget.share, self.budget.minimum = budget.share, budget.minimum
        if access != self.access:
            self.access, old = access, self._session
            self._session = None
            if old is not None:
                self._closing.add(asyncio.get_running_loop().create_task(_close_when_idle(old, self.workers)))

    async def _watch(self) -> None:
        while True:
            read_load = self._checks % LOAD_EVERY == 0 and self.workers.busy()
            await asyncio.gather(*(self._probe(worker, read_load) for worker in self.workers.workers))
            self._checks += 1
            await asyncio.sleep(self._health_seconds)

    async def _probe(self, worker: Worker, read_load: bool) -> None:
        """One look at a worker. Liveness: its /health, unless it sent this gateway a byte of an answer within the
        interval (a worker streaming nothing for longer, in a long prefill or hung, is asked); one coming back from
        down is checked to serve the model still. Load, apart: with `read_load`, its waiting requests from /metrics
        (read while this gateway has requests on the model); a /metrics that fails or is slow under load says
        nothing of liveness."""
        if not worker.heard_within(self._health_seconds):
            await self._check_health(worker)
        if read_load and worker.in_rotation:
            with suppress(*TRANSPORT_ERRORS, ValueError):
                status, metrics = await self._get(f"{worker.url}/metrics")
                if status == 200:
                    self.workers.update_waiting(worker, metrics.decode(errors="replace"))
        elif not self.workers.busy():
            worker.waiting = 0  # not known now: read again once turns are placed

    async def _check_health(self, worker: Worker) -> None:
        try:
            status, _ = await self._get(f"{worker.url}/health")
            if status != 200:
                worker.probe_failed(f"/health answered {status}")
                return
            if worker.condition is Condition.DOWN:
                await self._checked(worker)
            worker.probe_passed()
        except aiohttp.ClientConnectorError as exc:
            worker.probe_failed(f"{exc.__class__.__name__}: {exc}", refused=True)
        except (*TRANSPORT_ERRORS, ValueError) as exc:
            worker.probe_failed(str(exc) or exc.__class__.__name__)

    async def _get(self, url: str) -> tuple[int, bytes]:
        """The answer's status and body, asked uncompressed: the session does not decompress, and a /metrics served
        by prometheus_client's own app (or a proxy) compresses for a client that accepts gzip."""
        async with self._http().get(url, timeout=aiohttp.ClientTimeout(total=PROBE_SECONDS),
                                    headers={"Accept-Encoding": "identity"}) as answer:
            return answer.status, await answer.read()

    def _http(self) -> aiohttp.ClientSession:
        """The session to the workers: no limit on connections, each kept idle for less than a worker keeps it
        (vLLM's uvicorn closes an idle one after 5 s: reusing one it closed meets a reset)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=KEEPALIVE_SECONDS,
                                               ssl=self.access.ssl_context or True),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_SECONDS), auto_decompress=False,
                headers=self.access.headers())
        return self._session

    async def generate(self, request: EngineRequest) -> AsyncIterator[EngineStep]:
        """The request's steps from the workers in its affinity's order. A worker lost before it answered is
        replaced by the next (under the retry budget); one lost after goes on as `Progress` decides (resumption.py):
        on a peer, from the tokens already generated, with the budget left; or the response ends failed."""
        images = await self.inputs.content_parts(request)  # once, whichever worker takes the request
        progress, tried, retrying = Progress(request), dict[Worker, float](), False  # tried: when each failed it
        taken = False  # a worker took it (TAKEN was passed on: a peer's taking it again is not)
        self.budget.requests += 1
        try:
            while True:
                attempt = progress.next_attempt()
                if attempt is None:  # lost with its whole budget generated: it ended as it would have
                    yield progress.budget_spent()
                    return
                worker = await self._next_worker(request, tried, progress)
                try:
                    async for step in self._generate_on(worker, attempt, images):
                        if step is TAKEN:
                            if taken:
                                continue
                            taken = True
                        yield progress.seen(step)
                    return
                except _Lost as lost:
                    tried[worker] = time.monotonic()
                    if lost.before_answer and lost.reason != "refused" and not retrying:
                        if not self.budget.allows():
                            ENGINE_RETRIES.labels(self.workers.model, "over_budget").inc()
                            raise EngineUnavailable(BUSY.format(model=self.workers.model)) from lost
                        retrying = True
                        self.budget.retries += 1
                    self._moving(lost, progress)
        finally:
            self.budget.requests -= 1
            self.budget.retries -= retrying

    async def _next_worker(self, request: EngineRequest, tried: dict[Worker, float], progress: Progress) -> Worker:
        """The first of the affinity's order not tried yet for this request (or back up since it failed it: a second
        fault elsewhere can go back to a worker that recovered from the first) that has room (under the per-worker
        cap); while none has, the request waits in the model's queue, in turn with other projects' requests."""
        while True:
            order = self.workers.order(request.affinity)
            candidates = [worker for worker in order if worker not in tried] + [
                worker for worker in order if worker in tried and worker.back_since(tried[worker])]
            if not candidates or progress.attempts > 2 * len(self.workers.workers):  # (all of them: those in
                # rotation may be fewer now than when it began)
                if progress.generated:
                    raise EngineUnavailable(WORKER_LOST)
                raise EngineUnavailable(BUSY.format(model=self.workers.model))
            for worker in candidates:
                if self.workers.has_room(worker):
                    self.workers.queue.started(request.project)
                    return worker
            await self.workers.queue.wait(request.project)

    def _moving(self, lost: "_Lost", progress: Progress) -> None:
        """Counts a loss that moves the request to a peer (EngineUnavailable for one that cannot move)."""
        model = self.workers.model
        if lost.before_answer:
            ENGINE_RETRIES.labels(model, lost.reason).inc()
            return
        move = progress.after_loss()
        ENGINE_STREAMS_MOVED.labels(model, move).inc()
        if move == "lost":
            raise EngineUnavailable(WORKER_LOST) from lost
        logger.warning("%s: its worker was lost (%s); %s on a peer with %d tokens generated", progress.request.
                       request_id, lost, "resumed" if move == "resume" else "restarted", len(progress.generated))

    async def _generate_on(self, worker: Worker, request: EngineRequest,
                           images: list[dict[str, str]]) -> AsyncIterator[EngineStep]:
        """The steps of one attempt on one worker (_Lost when the worker fails it, saying whether before it
        answered; WorkerError for the request's own failure)."""
        reader = ChunkReader(top_logprobs=request.sampling.logprobs or 0)
        last: list[EngineStep] = []
        answered, aborting = False, True
        worker.running += 1
        watch = StallWatch(self._limits)
        worker.streams.add(watch)

        def heard() -> None:
            worker.heard_at = watch.heard()
        try:
            async with watch:
                body = generate_body(request, self._vocab_size, images)
                async with self._http().post(worker.url + GENERATE_PATH, json=body,
                                             headers=request.trace_headers) as answer:
                    if answer.status in RETRIED_STATUSES:
                        raise _Lost(f"answered {answer.status}", "status", before_answer=True,
                                    counts=answer.status != 429)
                    answered = True
                    if answer.status != 200:
                        raise WorkerError(f"worker {worker.url} answered {answer.status}: "
                                          f"{(await answer.read())[:500].decode(errors='replace')}")
                    worker.heard_at = time.monotonic()  # (the watch waits for the first token: a prefill is long)
                    watch.handing_over()
                    yield TAKEN
                    watch.reading()
                    async for payload in sse_payloads(answer.content.iter_any(), heard):
                        if reader.done:
                            continue
                        steps = reader.read(payload)
                        if reader.done:  # `[DONE]`: its step waits for the stream's end, which frees the connection
                            last = steps
                            continue
                        for step in steps:
                            watch.handing_over()
                            yield step
                            watch.reading()
                if not reader.done:
                    raise _Lost("the stream ended before the worker said it was done", "reset")
        except aiohttp.ClientConnectorError as exc:
            aborting = False  # it never reached the worker
            worker.refused(f"{exc.__class__.__name__} at the start of a request")
            raise _Lost(str(exc), "refused", before_answer=True) from exc
        except TimeoutError as exc:
            if not watch.expired and not answered:  # the connection was not made in time: it never reached it
                raise self._failed(worker, _Lost("the connection timed out", "timeout", before_answer=True)) from exc
            raise self._failed(worker, _Lost(f"nothing heard for too long ({exc})", "timeout",
                                              before_answer=not answered)) from exc
        except TRANSPORT_ERRORS as exc:
            raise self._failed(worker, _Lost(f"{exc.__class__.__name__}: {exc}", "reset",
                                              before_answer=not answered)) from exc
        except _Lost as lost:
            aborting = not lost.before_answer  # a 503 or 429: the worker did not take it
            raise self._failed(worker, lost)
        else:
            worker.answered()
            aborting = not reader.done
        finally:
            worker.streams.discard(watch)
            worker.running -= 1
            self.workers.released()
            if aborting and not reader.done:
                self._abort(worker, request.request_id)
        for step in last:
            yield step

    def _failed(self, worker: Worker, lost: "_Lost") -> "_Lost":
        """`lost`, counted against the worker (outlier detection) when it is the worker's failure."""
        if lost.counts:
            self.workers.failed(worker, str(lost))
        return lost

    def _abort(self, worker: Worker, request_id: str) -> None:
        """Tells the worker to abort a request it may still run (closing the connection aborts it too, but a router
        between may keep its own open)."""
        async def abort() -> None:
            with suppress(*TRANSPORT_ERRORS):
                async with self._http().post(worker.url + ABORT_PATH, timeout=aiohttp.ClientTimeout(PROBE_SECONDS),
                                             json={"request_ids": [ENGINE_ID_PREFIX + request_id]}):
                    pass

        try:
            task = asyncio.get_running_loop().create_task(abort())
        except RuntimeError:  # closed outside the event loop (at exit): its connection's end aborts it
            return
        self._aborts.add(task)
        task.add_done_callback(self._aborts.discard)

    async def prefill(self, request: EngineRequest) -> Prefilled:
        """On the worker the request's turn goes to, so the turn that extends it finds it there."""
        return await prefill_by_generating(self.generate, request)

    async def prompt_length(self, request: EngineRequest) -> int:
        return await self.inputs.prompt_length(request)

    async def shutdown(self) -> None:
        if self._watching is not None:
            self._watching.cancel()
        if self._session is not None:
            await self._session.close()
        self.inputs.close()


async def _close_when_idle(session: aiohttp.ClientSession, workers: WorkerSet) -> None:
    """Closes a session once no stream of the model is running (those on it finish first)."""
    while workers.busy():
        await asyncio.sleep(1.0)
    await session.close()


def _model_config(path: str) -> dict[str, Any]:
    """The model's config.json: in `path`'s directory, else as transformers finds it for a hub name (in its cache)."""
    config = Path(path) / "config.json"
    if config.is_file():
        return json.loads(config.read_text())
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(path).to_dict()
