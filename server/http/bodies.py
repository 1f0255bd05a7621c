"""Reading a JSON request body, one way for every route: bad JSON, bad UTF-8 or nesting too deep is a 400."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request

from server.http.errors import APIError


async def json_object(request: Request, empty: dict[str, Any] | None = None) -> dict[str, Any]:
    """The body as a JSON object; `empty`, when given, stands for an empty body."""
    raw = await request.body()
    if not raw and empty is not None:
        return empty
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise APIError("We could not parse the JSON body of your request.") from None
    if not isinstance(body, dict):
        raise APIError("The request body must be a JSON object.")
    return body
