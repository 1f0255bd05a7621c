"""The FastAPI accessors of the serving context: the app's own, and its store for routes over stored state."""

from __future__ import annotations

from fastapi import Request

from server.http.errors import APIError
from server.serving import ServingContext
from server.store.interface import ResponseStore


def serving_context(request: Request) -> ServingContext:
    """The context of the app serving `request`."""
    return request.app.state.context


def required_store(request: Request) -> ResponseStore:
    """The store, for routes over stored state; a server without a store answers them 404."""
    context = serving_context(request)
    if context.store is None:
        raise APIError("This server stores nothing (started with --store none).", status=404)
    return context.store
