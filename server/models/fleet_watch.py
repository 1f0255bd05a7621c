"""A fleet that changes without a restart: the fleet file read again on SIGHUP and when it changes, and each
model's `engines` resolved again every `discover_seconds` (discovery.py).

A model whose workers or fault settings changed keeps serving: workers join (down until their first health check
passes) and leave (their streams in flight finish where they are). A model added is started off the event loop, then
served; one removed is no longer served, and its engine stops once its streams have ended; one whose path or parsers
changed is started anew beside the old one and takes its place. A file that cannot be served is logged and the fleet
stays as it was.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Protocol

from server.engine.discovery import Resolve, discover, resolve
from server.engine.remote import SERVING_LOOP
from server.engine.retries import RetryBudget
from server.models.fleet_file import Fleet, FleetFileError, FleetModel, read_fleet_file
from server.models.registry import Model, ModelStart

logger = logging.getLogger(__name__)
CHECK_SECONDS = 2.0  # how often the file's modification time is looked at


class Served(Protocol):
    """What the watch changes: the served models (a ServingContext)."""

    def served_models(self) -> list[Model]: ...

    def replace_models(self, models: list[Model]) -> None: ...


@dataclass
class FleetWatch:
    """Applies the fleet file as it is now to the models served."""

    path: Path
    fleet: Fleet  # as last applied
    served: Served
    start_of: Callable[[FleetModel, Fleet, list[str]], ModelStart]  # a model's start on these workers
    started: Callable[[ModelStart], Model]  # blocking: its engine started, its path chosen and warmed up
    discover_seconds: float = 10.0
    resolver: Resolve = resolve  # host, port -> its addresses (DNS)
    _task: asyncio.Task[None] | None = None
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _stopping: set[asyncio.Task[None]] = field(default_factory=set)
    _mtime: float = 0.0

    def start(self) -> None:
        """Starts watching (inside the serving event loop); SIGHUP reads the file at once."""
        self._mtime = self._modified()
        loop = asyncio.get_running_loop()
        with suppress(NotImplementedError, RuntimeError, ValueError):  # not the main thread (tests): no signal
            loop.add_signal_handler(signal.SIGHUP, self._wake.set)
        self._task = loop.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
        with suppress(NotImplementedError, RuntimeError, ValueError):
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)

    def reload_now(self) -> None:
        """As SIGHUP does."""
        self._wake.set()

    async def _run(self) -> None:
        since_discovery = float("inf")
        while True:
            if self._wake.is_set() or self._modified() != self._mtime:
                self._wake.clear()
                await self.reload()
                since_discovery = 0.0
            elif since_discovery >= self.discover_seconds:
                await self.apply(self.fleet)
                since_discovery = 0.0
            tick = min(CHECK_SECONDS, self.discover_seconds)
            with suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), tick)
            since_discovery += tick

    async def reload(self) -> None:
        """Reads the file and applies it (a file that cannot be served: logged, the fleet kept as it was)."""
        self._mtime = self._modified()
        try:
            fleet = await asyncio.to_thread(read_fleet_file, self.path)
        except FleetFileError as exc:
            logger.error("the fleet file changed but cannot be served; the fleet stays as it was: %s", exc)
            return
        logger.info("fleet file %s read again: %s", self.path, ", ".join(m.settings.name for m in fleet.models))
        try:
            await self.apply(fleet)
        except Exception:  # a model that cannot start (its workers refuse it): the others are as they were
            logger.exception("the fleet file's new models could not start; the fleet stays as it was")

    async def apply(self, fleet: Fleet) -> None:
        """Serves `fleet`: each model's workers discovered now, each model kept, changed, started or stopped."""
        current = {model.name: model for model in self.served.served_models()}
        declared = {model.settings.name: model for model in self.fleet.models}
        models: list[Model] = []
        for wanted in fleet.models:
            urls = await discover(wanted.engines, self.resolver)
            model = current.get(wanted.settings.name)
            before = declared.get(wanted.settings.name)
            if model is not None and before is not None and _same_engine(before, wanted):
                self._update(model, wanted, fleet, urls)
                models.append(model)
            else:
                models.append(await self._start(wanted, fleet, urls))
        kept = {id(model) for model in models}
        self.served.replace_models(models)
        self.fleet = fleet
        for model in current.values():
            if id(model) not in kept:
                logger.info("model '%s' is no longer served; its engine stops once its streams end", model.name)
                task = asyncio.get_running_loop().create_task(_stop_when_idle(model))
                self._stopping.add(task)
                task.add_done_callback(self._stopping.discard)

    def _update(self, model: Model, wanted: FleetModel, fleet: Fleet, urls: list[str]) -> None:
        assert model.workers is not None, "a fleet model"
        model.workers.update(urls, fleet.outliers, fleet.load)
        model.engine.reconfigure(fleet.health_seconds, wanted.limits,  # type: ignore[attr-defined]
                                 RetryBudget(fleet.retry_budget, fleet.min_retries), wanted.access)
        model.settings = replace(wanted.settings, history_memory_bytes=model.settings.history_memory_bytes)

    async def _start(self, wanted: FleetModel, fleet: Fleet, urls: list[str]) -> Model:
        logger.info("model '%s' starts on %s", wanted.settings.name, ", ".join(urls))
        SERVING_LOOP.set(asyncio.get_running_loop())  # its health checks run here (the context goes to the thread)
        return await asyncio.to_thread(self.started, self.start_of(wanted, fleet, urls))

    def _modified(self) -> float:
        try:
            return self.path.stat().st_mtime
        except OSError:
            return self._mtime


def _same_engine(before: FleetModel, after: FleetModel) -> bool:
    """Whether a model's engine and path can stay as they are (its tokenizer, template and parsers unchanged)."""
    keep = ("reasoning_parser", "tool_call_parser", "harmony")
    return before.path == after.path and before.max_model_len == after.max_model_len and all(
        getattr(before.settings, key) == getattr(after.settings, key) for key in keep)


async def _stop_when_idle(model: Any) -> None:
    """Stops a model's engine once none of its streams runs."""
    while model.workers is not None and model.workers.busy():
        await asyncio.sleep(1.0)
    await model.engine.shutdown()
