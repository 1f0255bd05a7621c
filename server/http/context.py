"""The FastAPI accessors of the serving context: the app's own, who a request comes from, and the store as the
request's project sees it (the only store routes over stored state get)."""

from __future__ import annotations

from typing import TypeVar

from starlette.requests import HTTPConnection

from server.http.errors import APIError
from server.runs.context import ServingContext
from server.tenancy.keys import Caller
from server.retrieval.project import ProjectRetrieval
from server.responses.project_store import ProjectStore
from server.retrieval.project_files import ProjectFiles
from server.saved_prompts.project_prompts import ProjectPrompts
from server.batches.project_batches import ProjectBatches

T = TypeVar("T")


def serving_context(request: HTTPConnection) -> ServingContext:
    """The context of the app serving `request`."""
    return request.app.state.context


def caller(request: HTTPConnection) -> Caller:
    """Who the request (or WebSocket) comes from, as the key middleware found it (server/http/auth.py)."""
    return request.scope.get("state", {}).get("caller") or Caller()


def stored(view: T | None) -> T:
    """A project's view of stored objects; a server without a store answers the route 404."""
    if view is None:
        raise APIError("This server stores nothing (started with --store none).", status=404)
    return view


def required_files(request: HTTPConnection) -> ProjectFiles:
    """The uploaded files as the request's project sees them."""
    return stored(serving_context(request).project_files(caller(request).project))


def required_store(request: HTTPConnection) -> ProjectStore:
    """The store as the request's project sees it, for routes over stored state."""
    return stored(serving_context(request).project_store(caller(request).project))


def required_batches(request: HTTPConnection) -> ProjectBatches:
    """The batches as the request's project sees them."""
    return stored(serving_context(request).project_batches(caller(request).project))


def required_prompts(request: HTTPConnection) -> ProjectPrompts:
    """The reusable prompts as the request's project sees them."""
    return stored(serving_context(request).project_prompts(caller(request).project))


def required_retrieval(request: HTTPConnection) -> ProjectRetrieval:
    """The vector stores as the request's project sees them; a server without them answers 404."""
    retrieval = serving_context(request).project_retrieval(caller(request).project)
    if retrieval is None:
        required_store(request)  # a server with no store says so
        raise APIError("This server keeps no vector stores (started with --embedding-model none).", status=404)
    return retrieval
