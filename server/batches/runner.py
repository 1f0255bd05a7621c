"""Each replica's batch runner: it takes batches under a lease in the shared store, runs them (server/batches/
batch_run.py), and renews its leases while it does. A replica that dies stops renewing: another takes its batches
over once their leases run out (the same replica at once when it starts again), and runs the lines not kept yet."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Callable

from server.batches.batch_run import BatchRun, BatchSettings, LineAnswer, Room
from server.batches.project_batches import ProjectBatches
from server.batches.records import BatchRecords
from server.store.database import StoreUnavailable

logger = logging.getLogger(__name__)
MAX_BATCHES = 2  # batches one process runs at once (each with its own lines at once)
IDLE_POLLS = 4  # while no batch waits, the store is asked every this many polls (2 s by default)


@dataclass
class BatchRunner:
    """Takes, runs and keeps the leases of this process's batches."""

    records: BatchRecords
    batches: Callable[[str], ProjectBatches]  # a project's batches
    answer: LineAnswer
    room: Room
    served: Callable[[str], bool]
    owner: str
    lease_seconds: float = 30.0
    running: dict[str, tuple[BatchRun, asyncio.Task[None]]] = field(default_factory=dict)
    _loop: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop().create_task(self._keep())

    async def stop(self) -> None:
        """Stop running (the lines running are dropped: whoever takes the batch over runs them again)."""
        tasks = [task for _, task in self.running.values()] + ([self._loop] if self._loop else [])
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _keep(self) -> None:
        """Look for a batch every poll while it runs some, every IDLE_POLLS polls while it runs none (a server
        without batches wakes for them a few times a minute, not twice a second)."""
        renewed = time.monotonic()
        while True:
            try:
                if len(self.running) < MAX_BATCHES:
                    await self._take()
                if time.monotonic() - renewed >= self.lease_seconds / 3:
                    renewed = time.monotonic()
                    await self._renew()
            except StoreUnavailable:
                pass  # the store logged why; tried again at the next tick
            except Exception:  # pragma: no cover - a runner must outlive any one batch's fault
                logger.exception("the batch runner failed a round")
            idle = not self.running
            await asyncio.sleep(self.room.settings.poll_seconds * (IDLE_POLLS if idle else 1))

    async def _take(self) -> bool:
        """Take a batch to run (False: none is waiting)."""
        claimed = await self.records.claim(self.owner, self.lease_seconds, list(self.running))
        if claimed is None:
            return False
        batch_id, project = claimed
        batches = self.batches(project)
        batch = await batches.get(batch_id)
        if batch is None:
            return False
        run = BatchRun(batches, batch, self.owner, self.answer, self.room, self.served)
        task = asyncio.get_running_loop().create_task(self._run(run))
        self.running[batch_id] = (run, task)
        return True

    async def _run(self, run: BatchRun) -> None:
        batch_id = run.batch.id
        try:
            await run.run()
        except StoreUnavailable:
            logger.warning("batch %s stopped: the store is unavailable; it is taken up again", batch_id)
        except Exception:
            logger.exception("batch %s stopped; it is taken up again", batch_id)
        finally:
            self.running.pop(batch_id, None)
            try:
                await self.records.release(self.owner, batch_id)
            except StoreUnavailable:
                pass  # its lease runs out

    async def _renew(self) -> None:
        if not self.running:
            return
        held = set(await self.records.renew(self.owner, list(self.running), self.lease_seconds))
        for batch_id, (run, task) in list(self.running.items()):
            if batch_id not in held:
                logger.warning("batch %s was taken over by another replica; this one stops running it", batch_id)
                run.lost = True
                task.cancel()
