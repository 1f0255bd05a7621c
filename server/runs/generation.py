"""One response's run: engine steps -> decoder -> parser -> builder events, ending in exactly one terminal event."""

from __future__ import annotations

import asyncio
import logging
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import Any, AsyncIterator, Awaitable, Callable, TypeVar

from openai.types.responses import Response, ResponseOutputItem, ResponseStreamEvent

from parsers.base import OutputParser
from parsers.decoder import IncrementalDecoder
from parsers.deltas import ItemEnded, OutputText, TokenLogprob, ToolCallStarted
from server.engine.interface import Engine, EngineRequest, EngineStep, StepLogprob
from server.errors import GenerationFailed, RequestError
from server.runs.admission import Slot
from streaming.builder import ResponseBuilder
from streaming.outcome import Finished, Usage

logger = logging.getLogger(__name__)
GENERATION_FAILED = "The model's output could not be generated; the server logged why. Try again."
T = TypeVar("T")


@dataclass
class CallCounter:
    """Counts the tool calls the deltas complete, to stop at a limit (parallel_tool_calls false, max_tool_calls)."""

    completed: int = 0
    capped: bool = False
    _in_call: bool = False

    def cap(self, deltas: list[Any], limit: int | None) -> list[Any]:
        """The deltas up to the end of the call that reaches `limit` (then `capped` is set)."""
        if limit is None:
            return deltas
        for index, delta in enumerate(deltas):
            if isinstance(delta, ToolCallStarted):
                self._in_call = True
            elif isinstance(delta, ItemEnded) and self._in_call:
                self._in_call, self.completed = False, self.completed + 1
                if self.completed >= limit:
                    self.capped = True
                    return deltas[:index + 1]
        return deltas


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
    generate: bool = True  # False: the response is prepared (rendered, validated) and completes with no output
    before: Callable[[], Awaitable[Continuation]] | None = None  # a step before generation, which it continues from

    output_tokens: int = 0
    cached_tokens: int = 0
    prompt_tokens: int | None = None  # the prompt as the engine ran it (images expanded), once it says
    _spent: Usage = Usage()  # the tokens of the step before generation
    _calls: CallCounter = field(default_factory=CallCounter)
    _stopping: Finished | None = None  # set by stop() or steer(): how the run ends, at its next safe step
    _waiting: asyncio.Task[Any] | None = None  # the task iterating this run, while it waits for the engine
    _task: asyncio.Task[Any] | None = None  # the task iterating this run: every caller does so in one `async for`

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

    def release(self) -> None:
        """Give back this run's place under the concurrency limit (when it will never run; a run's end does it)."""
        if self.slot is not None:
            self.slot.release()

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
        return self._stopping is not None and (self._stopping.reason != "steered" or not self.builder.in_tool_call)

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
        for event in self.builder.start():
            yield event
        if not self.generate:
            for event in self._finish(await self._prefill()):
                yield event
            return
        if self.before is not None:
            try:
                continuation = await self._engine_work(self.before())  # stop() interrupts it, as a wait for the engine
            except Exception as exc:  # after response.created: the response ends failed, saying why
                for event in self._finish(Finished("error", error_message=self._compaction_failure(exc))):
                    yield event
                return
            if continuation is None:  # stopped (shutdown) while compacting
                for event in self._finish(self._stopping or Finished("error", error_message=GENERATION_FAILED)):
                    yield event
                return
            for event in self.builder.add_item(continuation.item):
                yield event
            self._continue_as(continuation)
        finished: Finished | None = None
        cut_short = False  # stopped by stop() or steer() before the model finished
        try:
            async with aclosing(self.engine.generate(self.request)) as steps:
                while (step := await self._next_step(steps)) is not None:
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
                    if self._calls.capped:  # the last call allowed has ended: the rest is not wanted (aborted)
                        finished = Finished("stop")
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
            if self.parser.error is None and self.builder.error is None and not self._calls.capped and not steered:
                for event in self.builder.feed(self.parser.finish()):
                    yield event
        except Exception:  # the engine or a parser failed mid-stream: end as response.failed
            logger.exception("response %s failed", self.builder.response_id)
            finished = Finished("error", error_message=GENERATION_FAILED)  # the log has the details
        finished = finished or Finished("error", error_message="the engine stopped without a finish reason")
        for event in self._finish(finished):
            yield event

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

    def _finish(self, finished: Finished) -> list[ResponseStreamEvent]:
        spent = self._spent
        usage = Usage(
            input_tokens=(self.prompt_tokens or len(self.request.prompt_token_ids)) + spent.input_tokens,
            cached_tokens=self.cached_tokens + spent.cached_tokens,
            output_tokens=self.output_tokens + spent.output_tokens,
            reasoning_tokens=self.parser.reasoning_tokens + spent.reasoning_tokens,
        )
        return self.builder.finish(replace(finished, usage=usage))

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
