"""The FastAPI application: wiring of configuration, engine, renderer and routes."""

from __future__ import annotations

import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable

from fastapi import FastAPI

from server.http import errors
from server.config import ServerConfig
from server.http.errors import APIError
from server.engine.interface import Engine
from server.runs.background import BackgroundRuns
from server.paths.model_path import ModelPath, choose_path
from server.http.requests import ResponsesRequest
from server.store.sqlite import ResponseStore
from parsers.deltas import Finished, OutputText
from streaming.builder import ResponseBuilder
from streaming.ids import IdFactory, random_id
from streaming.sse import event_json

EngineFactory = Callable[[], Engine]


@dataclass
class ServingContext:
    """The per-process objects every request uses; the engine is set once the app has started."""

    config: ServerConfig
    engine_factory: EngineFactory
    ids: IdFactory = random_id
    clock: Callable[[], float] = time.time
    engine: Engine | None = None
    path: ModelPath | None = None
    store: ResponseStore | None = None
    background: BackgroundRuns = field(default_factory=BackgroundRuns)
    started_at: int = field(default_factory=lambda: int(time.time()))

    def check_api_key(self, authorization: str | None) -> None:
        """With --api-key, every route needs `Authorization: Bearer KEY`."""
        expected = self.config.api_key
        if expected and authorization != f"Bearer {expected}":
            raise APIError("Incorrect API key provided.", status=401, code="invalid_api_key")

    def start(self) -> None:
        self.engine = self.engine_factory()
        self.path = choose_path(self.engine, self.config)
        _warm_up(self.config.served_model_name, self.path)


def _warm_up(model: str, path: ModelPath) -> None:
    """Render and build one throwaway response, so the first real request pays no first-use costs."""
    path.render(ResponsesRequest.model_validate({"model": model, "input": "hi"}))
    builder = ResponseBuilder({"model": model})
    for event in builder.start() + builder.feed([OutputText("warm")]) + builder.finish(Finished("stop")):
        event_json(event)


def create_app(context: ServingContext) -> FastAPI:
    """The app; the engine starts in its lifespan (inside the running event loop) and stops with it."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        context.start()
        if context.store is not None:
            await context.store.mark_interrupted("the server stopped while this response was running")
        try:
            yield
        finally:
            await context.background.shutdown()
            if context.engine is not None:
                await context.engine.shutdown()
            if context.store is not None:
                await context.store.close()

    from server.http.routes import router
    from server.http.stored_routes import router as stored_router

    app = FastAPI(title="responses-server", lifespan=lifespan)
    app.state.context = context
    errors.install(app)
    app.include_router(router)
    app.include_router(stored_router)
    return app
