"""One batch run by the replica that holds its lease: its input read and checked, each line not answered yet run
when the server has room, the output and error files written, the batch ended.

A line runs as a request of the batch's caller (`POST /v1/responses`'s own code, through `answer`), at the lowest
engine priority, in the server's idle time: a new line starts only while the process runs fewer than `yield_above`
interactive responses (with `step_aside`, when one more arrives the lines running stop, their engine requests
aborted, to run again later); at most `lines_at_once` of a batch and of a project run at once. A line answered 429
or 503 (no room, no worker up) is tried again later, not kept; any other answer is kept once. Cancel stops new lines
at once; the lines running finish and are kept. A batch past its window ends `expired`, its lines not run in the
error file as `batch_expired`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any, Awaitable, Callable

from server.batches.batch import Batch
from server.batches.input_lines import InputLine, read_lines
from server.batches.output_lines import EXPIRED, OutputFiles, answered, not_run
from server.batches.project_batches import ProjectBatches
from server.retrieval.files import PART_BYTES, StoredFile, new_file_id
from server.tenancy.keys import Caller

logger = logging.getLogger(__name__)

# How a line is answered: (status, body) of `POST {endpoint}` with the line's body, as the caller
LineAnswer = Callable[[Caller, dict[str, Any]], Awaitable[tuple[int, dict[str, Any]]]]
RETRIED = (429, 503)  # answers that say "not now": the line is tried again, not kept
RETRY_SECONDS = 2.0
TICK_SECONDS = 0.05  # how often a batch looks whether interactive work arrived (a look costs no store read)


@dataclass(frozen=True)
class BatchSettings:
    """How much of a server batches may take, and how often a runner looks."""

    lines_at_once: int = 4  # lines of one batch, and of one project, running at once in one process
    yield_above: int = 1  # while the process runs this many interactive responses, no batch line starts
    step_aside: bool = False  # ...and those running stop, to run again later (else they finish, behind in priority)
    poll_seconds: float = 0.5  # how often a runner looks for room, a cancel, or a batch to run
    max_input_bytes: int = 200 * 1024 * 1024  # OpenAI's largest batch input file


@dataclass
class Room:
    """What a process runs now: its interactive responses (a callable), and its batch lines, by project."""

    interactive: Callable[[], int]
    settings: BatchSettings
    lines: dict[str, int] = field(default_factory=dict)  # project -> its lines running here

    def yielding(self) -> bool:
        """Whether batch lines step aside now: interactive work runs."""
        return self.interactive() >= self.settings.yield_above

    def has_room(self, project: str) -> bool:
        return not self.yielding() and self.lines.get(project, 0) < self.settings.lines_at_once

    def take(self, project: str) -> None:
        self.lines[project] = self.lines.get(project, 0) + 1

    def give_back(self, project: str) -> None:
        self.lines[project] -= 1


@dataclass
class BatchRun:
    """One batch while this replica holds its lease."""

    batches: ProjectBatches
    batch: Batch
    owner: str
    answer: LineAnswer
    room: Room
    served: Callable[[str], bool]
    clock: Callable[[], float] = time.time
    lost: bool = False  # the lease went to another replica: stop, keep nothing more
    stepped_aside: int = 0  # lines stopped for interactive work (each run again)

    async def run(self) -> None:
        """Take the batch from where it stands to its end (or until its lease is lost)."""
        if self.batch.status == "validating":
            await self._validate()
        if self.batch.status == "in_progress":
            await self._run_lines()
        if self.batch.status in ("finalizing", "cancelling") and not self.lost:
            await self._finalize()

    async def _validate(self) -> None:
        lines = await self._lines()
        if lines is None:
            return
        moved = self.batch.moved("in_progress", self._now())
        await self._save(moved)

    async def _lines(self) -> list[InputLine] | None:
        """The batch's requests (None: the file is gone or invalid, and the batch failed)."""
        found = await self.batches.files.file_content(self.batch.input_file_id, self.room.settings.max_input_bytes)
        if found is None or found[1] is None:
            problem = "was deleted" if found is None else "is larger than a batch's input may be"
            await self._fail([{"code": "invalid_file", "line": None, "param": "input_file_id",
                               "message": f"The input file {self.batch.input_file_id} {problem}."}])
            return None
        read = read_lines(found[1], self.batch.endpoint, self.served)
        if read.errors:
            await self._fail(read.errors)
            return None
        self.batch = replace(self.batch, model=read.model,
                             counts=replace(self.batch.counts, total=len(read.lines)))
        return read.lines

    async def _fail(self, errors: list[dict[str, Any]]) -> None:
        await self._save(self.batch.moved("failed", self._now(), errors=errors))

    async def _run_lines(self) -> None:
        lines = await self._lines()
        if lines is None:
            return
        done = await self.batches.done_lines(self.batch)
        pending = [line for line in lines if line.index not in done]
        running: set[asyncio.Task[None]] = set()
        ending, looked = "finalizing", 0.0
        try:
            while (pending or running) and not self.lost:
                if time.monotonic() - looked >= self.room.settings.poll_seconds:
                    looked = time.monotonic()
                    if await self._cancelling():
                        ending = "cancelling"
                        pending.clear()
                    elif self._now() >= self.batch.expires_at:
                        await self._expire(pending)
                        pending.clear()
                if running and ending != "cancelling" and self.room.settings.step_aside and self.room.yielding():
                    await self._step_aside(running)
                while pending and len(running) < self.room.settings.lines_at_once and self.room.has_room(
                        self.batch.project):
                    running.add(asyncio.create_task(self._line(pending.pop(0), pending)))
                if running:
                    _, running = await asyncio.wait(running, timeout=TICK_SECONDS)
                else:
                    await asyncio.sleep(TICK_SECONDS)
        finally:
            await self._step_aside(running)
        if not self.lost and ending == "finalizing":
            await self._save(self.batch.moved("finalizing", self._now()))

    async def _step_aside(self, running: set[asyncio.Task[None]]) -> None:
        """Stop the lines running (each goes back to the front of the pending lines, its answer dropped)."""
        for task in running:
            task.cancel()
        self.stepped_aside += sum(not task.done() for task in running)
        await asyncio.gather(*running, return_exceptions=True)
        running.clear()

    async def _line(self, line: InputLine, pending: list[InputLine]) -> None:
        """Run one line and keep its answer (one that says "not now" goes back to the end of `pending`)."""
        project = self.batch.project
        self.room.take(project)
        try:
            status, body = await self.answer(Caller(project, self.batch.api_key_id), line.body)
        except asyncio.CancelledError:
            pending.insert(0, line)  # stepped aside (or stopped): run again later, by whoever holds the batch
            raise
        finally:
            self.room.give_back(project)
        if status in RETRIED:
            await asyncio.sleep(RETRY_SECONDS)
            pending.append(line)
            return
        if not await self.batches.add_result(self.owner, self.batch, answered(line.index, line.custom_id, status,
                                                                               body)):
            self.lost = True

    async def _cancelling(self) -> bool:
        """Whether the batch was asked to cancel (read from the store: any replica may have been asked)."""
        stored = await self.batches.get(self.batch.id)
        if stored is not None and stored.status == "cancelling":
            self.batch = replace(self.batch, status="cancelling", times=stored.times)
            return True
        return False

    async def _expire(self, pending: list[InputLine]) -> None:
        for line in pending:
            if not await self.batches.add_result(self.owner, self.batch, not_run(line.index, line.custom_id,
                                                                                 EXPIRED)):
                self.lost = True
                return

    async def _finalize(self) -> None:
        """Write the output and error files from the results in the input's order, then end the batch."""
        files = OutputFiles()
        after = -1
        while page := await self.batches.results_page(self.batch, after):
            for result in page:
                files.add(result)
            after = page[-1].line
        output_id = await self._file("output", bytes(files.output))
        error_id = await self._file("error", bytes(files.errors))
        ending = self._ending()
        await self._save(self.batch.moved(ending, self._now(), output_file_id=output_id, error_file_id=error_id,
                                          usage=files.usage))

    def _ending(self) -> str:
        if self.batch.status == "cancelling":
            return "cancelled"
        expired = self._now() >= self.batch.expires_at
        return "expired" if expired else "completed"

    async def _file(self, kind: str, content: bytes) -> str | None:
        """A file of the project (`batch_output`) with `content` (None: nothing to write)."""
        if not content:
            return None
        record = StoredFile(new_file_id(), self.batch.project, f"{self.batch.id}_{kind}.jsonl", "batch_output",
                            len(content), int(self._now()))
        await self.batches.files.save_file(record, [content[start:start + PART_BYTES]
                                                    for start in range(0, len(content), PART_BYTES)])
        return record.id

    async def _save(self, batch: Batch) -> None:
        if await self.batches.save(self.owner, batch):
            self.batch = batch
        else:
            self.lost = True

    def _now(self) -> int:
        return int(self.clock())
