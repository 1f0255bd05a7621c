"""OpenAI-shaped errors: `{"error": {"message", "type", "param", "code"}}` with a 4xx/5xx status."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from server.engine.interface import EngineUnavailable
from server.errors import DependencyFailed, GenerationFailed, NotFound, RequestError, TooLarge, invalid_value
from server.metrics import CLIENT_ERRORS
from server.runs.admission import Draining, Overloaded
from server.store.database import StoreRejected, StoreUnavailable
from server.tenancy.limits import RateLimited


logger = logging.getLogger(__name__)


class APIError(Exception):
    """An error to answer with an OpenAI error body."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers

    def count(self) -> None:
        """A 4xx answer (over HTTP or as a WebSocket error event) counted by its code in the metrics."""
        if 400 <= self.status < 500:
            CLIENT_ERRORS.labels(str(self.status), self.code or self.type).inc()

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self, headers: dict[str, str] | None = None) -> JSONResponse:
        """The JSON answer; a 4xx is counted by its code in the metrics."""
        self.count()
        return JSONResponse(self.body(), status_code=self.status, headers=headers or self.headers)


def from_validation_error(exc: ValidationError | RequestValidationError, prefix: str = "") -> APIError:
    """The most specific problem pydantic found, as a 400 naming its location (e.g. `input[0].content`)."""
    return from_request_error(invalid_value(exc.errors(), prefix))


def from_request_error(exc: RequestError) -> APIError:
    """A domain error's answer: 404 for what does not exist, 413 for what costs too much, 424 for a server the
    request depends on that failed, else 400."""
    status = (404 if isinstance(exc, NotFound) else 413 if isinstance(exc, TooLarge)
              else 424 if isinstance(exc, DependencyFailed) else 400)
    return APIError(exc.message, status=status, param=exc.param, code=exc.code)


# What `api_error_of` answers for what it is; anything else is a 500, logged with its traceback.
_KNOWN = (APIError, RequestValidationError, StarletteHTTPException, RequestError, Overloaded, Draining,
          GenerationFailed, StoreRejected, StoreUnavailable, RateLimited, EngineUnavailable)


def unexpected(exc: Exception) -> bool:
    """An exception the server did not expect: its answer is a 500, and its traceback belongs in the log."""
    return not isinstance(exc, _KNOWN)


def api_error_of(exc: Exception) -> APIError:
    """The answer to an exception raised while serving a request, on HTTP or a WebSocket (a 500 for one the server
    did not expect)."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, RequestValidationError):
        return from_validation_error(exc)
    if isinstance(exc, RequestError):
        return from_request_error(exc)
    if isinstance(exc, StarletteHTTPException):
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return APIError(str(exc.detail), status=exc.status_code, type=kind)
    if isinstance(exc, Overloaded):
        return APIError(str(exc), status=429, type="requests", code="rate_limit_exceeded",
                        headers={"Retry-After": str(exc.retry_after)})
    if isinstance(exc, RateLimited):
        return rate_limited(exc)
    if isinstance(exc, Draining):
        return APIError(str(exc), status=503, type="server_error", code="server_shutting_down",
                        headers={"Retry-After": str(exc.retry_after)})
    if isinstance(exc, GenerationFailed):
        return APIError(exc.message, status=500, type="server_error")
    if isinstance(exc, StoreRejected):
        return APIError("The request holds a value that cannot be stored or looked up (such as a NUL character in an "
                        "id or name).")
    if isinstance(exc, EngineUnavailable):
        return APIError(str(exc), status=503, type="server_error", code="engine_unavailable",
                        headers={"Retry-After": "2"})
    if isinstance(exc, StoreUnavailable):
        return APIError("The response store is unavailable; try again shortly.", status=503, type="server_error",
                        code="store_unavailable", headers={"Retry-After": "5"})
    return APIError("The server had an error while processing your request; it logged why.", status=500,
                    type="server_error")


def rate_limited(exc: RateLimited) -> APIError:
    """A 429 as OpenAI sends it: past a limit per minute, `rate_limit_exceeded` (the SDK and Codex wait and retry,
    Retry-After tells how long); past the day's budget, `insufficient_quota` (retrying does not help)."""
    headers = {**exc.headers, "Retry-After": str(exc.retry_after), "retry-after-ms": str(exc.retry_after * 1000)}
    if exc.kind == "quota":
        return APIError(str(exc), status=429, type="insufficient_quota", code="insufficient_quota", headers=headers)
    return APIError(str(exc), status=429, type=exc.kind, code="rate_limit_exceeded", headers=headers)


async def error_handler(request: Request, exc: Exception) -> JSONResponse:
    """Every error leaves as its OpenAI error body; one the server did not expect is logged with its traceback."""
    error = api_error_of(exc)
    if unexpected(exc):
        logger.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    elif isinstance(exc, (APIError, RequestError)):
        logger.info("%s %s -> %d %s", request.method, request.url.path, error.status, error.message)
    return error.response()


def install(app: Any) -> None:
    """Register the handlers so every error leaves as an OpenAI error body."""
    for kind in (*_KNOWN, Exception):
        app.add_exception_handler(kind, error_handler)
