"""Reading a JSON request body, one way for every route: bad JSON, bad UTF-8, a lone surrogate or nesting too
deep is a 400."""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi import Request

from server.http.errors import APIError

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # a body without one cannot hold a lone surrogate


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
    if _SURROGATE_ESCAPE.search(raw):
        try:  # pairs make one character; a lone half cannot be encoded, and tokenizers fail on it
            json.dumps(body, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise APIError("The request body holds a lone surrogate (\\ud800-\\udfff), which is not text.") from None
    return body
