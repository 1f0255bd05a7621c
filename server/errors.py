"""The domain's errors, in the client's terms; `server/http/errors.py` alone turns them into HTTP answers."""

from __future__ import annotations

from typing import Any, Sequence


class RequestError(Exception):
    """The request cannot be served as sent: `param` names the field at fault, `code` the kind of fault."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


class NotFound(RequestError):
    """The request names something that does not exist (a response, a conversation, the model)."""


class TooLarge(RequestError):
    """A part of the request costs more than the server's bounds allow (its size, pixels, memory)."""


class DependencyFailed(RequestError):
    """A server the request depends on (an MCP server) could not give what the response needs."""


class GenerationFailed(Exception):
    """A run the request depends on (a compaction's summary) could not produce its output."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def invalid_value(errors: Sequence[dict[str, Any]], prefix: str = "") -> RequestError:
    """The most specific problem pydantic found (`errors()` of a ValidationError), with its location as `param`
    (e.g. `input[0].content`).

    `prefix` names the field that was validated on its own (`items` -> `items[0].role`).
    """
    first = max(errors, key=lambda error: len(error.get("loc", ())))
    param = _param_path((prefix, *first.get("loc", ())) if prefix else first.get("loc", ()))
    message = first.get("msg", "Invalid request")
    return RequestError(f"Invalid value for '{param}': {message}" if param else message, param=param or None)


def _param_path(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        if part not in ("body", "query", "path") and not _is_union_tag(part):
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _is_union_tag(part: Any) -> bool:
    """pydantic puts the union member it tried into `loc`: a class name or a type such as `list[...]`."""
    return isinstance(part, str) and (part[:1].isupper() or "[" in part or part in ("str", "list", "dict"))
