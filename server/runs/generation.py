"""One response's run: engine steps -> decoder -> parser -> builder events, ending in exactly one terminal event."""

from __future__ import annotations

import asyncio
import logging
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import Any, AsyncIterator, Awaitable, Callable, Protocol, TypeVar

from openai.types.responses import Response, ResponseOutputItem, ResponseStreamEvent
from opentelemetry.trace import SpanKind

from parsers.base import OutputParser
from parsers.decoder import IncrementalDecoder
from parsers.deltas import ItemEnded, OutputText, TokenLogprob, ToolCallStarted
from server.constraints.closing import GrammarClosing
from server.engine.interface import Engine, EngineRequest, EngineStep, EngineUnavailable, StepLogprob
from server.errors import GenerationFailed, RequestError
from server.runs.admission import Slot
from server.runs.timeline import Timeline
from server import tracing
from server.tenancy.limiter import Ticket
from streaming.builder import ResponseBuilder
from streaming.items import ListedTools, ToolResult
from streaming.outcome import Finished, Usage

logger = logging.getLogger(__name__)
GENERATION_FAILED = "The model's output could not be generated; the server logged why. Try again."
T = TypeVar("T")


# Calls the server answers (or asks approval for) before the model goes on.
HOSTED_CALLS = ("mcp", "mcp_approval", "web_search", "code_interpreter", "file_search", "tool_search")


class NotTaken(EngineUnavailable):
    """No engine took the run's request, and its client was told nothing yet (its opening events were held): the
    client's answer is a 503 to retry, and nothing is stored."""


@dataclass
class CallCounter:
    """Counts the tool calls the deltas complete, to stop at a limit (parallel_tool_calls false, max_tool_calls),
    and stops a pass at the end of a hosted call: the model goes on once the server has its result."""

    completed: int = 0
    capped: bool = False
    hosted: bool = False  # a hosted call has ended: the pass stops there
    _open: str | None = None  # the kind of the call the deltas are in

    def cap(self, deltas: list[Any], limit: int | None) -> list[Any]:
        """The deltas up to the end of the call that reaches `limit` (then `capped` is set), or of a hosted call."""
        for index, delta in enumerate(deltas):
            if isinstance(delta, ToolCallStarted):
                self._open = delta.kind
            elif isinstance(delta, ItemEnded) and self._open is not None:
                self.hosted, self._open = self._open in HOSTED_CALLS, None
                self.completed += 1
                self.capped = limit is not None and self.completed >= limit
                if self.capped or self.hosted:
                    return deltas[:index + 1]
        return deltas


@dataclass(frozen=True)
class ApprovedCall:
    """A hosted call the client approved in advance: the server runs it before the model's first pass."""

    server_label: str
    name: str
    arguments: str
    approval_request_id: str


class HostedPasses(Protocol):
    """What a run asks of the tools its server runs: the listings it shows first, the approved calls it runs
    first, each call's result, and the pass that goes on from the output so far."""

    def listings(self) -> list[ListedTools]: ...

    def approved(self) -> list[ApprovedCall]: ...

    async def call(self, item_id: str, server_label: str, name: str, arguments: str) -> ToolResult: ...

    async def next_pass(self, output: list[ResponseOutputItem], output_tokens: int) -> "ResponseRun | None":
        """The pass after `output` (which took `output_tokens`); None: the output budget is spent."""
        ...


@dataclass
class Continuation:
    """What a run continues as after a step before its generation (an automatic compaction): the item that step made
    (the response's first output item), the run that answers from it, and what the step cost."""

    item: ResponseOutputItem
    run: "ResponseRun"
    usage: Usage


@dataclass
class ResponseRun:
    """Everything one response needs; `events()` drives it from start to terminal event."""

    engine: Engine
    request: EngineRequest
    parser: OutputParser
    decoder: IncrementalDecoder | None  # None: the parser reads token ids only (harmony)
    builder: ResponseBuilder
    token_text: Callable[[int], str] | None = None  # set when logprobs were asked for
    max_tool_calls: int | None = None  # generation stops (completed) after the call that reaches this
    slot: Slot | None = None  # this run's place under --max-concurrent-requests, released when it ends
    ticket: Ticket | None = None  # its place under its project's limits; its usage is counted when it ends
    generate: bool = True  # False: the response is prepared (rendered, validated) and completes with no output
    # (but the step before it: a compaction asked for is the response's only output)
    before: Callable[[], Awaitable[Continuation]] | None = None  # a step before generation, which it continues from
    hosted: HostedPasses | None = None  # the tools the server runs between passes (MCP servers)
    closing: GrammarClosing | None = None  # ends a custom call by its grammar before the output budget cuts it
    timeline: Timeline = field(default_factory=Timeline)  # its phases, stored with it
    # Its opening events (created, in_progress) wait until an engine took its request (or it ends): a request that
    # none takes then raises NotTaken, not a failed response; its caller sets this when nothing was sent yet
    hold_until_taken: bool = False
    admission: Callable[[], Awaitable[Slot]] | None = None  # see `queue_for`
    read_at_end: bool = False  # nothing reads its events before its end (a JSON answer): see `_engine_request`

    output_tokens: int = 0
    cached_tokens: int = 0
    prompt_tokens: int | None = None  # the prompt as the engine ran it (images expanded), once it says
    _spent: Usage = Usage()  # the tokens of the step before generation
    _calls: CallCounter = field(default_factory=CallCounter)
    _stopping: Finished | None = None  # set by stop() or steer(): how the run ends, at its next safe step
    _waiting: asyncio.Task[Any] | None = None  # the task iterating this run, while it waits for the engine
    _task: asyncio.Task[Any] | None = None  # the task iterating this run: every caller does so in one `async for`
    _pass_end: Finished | None = None  # how the last engine request ended
    _outcome: Finished | None = None  # how the run ends, once a step has decided it
    _held: list[ResponseStreamEvent] | None = None  # the opening events, while held (see `hold_until_taken`)
    _not_taken: bool = False  # it raised NotTaken: it never ran, and uses nothing

    async def events(self) -> AsyncIterator[ResponseStreamEvent]:
        """created, in_progress, the items' events, then exactly one terminal event.

        Cancelling the task that iterates this closes the engine's stream (which aborts the request);
        `cancelled()` then gives the terminal event.
        """
        if self.slot is not None:
            self.slot.stop = self.stop
        self._task = asyncio.current_task()  # once: asyncio asks the loop, which makes a getpid() system call
        try:
            async for event in self._events():
                yield event
        except NotTaken:
            self._not_taken = True
            raise
        except Exception:  # a step failed where nothing expected it: the response still ends, once, as failed
            if self.builder.finished:
                raise
            logger.exception("response %s failed", self.builder.response_id)
            for event in self._finish(Finished("error", error_message=GENERATION_FAILED)):
                yield event
        except (asyncio.CancelledError, GeneratorExit):  # its client went away, or it was cancelled
            if not self.builder.finished:
                logger.info("response %s cancelled after %d tokens; its engine request was aborted",
                            self.builder.response_id, self.output_tokens)
            raise
        finally:
            self.release()

    @property
    def response_id(self) -> str:
        return self.builder.response_id

    def response(self) -> Response:
        """The terminal response, or an in-progress snapshot of what is finished so far."""
        return self.builder.response()

    @property
    def ended(self) -> bool:
        """The terminal event is made."""
        return self.builder.finished

    def queue_for(self, admission: Callable[[], Awaitable[Slot]]) -> None:
        """Its place under the concurrency limit is waited for as it runs (a background response, accepted at once):
        it is queued until then."""
        self.admission = admission
        self.builder.queue()

    def release(self) -> None:
        """Give back this run's place under the concurrency limit (when it will never run; a run's end does it)."""
        if self.slot is not None:
            self.slot.release()
        if self.ticket is not None:  # what the response reports (nothing, for a run that never started)
            self.ticket.finish(self._used() if self._task is not None and not self._not_taken else None)

    def stop(self, reason: str) -> None:
        """End the run with a response.failed saying `reason`, its engine request aborted: at once if it is
        waiting for the engine (a long prefill, a queued request), else at its next step."""
        self._stop_at(Finished("error", error_message=reason))

    def steer(self) -> None:
        """End the run as incomplete (`steered`), its engine request aborted, at its next safe step: while it
        waits for the engine, or after a step that leaves no tool call open (completed, when a call has ended: the
        client owes its output)."""
        if self._stopping is None:
            self._stop_at(Finished("steered"))

    def _stop_at(self, finished: Finished) -> None:
        self._stopping = finished
        if self._waiting is not None and self._may_stop_now():
            self._waiting.cancel()  # `_next_step` turns this into the end of the steps

    def _stops_after(self, step: EngineStep) -> bool:
        """The run was asked to stop, and this step (the model has not finished) is a place to stop at."""
        return not step.finish_reason and self._may_stop_now()

    def _may_stop_now(self) -> bool:
        """A stop was asked for and may happen here: a stop at once, a steer when no tool call is open."""
        if self._stopping is None:
            return False
        busy = self.builder.in_tool_call or self.builder.awaited is not None  # a steer waits for a call's end
        return self._stopping.reason != "steered" or not busy

    async def _next_step(self, steps: AsyncIterator[EngineStep]) -> EngineStep | None:
        """The engine's next step; None when there are no more, or when `stop()` interrupted the wait."""
        try:
            return await self._engine_work(anext(steps))
        except StopAsyncIteration:
            return None

    async def _prefill(self) -> Finished:
        """A warm-up's engine work: its prompt is computed (not generated from), so the turn that extends it finds it
        in the engine's prefix cache."""
        try:
            prefilled = await self._engine_work(self.engine.prefill(self.request))
        except Exception:
            logger.exception("response %s: the warm-up's prefill failed", self.builder.response_id)
            return Finished("error", error_message=GENERATION_FAILED)
        if prefilled is not None:
            self.prompt_tokens, self.cached_tokens = prefilled.prompt_tokens, prefilled.cached_tokens
        return self._stopping or Finished("prepared")

    async def _engine_work(self, work: Awaitable[T]) -> T | None:
        """What `work` gives; None when `stop()` interrupted the wait for it."""
        self._waiting = self._task
        try:
            return await work
        except asyncio.CancelledError:
            if self._stopping is None or self._waiting is None:
                raise  # the client went away (or a background cancel): not ours to absorb
            self._waiting.uncancel()
            return None
        finally:
            self._waiting = None

    async def _events(self) -> AsyncIterator[ResponseStreamEvent]:
        opening = self.builder.start()
        if self.hold_until_taken and self.generate:
            self._held = opening
        else:
            for event in opening:
                yield event
        if self.admission is not None:  # queued until it has its place (a cancel or a stop ends it there)
            self.slot = await self._engine_work(self.admission())
            if self.slot is None:
                for event in self._finish(self._stopping or Finished("error", error_message=GENERATION_FAILED)):
                    yield event
                return
            self.slot.stop = self.stop
            for event in self.builder.admitted():
                yield event
        if not self.generate and self.before is None:
            for event in self._finish(await self._prefill()):
                yield event
            return
        for step in (self._compaction, self._hosted_start, self._passes):  # each sets `_outcome` when the run ends
            async for event in step():
                if self._held is not None:  # a step before generation: the client is told from here on
                    for held in self._release_held():
                        yield held
                yield event
            if self._outcome is not None:
                break
        for event in self._release_held() + self._finish(self._outcome or Finished("error",
                                                                                   error_message=GENERATION_FAILED)):
            yield event

    def _release_held(self) -> list[ResponseStreamEvent]:
        """The opening events, when they were held and are not sent yet (the engine took the request, or the run
        ends otherwise)."""
        held, self._held = self._held or [], None
        return held

    async def _compaction(self) -> AsyncIterator[ResponseStreamEvent]:
        """The step before generation (an automatic compaction), when there is one: its item, then the run goes on
        from it."""
        if self.before is None:
            return
        for event in self.builder.begin_compaction():
            yield event
        try:
            with self.timeline.phase("compaction"):
                continuation = await self._engine_work(self.before())  # stop() interrupts it, as an engine wait
        except Exception as exc:  # after response.created: the response ends failed, saying why
            self._outcome = Finished("error", error_message=self._compaction_failure(exc))
            return
        if continuation is None:  # stopped (shutdown) while compacting
            self._outcome = self._stopping or Finished("error", error_message=GENERATION_FAILED)
            return
        for event in self.builder.end_compaction(continuation.item):
            yield event
        self._continue_as(continuation)
        if not self.generate:  # the compaction is the response (Codex's compaction_trigger): the context it opens
            self._outcome = await self._prefill()  # into is computed, for the turn that goes on from it

    async def _hosted_start(self) -> AsyncIterator[ResponseStreamEvent]:
        """The MCP servers listed for this response, then the calls the client approved (the first pass goes on
        from their results)."""
        if self.hosted is None:
            return
        for listed in self.hosted.listings():
            for event in self.builder.open_hosted("mcp_list_tools", namespace=listed.server_label):
                yield event
            for event in self.builder.resolve_awaited(listed):
                yield event
            if listed.error is not None:
                self._outcome = Finished("error", error_message=listed.error)
                return
        approved = self.hosted.approved()
        for call in approved:
            for event in self.builder.open_hosted("mcp_call", name=call.name, namespace=call.server_label,
                                                  arguments=call.arguments,
                                                  approval_request_id=call.approval_request_id):
                yield event
            async for event in self._resolve_awaited():
                yield event
            if self._outcome is not None:
                return
        if approved:
            await self._next_pass()

    async def _passes(self) -> AsyncIterator[ResponseStreamEvent]:
        """The model's passes: one, or, while it calls hosted tools, one more after each call's result."""
        while True:
            inference = self._inference_span()  # one engine request: a traced round, a phase of the timeline
            entry = self.timeline.begin("inference", prompt_tokens=len(self.request.prompt_token_ids))
            try:
                async for event in self._generation(inference):
                    yield event
            finally:
                self._end_inference(inference)
                self.timeline.end(entry, output_tokens=self.output_tokens)
            finished = self._pass_end
            if self.builder.awaited is None or finished is None or finished.reason != "stop":
                self._outcome = finished
                return
            async for event in self._resolve_awaited():
                yield event
            if self._outcome is not None:
                return
            if self._stopping is not None or self.builder.called_tools:  # a steer waited for the call; or the
                self._outcome = Finished("stop") if self.builder.called_tools else self._stopping  # client owes one
                return
            await self._next_pass()
            if self._outcome is not None:
                return

    async def _resolve_awaited(self) -> AsyncIterator[ResponseStreamEvent]:
        """The awaited hosted call, run by the server; a cancel stops it in flight, a steer waits for it."""
        call = self.builder.awaited
        assert call is not None and self.hosted is not None
        with self.timeline.phase("tool_call", tool=call.name, server=call.namespace or None) as entry:
            result = await self._engine_work(self.hosted.call(call.id, call.namespace or "", call.name,
                                                              "".join(call.arguments)))
            entry["status"] = "stopped" if result is None else "failed" if result.error is not None else "completed"
        if result is None:  # stopped (shutdown) while it ran
            self._outcome = self._stopping or Finished("error", error_message=GENERATION_FAILED)
            return
        for event in self.builder.resolve_awaited(result):
            yield event

    async def _next_pass(self) -> None:
        """Go on as a new engine request on the prompt extended by the output so far (its prefix is cached)."""
        assert self.hosted is not None
        self._spent, self.output_tokens, self.cached_tokens, self.prompt_tokens = self._used(), 0, 0, None
        self._calls = CallCounter()
        spent = self._spent.output_tokens
        run = await self._engine_work(self.hosted.next_pass(list(self.builder.response().output), spent))
        if run is None:  # stopped while it was prepared; or max_output_tokens is spent: the response is incomplete,
            self._outcome = self._stopping or Finished("length")  # as a pass cut by it would be
            return
        self.request, self.parser, self.decoder = run.request, run.parser, run.decoder
        self.token_text, self.max_tool_calls, self.closing = run.token_text, run.max_tool_calls, run.closing

    def _inference_span(self) -> Any:
        inference = tracing.start(f"chat {self.builder.model}", SpanKind.CLIENT, {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": "vllm",
            "gen_ai.request.model": self.builder.model, "gen_ai.response.id": self.builder.response_id,
            "gen_ai.request.max_tokens": self.request.sampling.max_tokens,
            "gen_ai.usage.input_tokens": len(self.request.prompt_token_ids)})
        self.request = replace(self.request, trace_headers=tracing.headers_of(inference))
        return inference

    def _end_inference(self, inference: Any) -> None:
        ended = self._pass_end
        tracing.set_attributes(inference, {
            "gen_ai.usage.input_tokens": self.prompt_tokens or len(self.request.prompt_token_ids),
            "gen_ai.usage.output_tokens": self.output_tokens,
            "gen_ai.usage.cache_read.input_tokens": self.cached_tokens,
            "gen_ai.response.finish_reasons": [ended.reason] if ended is not None else None})
        if ended is None or ended.reason == "error":
            tracing.failed(inference, ended.error_message if ended is not None else "interrupted")
        inference.end()

    async def _generation(self, inference: Any) -> AsyncIterator[ResponseStreamEvent]:
        """One engine request (traced as `inference`), its steps parsed into the builder; `_pass_end` says how it
        ended."""
        finished: Finished | None = None
        cut_short = False  # stopped by stop() or steer() before the model finished
        closed = False  # the server ended the open custom call by its grammar (self.closing)
        first = True
        try:
            async with aclosing(self.engine.generate(self._engine_request())) as steps:
                while (step := await self._next_step(steps)) is not None:
                    if self._held is not None:  # an engine took the request: the client is told from here on
                        for event in self._release_held():
                            yield event
                    if first and (step.token_ids or step.finish_reason):  # its time to first token (an empty step
                        # first says an engine took the request)
                        inference.add_event("gen_ai.first_token", {"gen_ai.usage.output_tokens": len(step.token_ids)})
                        if not self.timeline.marked("first_token"):
                            self.timeline.mark("first_token")
                        first = False
                    self.output_tokens += len(step.token_ids)
                    self.cached_tokens = max(self.cached_tokens, step.cached_tokens)
                    self.prompt_tokens = step.prompt_tokens or self.prompt_tokens
                    deltas = self._calls.cap(self._parse(step), self.max_tool_calls)
                    for event in self.builder.feed(deltas):
                        yield event
                    error = self.parser.error or self.builder.error
                    if error is not None:  # leaving the loop closes the stream: aborts
                        finished = Finished("error", error_message=error)
                        break
                    if self._calls.capped or self._calls.hosted:  # the last call allowed, or a hosted call, ended:
                        finished = Finished("stop")  # the rest is not wanted (aborted)
                        break
                    if self.closing is not None and self.closing.due(self.output_tokens):
                        ending = await asyncio.to_thread(self.closing.ending, self.output_tokens)
                        if ending is not None:  # the call ends by its grammar, within the budget: the rest is
                            for event in self.builder.feed(self._calls.cap(ending, self.max_tool_calls)):
                                yield event
                            finished, closed = Finished("stop"), True  # not wanted (aborted)
                            break
                    if self._stops_after(step):
                        finished = self._stopping
                        cut_short = True
                        if finished.reason == "steered" and self.builder.called_tools:
                            finished = Finished("stop")  # it completes: the client runs its tools, then steers
                        break
                    if step.finish_reason:
                        finished = Finished(step.finish_reason)
            if finished is None and self._stopping is not None:  # stopped while waiting for the engine
                finished, cut_short = self._stopping, True
            steered = cut_short and self._stopping is not None and self._stopping.reason == "steered"
            cut = self._calls.capped or self._calls.hosted or closed
            if self.parser.error is None and self.builder.error is None and not cut and not steered:
                for event in self.builder.feed(self.parser.finish()):
                    yield event
        except EngineUnavailable as exc:  # its worker went away, or none is up: the client is told so, to retry
            if self._held is not None:  # none took it, and the client was told nothing: its answer is a 503
                raise NotTaken(str(exc)) from exc
            logger.warning("response %s failed: %s", self.builder.response_id, exc)
            finished = Finished("error", error_message=str(exc))
        except Exception:  # the engine or a parser failed mid-stream: end as response.failed
            logger.exception("response %s failed", self.builder.response_id)
            finished = Finished("error", error_message=GENERATION_FAILED)  # the log has the details
        self._pass_end = finished or Finished("error", error_message="the engine stopped without a finish reason")

    def _engine_request(self) -> EngineRequest:
        """The request, asking for its output whole when nothing reads it before its end and no step of it can
        end the pass early (a tool call cap, a hosted call, a grammar's closing): the same output, one engine step."""
        whole = self.read_at_end and self.max_tool_calls is None and self.hosted is None and self.closing is None
        return replace(self.request, whole_output=True) if whole else self.request

    def _compaction_failure(self, exc: Exception) -> str:
        """What the client is told when the step before generation (an automatic compaction) failed."""
        if isinstance(exc, GenerationFailed):
            return exc.message
        if isinstance(exc, RequestError):  # the summary's own request, refused: said as the compaction's
            return f"Compaction failed: {exc.message}"
        logger.error("response %s: its automatic compaction failed", self.builder.response_id, exc_info=exc)
        return GENERATION_FAILED

    def cancelled(self) -> list[ResponseStreamEvent]:
        """The terminal events of a run whose iteration was cancelled (a background response's cancel)."""
        return [] if self.builder.finished else self._finish(Finished("cancelled"))

    def _continue_as(self, continuation: Continuation) -> None:
        """Generate as the continuation's run would (its prompt, parser and limits), under this run's response."""
        answer = continuation.run
        self.request, self.parser, self.decoder = answer.request, answer.parser, answer.decoder
        self.token_text, self.max_tool_calls, self._spent = answer.token_text, answer.max_tool_calls, continuation.usage
        self.closing = answer.closing

    def _used(self) -> Usage:
        """The tokens of every pass so far (and of the step before generation)."""
        spent = self._spent
        return Usage(
            input_tokens=(self.prompt_tokens or len(self.request.prompt_token_ids)) + spent.input_tokens,
            cached_tokens=self.cached_tokens + spent.cached_tokens,
            output_tokens=self.output_tokens + spent.output_tokens,
            reasoning_tokens=self.parser.reasoning_tokens + spent.reasoning_tokens,
        )

    def _finish(self, finished: Finished) -> list[ResponseStreamEvent]:
        if finished.reason == "error":  # one line that says why (the lines before it may say more)
            logger.warning("response %s failed: %s", self.builder.response_id, finished.error_message)
        events = self.builder.finish(replace(finished, usage=self._used()))
        self.timeline.mark("ended", status=str(self.builder.response().status))
        return events

    def _parse(self, step: EngineStep) -> list[Any]:
        text, token_ends = self.decoder.decode_step(step.token_ids) if self.decoder else ("", None)
        deltas = self.parser.feed(step.token_ids, text, token_ends)
        if step.logprobs and self.token_text is not None:
            deltas = _attach_logprobs(deltas, [self._logprob(lp) for lp in step.logprobs])
        return deltas

    def _logprob(self, lp: StepLogprob) -> TokenLogprob:
        assert self.token_text is not None
        token = self.token_text(lp.token_id)
        return TokenLogprob(token=token, logprob=lp.logprob, bytes=list(token.encode()),
                            top=[(self.token_text(t), p) for t, p in lp.top])


def _attach_logprobs(deltas: list[Any], logprobs: list[TokenLogprob]) -> list[Any]:
    """A step's token logprobs go with the step's first output-text delta (all of them, once)."""
    for index, delta in enumerate(deltas):
        if isinstance(delta, OutputText):
            deltas = list(deltas)
            deltas[index] = OutputText(delta.text, tuple(logprobs))
            break
    return deltas
