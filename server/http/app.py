"""The FastAPI application: wiring of configuration, engine, renderer and routes."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import AsyncIterator

from fastapi import FastAPI

from server.console import routes as console
from server.http import errors, instrumentation, openapi
from server.http.auth import OPEN_PATHS, APIKeyMiddleware
from server.http.forwarding import Forwarder, NoForwarding
from server.http.batch_lines import batch_runner
from server.http.batch_routes import router as batch_router
from server.http.file_routes import router as file_router
from server.http.vector_store_routes import router as vector_store_router
from server.http.file_routes import upload_limits
from server.http.limits import BodySizeLimit
from server.metrics import watch_event_loop_lag
from server.runs.context import ServingContext
from server.store.database import StoreUnavailable
from server.http.conversation_routes import router as conversation_router
from server.http.routes import router
from server.http.stored_routes import router as stored_router
from server.http.usage_routes import router as usage_router
from server.http.prompt_routes import router as prompt_router
from server.http.replica_routes import PeerClient
from server.http.replica_routes import router as replica_router
from server.http.tool_routes import router as tool_router
from server.http.websocket import OpenSockets
from server.http.websocket import router as websocket_router


def create_app(context: ServingContext) -> FastAPI:
    """The app; the engine starts in its lifespan (inside the running event loop) and stops with it."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await _open_store(context)
        context.start()
        await context.authenticator.start()
        if context.records is not None:
            await context.background.recover(context.records.responses)
        lag = asyncio.create_task(watch_event_loop_lag())
        sender = context.webhook_sender()
        if sender is not None:
            sender.start()
        if context.replicas is not None:
            context.replicas.start()
        if context.retrieval is not None:
            context.retrieval.start()
        if context.fleet_watch is not None:
            context.fleet_watch.start()
        batches = batch_runner(context)
        if batches is not None:
            batches.start()
        try:
            yield
        finally:
            lag.cancel()
            if batches is not None:
                await batches.stop()
            if context.fleet_watch is not None:
                await context.fleet_watch.stop()
            if context.replicas is not None:
                await context.replicas.stop()
            await app.state.forwarder.close()
            await app.state.peers.close()
            if sender is not None:
                await sender.stop()
            await context.background.shutdown()
            await context.pending_saves.shutdown()
            if context.retrieval is not None:
                await context.retrieval.stop()
            await context.limiter.close()  # the usage of the last responses, written before the store closes
            context.work_pool.close()
            await context.shutdown_engines()
            if context.records is not None:
                await context.records.close()

    app = FastAPI(title="responses-server", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.context = context
    app.state.sockets = OpenSockets()
    app.state.forwarder = forwarder(context)
    app.state.peers = PeerClient()
    app.add_middleware(BodySizeLimit, max_bytes=context.config.max_body_bytes,
                       uploads=upload_limits(context.config.max_file_bytes))
    open_paths = OPEN_PATHS - {"/metrics"} if context.config.metrics_need_key else OPEN_PATHS
    app.add_middleware(APIKeyMiddleware, authenticator=context.authenticator,
                       open_paths=open_paths | console.OPEN_PAGES, open_prefixes=console.OPEN_PREFIXES)
    instrumentation.install(app, context.config.api_process)  # added last, runs first: it sees every answer
    errors.install(app)
    openapi.install(app)
    app.include_router(router)
    app.include_router(stored_router)
    app.include_router(conversation_router)
    app.include_router(usage_router)
    app.include_router(replica_router)
    app.include_router(tool_router)
    app.include_router(file_router)
    app.include_router(prompt_router)
    app.include_router(vector_store_router)
    app.include_router(batch_router)
    app.include_router(websocket_router)
    console.install(app)
    return app


async def _open_store(context: ServingContext) -> None:
    """The store's connection, then the vector index's, opened one after the other before anything shares the file
    (server/retrieval/sqlite_index.py says why); a store that cannot open now is served as unavailable, as ever."""
    if context.records is None:
        return
    try:
        await context.records.database.run("open", lambda db: None)
        if context.retrieval is not None:
            await context.retrieval.ready()
    except StoreUnavailable:
        pass  # the store logged why; stored routes answer 503 until it recovers


def forwarder(context: ServingContext) -> Forwarder | NoForwarding:
    """What sends requests to their home replica: with a store and `forwarding` on (else nothing is forwarded)."""
    if context.replicas is None or context.records is None or not context.config.forwarding:
        return NoForwarding()
    return Forwarder(context.replicas, context.records.project_store)
