"""`GET /v1/organization/usage/completions`: usage by project, key and model, in OpenAI's shape, for admin keys."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from server.http.context import caller, serving_context
from server.http.errors import APIError
from server.tenancy.usage_report import UsageQuery, minutes_of, usage_page

router = APIRouter()


@router.get("/v1/organization/usage/completions")
async def completions_usage(request: Request) -> dict[str, Any]:
    """Buckets of tokens and requests from `start_time`; an admin key's (or anyone's, on a server that asks for no
    key)."""
    context = serving_context(request)
    if not caller(request).admin and context.authenticator.required:
        raise APIError("Reading usage needs an admin key.", status=403, code="insufficient_permissions")
    query = UsageQuery.parse(request.query_params)
    now = context.clock()
    first, last = minutes_of(query, now)
    return usage_page(query, await context.limiter.usage(first, last), now)
