"""Reading a JSON request body (or a WebSocket client event), one way for every route: bad JSON, bad UTF-8, a lone
surrogate or nesting too deep is a 400."""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi import Request

from server.http.errors import APIError

# A body without one of these escapes cannot hold a lone surrogate.
_SURROGATE_ESCAPE = {bytes: re.compile(rb"\\u[dD][89a-fA-F]"), str: re.compile(r"\\u[dD][89a-fA-F]")}


async def json_object(request: Request, empty: dict[str, Any] | None = None) -> dict[str, Any]:
    """The body as a JSON object; `empty`, when given, stands for an empty body."""
    raw = await request.body()
    if not raw and empty is not None:
        return empty
    return parsed_object(raw, "request body")


def parsed_object(raw: bytes | str, what: str) -> dict[str, Any]:
    """`raw` as a JSON object (`what` names it in the errors: "request body", "client event")."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise APIError(f"We could not parse the JSON {what} of your request.") from None
    if not isinstance(body, dict):
        raise APIError(f"The {what} must be a JSON object.")
    if _SURROGATE_ESCAPE[type(raw)].search(raw):  # type: ignore[arg-type]
        try:  # pairs make one character; a lone half cannot be encoded, and tokenizers fail on it
            json.dumps(body, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise APIError(f"The {what} holds a lone surrogate (\\ud800-\\udfff), which is not text.") from None
    return body
