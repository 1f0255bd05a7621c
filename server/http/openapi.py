"""The published OpenAPI schema: each JSON body typed from the openai SDK's own request params, so clients and
fuzzers (schemathesis) see what the routes read, although the routes parse bodies themselves."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import TypeAdapter

_REF = "#/components/schemas/{model}"


def _request_bodies() -> dict[tuple[str, str], tuple[str, Any]]:
    """(method, path) -> (schema name, the SDK type of its JSON body)."""
    from openai.types.conversations import ConversationCreateParams, ConversationUpdateParams
    from openai.types.conversations.item_create_params import ItemCreateParams
    from openai.types.responses import ResponseCreateParams
    from openai.types.responses.input_token_count_params import InputTokenCountParams
    from openai.types.responses.response_compact_params import ResponseCompactParams

    return {
        ("post", "/v1/responses"): ("ResponseCreateParams", ResponseCreateParams),
        ("post", "/v1/responses/input_tokens"): ("InputTokenCountParams", InputTokenCountParams),
        ("post", "/v1/responses/compact"): ("ResponseCompactParams", ResponseCompactParams),
        ("post", "/v1/conversations"): ("ConversationCreateParams", ConversationCreateParams),
        ("post", "/v1/conversations/{conversation_id}"): ("ConversationUpdateParams", ConversationUpdateParams),
        ("post", "/v1/conversations/{conversation_id}/items"): ("ItemCreateParams", ItemCreateParams),
    }


@lru_cache(maxsize=1)
def _body_schemas() -> tuple[dict[str, Any], dict[tuple[str, str], str]]:
    """The components (every SDK model the bodies use) and each route's body schema name."""
    components: dict[str, Any] = {}
    names = {}
    for route, (name, body_type) in _request_bodies().items():
        schema = TypeAdapter(body_type).json_schema(ref_template=_REF)
        components.update(schema.pop("$defs", {}))
        components[name] = schema
        names[route] = name
    return components, names


def install(app: FastAPI) -> None:
    """Replace the app's `openapi()` with one whose request bodies are the SDK's types (built once, cached)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            components, names = _body_schemas()
            schema.setdefault("components", {}).setdefault("schemas", {}).update(components)
            for (method, path), name in names.items():
                operation = schema["paths"].get(path, {}).get(method)
                if operation is not None:
                    operation["requestBody"] = {"required": True, "content": {
                        "application/json": {"schema": {"$ref": _REF.format(model=name)}}}}
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
