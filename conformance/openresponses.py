"""Validation against the Open Responses specification (version 2026-04-24): every event and response, as a strict
client generated from the spec's schema checks them. The schema's structure is in conformance/data (no prose)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

SPEC_VERSION = "2026-04-24"
SCHEMA_FILE = Path(__file__).parent / "data" / f"openresponses-{SPEC_VERSION}.schema.json"

# What the openai SDK (and Codex) speak that this version of the spec does not define: the SDK's names for raw
# reasoning text (the spec says `response.reasoning.delta`) and custom tools. They are checked against the SDK's
# types only; every other event must be one of the spec's.
SDK_ONLY_EVENTS = frozenset({
    "response.reasoning_text.delta", "response.reasoning_text.done",
    "response.custom_tool_call_input.delta", "response.custom_tool_call_input.done",
    # Hosted MCP tools: the SDK types these events; the spec has none for MCP (its items are extensions too).
    "response.mcp_list_tools.in_progress", "response.mcp_list_tools.completed", "response.mcp_list_tools.failed",
    "response.mcp_call.in_progress", "response.mcp_call_arguments.delta", "response.mcp_call_arguments.done",
    "response.mcp_call.completed", "response.mcp_call.failed",
    "response.shell_call_command.added", "response.shell_call_command.delta", "response.shell_call_command.done",
    "response.web_search_call.in_progress", "response.web_search_call.searching", "response.web_search_call.completed",
    "response.code_interpreter_call.in_progress", "response.code_interpreter_call.interpreting",
    "response.code_interpreter_call.completed", "response.code_interpreter_call_code.delta",
    "response.code_interpreter_call_code.done",
    "response.file_search_call.in_progress", "response.file_search_call.searching",
    "response.file_search_call.completed",
    "response.compaction.compacting",  # an automatic compaction inside a response (the spec has compaction items)
})
# Output items, tools and annotations of the SDK beyond the spec's (a custom tool and its call, a file search's call
# and the file citations of the answer): accepted as extensions.
_EXTENDED_UNIONS = {"ItemField": "type", "Tool": "type", "Annotation": "type"}
# Where this structural copy lost a branch of the published spec: a json_schema format's `schema` is an object or
# null there (`z.union([z.object({}), z.null()])` in the spec's own zod schemas), not null only.
_CORRECTIONS = {("JsonSchemaResponseFormat", "schema"): {"anyOf": [{"type": "object"}, {"type": "null"}]},
                # An extension: a response made from a reusable prompt (`prompt`, which the spec does not define)
                # echoes the filled prompt in `instructions` as a list of input items, as OpenAI and the SDK do.
                ("ResponseResource", "instructions"): {"anyOf": [{"type": "string"}, {"type": "null"},
                                                                 {"type": "array", "items": {"type": "object"}}]}}


class SpecViolation(AssertionError):
    """A body or event the Open Responses schema rejects."""


@lru_cache(maxsize=1)
def _spec() -> tuple[dict[str, Any], dict[str, str]]:
    """The schema (with its unions open to the SDK's other item and tool types) and the event schema by type."""
    document = json.loads(SCHEMA_FILE.read_text())
    assert document["info"]["version"] == SPEC_VERSION
    schemas = document["components"]["schemas"]
    for (name, field), schema in _CORRECTIONS.items():
        schemas[name]["properties"][field] = schema
    choice = schemas["ResponseResource"]["properties"]["tool_choice"]  # the SDK's other tool choices (a custom
    choice["oneOf"].append(_other_than({"function", "allowed_tools"}))  # tool's, an MCP server's): extensions too
    for name in _EXTENDED_UNIONS:
        variants = schemas[name].get("oneOf") or [{"$ref": schemas[name]["$ref"]}]
        schemas[name] = {"oneOf": [*variants, _other_than(_variant_types(schemas, schemas[name]))]}
    events = {}
    for name, schema in schemas.items():
        if name.endswith("StreamingEvent"):
            events[schema["properties"]["type"]["enum"][0]] = name
    return document, events


def _other_than(known: set[str]) -> dict[str, Any]:
    """An object whose `type` is none of `known`: a variant the SDK has beyond the spec's."""
    return {"type": "object", "required": ["type"], "properties": {"type": {"not": {"enum": sorted(known)}}}}


def _variant_types(schemas: dict[str, Any], union: dict[str, Any]) -> set[str]:
    refs = [variant["$ref"] for variant in union.get("oneOf", [])] or [union["$ref"]]
    return {schemas[ref.rsplit("/", 1)[1]]["properties"]["type"]["enum"][0] for ref in refs}


@lru_cache(maxsize=None)
def _validator(name: str) -> jsonschema.Draft202012Validator:
    document, _ = _spec()
    resource = Resource.from_contents(document, default_specification=DRAFT202012)
    registry = Registry().with_resource("urn:openresponses", resource)
    schema = {"$ref": f"urn:openresponses#/components/schemas/{name}"}
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _check(name: str, value: Any, what: str) -> None:
    errors = sorted(_validator(name).iter_errors(value), key=lambda e: e.path)
    if errors:
        details = "; ".join(f"{'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message[:300]}"
                            for e in errors[:5])
        raise SpecViolation(f"{what} does not validate as the spec's {name}: {details}")


def check_event(event: dict[str, Any]) -> None:
    """One streaming event, as the spec's schema for its type has it."""
    kind = event.get("type")
    if kind in SDK_ONLY_EVENTS:
        return
    _, events = _spec()
    if kind not in events:
        raise SpecViolation(f"event type {kind!r} is not in the spec")
    _check(events[kind], event, f"event {kind} (sequence_number {event.get('sequence_number')})")


def check_response(body: dict[str, Any]) -> None:
    """A Response object (a JSON body, a stored response, a snapshot)."""
    _check("ResponseResource", body, f"response {body.get('id')}")


def check_compaction(body: dict[str, Any]) -> None:
    """The body of `POST /v1/responses/compact`."""
    _check("CompactResource", body, "the compacted response")


def check_body(method: str, path: str, body: dict[str, Any]) -> None:
    """A successful JSON answer of the API, checked as the spec's schema has it where the spec defines one."""
    if path.rstrip("/").endswith("/responses/compact"):
        check_compaction(body)
    elif body.get("object") == "response" and method != "DELETE" and not path.endswith("/input_items"):
        check_response(body)


class SpecCheckingApp:
    """ASGI wrapper for tests: every JSON body the app answers with is checked against the spec; violations are
    collected (an exception in the middle of an answer would only cut it) and the test fixture fails on them."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.violations: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        state: dict[str, Any] = {"json": False, "status": 0, "body": []}

        async def watch(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers") or [])
                state["status"] = message["status"]
                state["json"] = headers.get(b"content-type", b"").startswith(b"application/json")
            elif message["type"] == "http.response.body" and state["json"] and state["status"] == 200:
                state["body"].append(message.get("body", b""))
                if not message.get("more_body"):
                    self._check(scope["method"], scope["path"], b"".join(state["body"]))
            await send(message)

        await self.app(scope, receive, watch)

    def _check(self, method: str, path: str, raw: bytes) -> None:
        try:
            body = json.loads(raw)
            if isinstance(body, dict):
                check_body(method, path, body)
        except (SpecViolation, ValueError) as exc:
            self.violations.append(f"{method} {path}: {exc}")


def httpx_spec_hook(response: Any) -> None:
    """An httpx response hook (for clients of a server in another process): JSON answers checked as above."""
    if response.status_code == 200 and response.headers.get("content-type", "").startswith("application/json"):
        response.read()
        body = response.json()
        if isinstance(body, dict):
            check_body(response.request.method, response.request.url.path, body)
