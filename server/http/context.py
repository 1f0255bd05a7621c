"""The FastAPI accessors of the serving context: the app's own, who a request comes from, and the store as the
request's project sees it (the only store routes over stored state get)."""

from __future__ import annotations

from starlette.requests import HTTPConnection

from server.http.errors import APIError
from server.runs.context import ServingContext
from server.tenancy.keys import Caller
from server.retrieval.project import ProjectRetrieval
from server.responses.project_store import ProjectStore
from server.retrieval.project_files import ProjectFiles


def serving_context(request: HTTPConnection) -> ServingContext:
    """The context of the app serving `request`."""
    return request.app.state.context


def caller(request: HTTPConnection) -> Caller:
    """Who the request (or WebSocket) comes from, as the key middleware found it (server/http/auth.py)."""
    return request.scope.get("state", {}).get("caller") or Caller()


def required_files(request: HTTPConnection) -> ProjectFiles:
    """The uploaded files as the request's project sees them; a server without a store answers 404."""
    files = serving_context(request).project_files(caller(request).project)
    if files is None:
        raise APIError("This server stores nothing (started with --store none).", status=404)
    return files


def required_store(request: HTTPConnection) -> ProjectStore:
    """The store as the request's project sees it, for routes over stored state; a server without a store answers
    them 404."""
    store = serving_context(request).project_store(caller(request).project)
    if store is None:
        raise APIError("This server stores nothing (started with --store none).", status=404)
    return store


def required_retrieval(request: HTTPConnection) -> ProjectRetrieval:
    """The vector stores as the request's project sees them; a server without them answers 404."""
    retrieval = serving_context(request).project_retrieval(caller(request).project)
    if retrieval is None:
        required_store(request)  # a server with no store says so
        raise APIError("This server keeps no vector stores (started with --embedding-model none).", status=404)
    return retrieval
