"""OpenAI-shaped errors: `{"error": {"message", "type", "param", "code"}}` with a 4xx/5xx status."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from server.errors import GenerationFailed, NotFound, RequestError, invalid_value
from server.metrics import CLIENT_ERRORS
from server.runs.admission import Draining, Overloaded
from server.store.interface import StoreRejected, StoreUnavailable


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

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self, headers: dict[str, str] | None = None) -> JSONResponse:
        """The JSON answer; a 4xx is counted by its code in the metrics."""
        if 400 <= self.status < 500:
            CLIENT_ERRORS.labels(str(self.status), self.code or self.type).inc()
        return JSONResponse(self.body(), status_code=self.status, headers=headers or self.headers)


def from_validation_error(exc: ValidationError | RequestValidationError, prefix: str = "") -> APIError:
    """The most specific problem pydantic found, as a 400 naming its location (e.g. `input[0].content`)."""
    return from_request_error(invalid_value(exc.errors(), prefix))


def from_request_error(exc: RequestError) -> APIError:
    """A domain error's answer: 404 for what does not exist, else 400."""
    status = 404 if isinstance(exc, NotFound) else 400
    return APIError(exc.message, status=status, param=exc.param, code=exc.code)


async def api_error_handler(request: Request, exc: APIError) -> JSONResponse:
    logger.info("%s %s -> %d %s", request.method, request.url.path, exc.status, exc.message)
    return exc.response()


async def validation_error_handler(_: Request, exc: RequestValidationError) -> JSONResponse:
    error = from_validation_error(exc)
    return error.response()


async def http_error_handler(_: Request, exc: StarletteHTTPException) -> JSONResponse:
    kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
    error = APIError(str(exc.detail), status=exc.status_code, type=kind)
    return error.response()


async def request_error_handler(request: Request, exc: RequestError) -> JSONResponse:
    return await api_error_handler(request, from_request_error(exc))


async def overloaded_handler(_: Request, exc: Overloaded) -> JSONResponse:
    error = APIError(str(exc), status=429, type="requests", code="rate_limit_exceeded")
    return error.response({"Retry-After": str(exc.retry_after)})


async def draining_handler(_: Request, exc: Draining) -> JSONResponse:
    error = APIError(str(exc), status=503, type="server_error", code="server_shutting_down")
    return error.response({"Retry-After": str(exc.retry_after)})


async def generation_failed_handler(_: Request, exc: GenerationFailed) -> JSONResponse:
    return APIError(exc.message, status=500, type="server_error").response()


async def store_rejected_handler(_: Request, exc: StoreRejected) -> JSONResponse:
    return APIError("The request holds a value that cannot be stored or looked up (such as a NUL character in an "
                    "id or name).").response()


async def store_unavailable_handler(_: Request, exc: StoreUnavailable) -> JSONResponse:
    error = APIError("The response store is unavailable; try again shortly.", status=503, type="server_error",
                     code="store_unavailable")
    return error.response({"Retry-After": "5"})


async def unexpected_error_handler(request: Request, exc: Exception) -> JSONResponse:
    logger.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    error = APIError("The server had an error while processing your request; it logged why.", status=500,
                     type="server_error")
    return error.response()


def install(app: Any) -> None:
    """Register the handlers so every error leaves as an OpenAI error body."""
    app.add_exception_handler(APIError, api_error_handler)
    app.add_exception_handler(RequestValidationError, validation_error_handler)
    app.add_exception_handler(StarletteHTTPException, http_error_handler)
    app.add_exception_handler(RequestError, request_error_handler)
    app.add_exception_handler(Overloaded, overloaded_handler)
    app.add_exception_handler(Draining, draining_handler)
    app.add_exception_handler(GenerationFailed, generation_failed_handler)
    app.add_exception_handler(StoreRejected, store_rejected_handler)
    app.add_exception_handler(StoreUnavailable, store_unavailable_handler)
    app.add_exception_handler(Exception, unexpected_error_handler)
