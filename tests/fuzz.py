"""Fuzzing the HTTP API: schemathesis over the published OpenAPI schema (bodies typed from the SDK's params),
hypothesis over raw bodies for the deep cases, frames of every shape on WebSockets, and hostile input
(tests/hostile.py: every SDK input item type bent field by field, and inputs built to cost, under a probe). Checks, for every case: no 5xx, errors in OpenAI's shape,
every 200 stream whole (one terminal event), and the server still answers a normal request afterwards.

`python -m tests.fuzz --cases 10000` (`make fuzz`) runs the long version and prints the counts.
"""

from __future__ import annotations

import argparse
import base64
import json
import struct
import sys
import tempfile
import time
import zlib
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import httpx
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from hypothesis import strategies as st

from tests.hostile import MARKER, Findings, serve_bad_uploads, serve_costly, serve_foreign_ids, serve_mutations
from tests.sse import events_of, parse_frames, sse_lines
from conformance.contract import ContractViolation, validate_events

MODEL = "fuzz-model"


@dataclass
class Counts:
    """What a fuzz run saw: cases by status code, and every broken invariant."""

    statuses: Counter[int] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # operation modes schemathesis could not generate

    @property
    def cases(self) -> int:
        return sum(self.statuses.values())

    @property
    def server_errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500)

    def check(self, label: str, status: int, content_type: str, body: bytes) -> None:
        self.statuses[status] += 1
        problem = _problem(status, content_type, body)
        if problem and len(self.violations) < 50:
            self.violations.append(f"{label} -> {status}: {problem}: {body[:300]!r}")


def _problem(status: int, content_type: str, body: bytes) -> str | None:
    if status >= 500:
        return "a server error"
    if status >= 400:
        try:
            error = json.loads(body)["error"]
        except (ValueError, KeyError, TypeError):
            return "an error without OpenAI's body"
        if not (isinstance(error.get("message"), str) and error["message"] and isinstance(error.get("type"), str)
                and "param" in error and "code" in error):
            return "an error body missing message/type/param/code"
        return None
    if content_type.startswith("text/event-stream"):
        try:
            validate_events(events_of(parse_frames(sse_lines(body))))
        except (ContractViolation, ValueError) as exc:
            return f"a broken stream ({exc})"
    return None


@contextmanager
def fuzz_server(projects: Any = None) -> Iterator[str]:
    """The real app on a socket, a scripted engine that answers at once (and says it sees, so image parts reach
    the decoder; URLs may be fetched from 127.0.0.1 only), a store in a temporary directory. `projects`: a
    ProjectsFile (its keys then needed), else keyless."""
    from server.attachments.work_pool import WorkLimits
    from server.config import ServerConfig
    from server.engine.vllm_engine import load_tokenizer
    from server.http.app import create_app
    from server.runs.context import ServingContext
    from server.bundled_model import ensure_bundled_model
    from tests.stores import sqlite_records
    from server.tools.mcp_servers import McpSettings
    from tests.conftest import serve_in_thread
    from tests.mcp_servers import serve_mcp
    from tests.scripted_engine import ScriptedEngine, steps_from_tokens

    tokenizer = load_tokenizer(str(ensure_bundled_model()))
    answer = tokenizer.encode("Fine.", add_special_tokens=False) + [tokenizer.eos_token_id]
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[steps_from_tokens(answer, cuts=[1])], max_model_len=4096,
                            input_modalities=("text", "image"), image_placeholder="<image>")
    with tempfile.TemporaryDirectory() as data, serve_mcp() as mcp:
        config = ServerConfig(served_model_name=MODEL, max_body_bytes=4 * 1024 * 1024,
                              allowed_media_domains=("127.0.0.1",), input_work=WorkLimits(seconds=2.0),
                              mcp=McpSettings(servers={"calc": mcp.url}, allowed_domains=("127.0.0.1",),
                                              connect_seconds=2, call_seconds=2),
                              **({"projects": projects} if projects is not None else {}))
        context = ServingContext(config=config, engine_factory=lambda: engine, records=sqlite_records(Path(data) / "fuzz.db"))
        context.retrieval = retrieval_double(context, Path(data) / "fuzz.db")
        with serve_in_thread(create_app(context)) as base_url:
            yield base_url.removesuffix("/v1")


PROJECT_KEYS = {"alpha": "alpha-fuzz-key-0123456789abcdef", "beta": "beta-fuzz-key-0123456789abcdef"}


def retrieval_double(context: Any, database: Path) -> Any:
    """Vector stores in the fuzz server's database, embedded by the embedding engine's test double."""
    from server.retrieval.chunking import _tokenizer
    from server.retrieval.embedding_model import ensure_embedding_model
    from server.retrieval.service import Retrieval, RetrievalSettings
    from server.retrieval.sqlite_index import SqliteIndex
    from server.records import MIGRATIONS
    from tests.retrieval_doubles import WordsEmbedder, words_model

    path = str(ensure_embedding_model())
    embedder = WordsEmbedder(_tokenizer(path))

    async def start(_: Any) -> Any:
        return embedder

    return Retrieval.open(RetrievalSettings(words_model(path)), SqliteIndex(database, MIGRATIONS), context.project_files,
                          "fuzz", 2.0, start)


@contextmanager
def two_projects() -> Iterator[tuple[str, str, dict[str, str]]]:
    """The fuzz server with two projects; beta's stored response, conversation and item (each holding MARKER) made.
    Yields the root, alpha's key and beta's ids."""
    import hashlib

    from server.tenancy.keys import ApiKey
    from server.tenancy.projects_file import ProjectsFile

    keys = tuple(ApiKey(id=f"file_{name}", name=name, project=name, hash=hashlib.sha256(key.encode()).hexdigest())
                 for name, key in PROJECT_KEYS.items())
    with fuzz_server(ProjectsFile(keys)) as root, httpx.Client(
            base_url=root, timeout=60, headers={"Authorization": f"Bearer {PROJECT_KEYS['beta']}"}) as beta:
        response = beta.post("/v1/responses", json={"model": MODEL, "input": f"Keep {MARKER}.",
                                                    "metadata": {"note": MARKER}}).json()["id"]
        conversation = beta.post("/v1/conversations", json={"items": [{"role": "user", "content": MARKER}]}).json()
        item = beta.get(f"/v1/conversations/{conversation['id']}/items").json()["data"][0]["id"]
        file = beta.post("/v1/files", files={"file": ("private.txt", MARKER.encode())},
                         data={"purpose": "user_data"}).json()["id"]
        store = beta.post("/v1/vector_stores", json={"name": MARKER, "file_ids": [file]}).json()["id"]
        batch = beta.post(f"/v1/vector_stores/{store}/file_batches", json={"file_ids": [file]}).json()["id"]
        deadline = time.monotonic() + 120
        while beta.get(f"/v1/vector_stores/{store}/file_batches/{batch}").json()["status"] == "in_progress":
            assert time.monotonic() < deadline, "beta's file was never ingested"
            time.sleep(0.1)
        yield root, PROJECT_KEYS["alpha"], {"response": response, "conversation": conversation["id"], "item": item,
                                            "file": file, "vector_store": store, "batch": batch}


def _settings(cases: int) -> settings:
    return settings(max_examples=cases, deadline=None, database=None, derandomize=True,
                    phases=[Phase.generate], suppress_health_check=list(HealthCheck))


def run_schemathesis(root: str, cases_per_operation: int, counts: Counts) -> None:
    """Every operation of the published schema, with valid and invalid (negative) cases."""
    import schemathesis
    from schemathesis.core.errors import UnsupportedSchema
    from schemathesis.generation import GenerationMode

    schema = schemathesis.openapi.from_url(f"{root}/openapi.json")
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            @given(case=operation.as_strategy(generation_mode=mode))
            @_settings(cases_per_operation)
            def one(case: Any) -> None:
                if mode is GenerationMode.POSITIVE and isinstance(case.body, dict) and "model" in case.body:
                    case.body["model"] = MODEL  # past the model check, into rendering, grammars and generation
                response = case.call(base_url=root, timeout=60)
                content_type = response.headers.get("content-type") or ""
                if isinstance(content_type, list):
                    content_type = content_type[0]
                counts.check(f"{case.method} {case.formatted_path} ({mode.value})", response.status_code,
                             content_type, response.content)

            try:
                one()
            except Unsatisfiable:  # nothing to make invalid (a route without parameters or body)
                continue
            except UnsupportedSchema as exc:  # schemathesis cannot negate some SDK schema shapes
                counts.skipped.append(f"{operation.label} ({mode.value}): {exc}")


_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
                       st.text(max_size=20), st.sampled_from(["\ud800", "x" * (1 << 20), "", "\x00"]))
_json = st.recursive(_json_leaf, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.text(max_size=8), inner, max_size=4), max_leaves=12)
_ITEM_KINDS = ["message", "function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output",
               "reasoning", "compaction", "item_reference", "web_search_call", "mcp_list_tools", "mcp_call",
               "mcp_approval_request", "mcp_approval_response", "shell_call", "shell_call_output", "apply_patch_call",
               "apply_patch_call_output", "code_interpreter_call", None]
_FIELDS = ["model", "input", "instructions", "tools", "tool_choice", "text", "reasoning", "include", "stream",
           "max_output_tokens", "temperature", "top_p", "top_logprobs", "previous_response_id", "conversation",
           "truncation", "metadata", "store", "background", "max_tool_calls", "parallel_tool_calls"]


def _png(width: int, height: int) -> str:
    """A PNG's signature and header claiming these dimensions (no image data follows)."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", len(header)) + b"IHDR" + header + struct.pack(">I", zlib.crc32(b"IHDR" + header))
    return base64.b64encode(b"\x89PNG\r\n\x1a\n" + chunk).decode()


def _real_png() -> str:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (5, 4), (1, 2, 3)).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


# Image and file parts as clients send them, and bent: bad base64, huge dimensions, wrong types, URLs, ids.
_MEDIA_URL = st.one_of(
    st.just("data:image/png;base64," + _png(1, 1)), st.just("data:image/png;base64," + _png(2**31 - 1, 2**31 - 1)),
    st.just("data:image/png;base64,@@not-base64@@"), st.just("data:text/plain;base64,aGVsbG8="),
    st.just("data:image/jpeg;base64,"), st.just("https://example.invalid/cat.png"), st.just("file:///etc/passwd"),
    st.just("http://127.0.0.1:1/refused.png"), st.just("data:image/png;base64," + _real_png()),
    st.just("data:application/pdf;base64," + base64.b64encode(b"%PDF-1.4\n%%EOF").decode()), st.just("data:image/gif;base64," + _png(3, 3)),
    st.text(max_size=20), st.integers())
_MEDIA_PART = st.one_of(
    st.fixed_dictionaries({"type": st.just("input_image"), "image_url": _MEDIA_URL,
                           "detail": st.sampled_from(["auto", "low", "high", "huge", 3])}),
    st.fixed_dictionaries({"type": st.just("input_image"), "file_id": st.text(max_size=8)}),
    st.fixed_dictionaries({"type": st.just("input_file"), "filename": st.text(max_size=8), "file_data": _MEDIA_URL}),
    st.fixed_dictionaries({"type": st.just("input_audio"), "input_audio": st.fixed_dictionaries(
        {"data": st.text(max_size=8), "format": st.sampled_from(["wav", "mp3", "x"])})}))


@st.composite
def _items(draw: Any) -> list[Any]:
    """Input items of every kind, their fields replaced by values of any type."""
    items = []
    for kind in draw(st.lists(st.sampled_from(_ITEM_KINDS), max_size=4)):
        item = {"type": kind, "role": draw(st.sampled_from(["user", "assistant", "system", "developer", "tool"])),
                "content": draw(st.one_of(st.text(max_size=10), st.lists(st.one_of(st.fixed_dictionaries(
                    {"type": st.sampled_from(["input_text", "output_text", "input_image", "refusal", "x"]),
                     "text": _json}), _MEDIA_PART), max_size=2))),
                "call_id": "c", "name": "f", "arguments": "{}", "encrypted_content": "rsv1.AAAA",
                "server_label": "calc", "id": "mcpr_1", "approval_request_id": "mcpr_1", "approve": True,
                "tools": [{"name": "add", "input_schema": {"type": "object"}}], "status": "completed",
                "action": {"commands": ["ls"]}, "operation": {"type": "delete_file", "path": "a"},
                "code": "print(1)", "outputs": [{"type": "logs", "logs": "1"}],
                "output": draw(st.one_of(st.just("ok"), st.lists(_MEDIA_PART, max_size=2)))}
        for key in draw(st.lists(st.sampled_from(list(item)), max_size=3)):
            item[key] = draw(_json)
        items.append({k: v for k, v in item.items() if v is not None})
    return items


@st.composite
def _tools(draw: Any) -> list[Any]:
    """Tools of the kinds the server reads, their schemas and members replaced by values of any type."""
    tools = []
    for kind in draw(st.lists(st.sampled_from(["function", "namespace", "custom", "web_search", "mcp", "shell",
                                               "apply_patch", "code_interpreter", "web_search_preview", 7]),
                              max_size=3)):
        tool: dict[str, Any] = {"type": kind, "name": "f"}
        if kind == "mcp":  # the registered server, a refused port, a host not allowed; every field bent
            tool.update(server_label=draw(st.sampled_from(["calc", "other", "bad label", 3])),
                        require_approval=draw(st.sampled_from(["never", "always", {"never": {"tool_names": ["add"]}},
                                                               7])))
            for key in draw(st.lists(st.sampled_from(["server_url", "allowed_tools", "authorization", "headers",
                                                      "require_approval", "server_label"]), max_size=2)):
                tool[key] = draw(st.one_of(_json, st.sampled_from(["http://127.0.0.1:1/mcp", "http://example.invalid/m",
                                                                  "http://[::1/mcp", ["add"]])))
        if draw(st.booleans()):
            tool["parameters"] = draw(st.one_of(_json, st.fixed_dictionaries({"type": st.just("object"),
                                                                             "properties": _json})))
        if kind == "namespace":
            tool["tools"] = draw(st.one_of(_json, st.lists(st.one_of(_json, st.just({"type": "function",
                                                                                     "name": "g"})))))
        tools.append(tool)
    return tools


@st.composite
def raw_bodies(draw: Any) -> tuple[bytes, str]:
    """(body bytes, content type): a valid request bent one way or several."""
    body: dict[str, Any] = {"model": MODEL, "input": draw(st.one_of(st.just("hi"), _items()))}
    if draw(st.booleans()):
        body["tools"] = draw(_tools())
    for key in draw(st.lists(st.sampled_from(_FIELDS), max_size=4)):
        body[key] = draw(_json)
    text = json.dumps(body)
    shape = draw(st.sampled_from(["json", "json", "json", "duplicate", "deep", "bad-utf8", "truncated", "empty",
                                  "not-object", "text-plain"]))
    if shape == "duplicate":
        text = text[:-1] + ', "model": "other", "input": 7}'
    elif shape == "deep":
        depth = draw(st.integers(100, 100_000))
        text = text[:-1] + ', "metadata": ' + "[" * depth + "]" * depth + "}"
    elif shape == "truncated":
        text = text[: draw(st.integers(0, max(0, len(text) - 1)))]
    elif shape == "empty":
        text = ""
    elif shape == "not-object":
        text = json.dumps(draw(_json))
    data = text.encode("utf-8", "surrogatepass")
    if shape == "bad-utf8":
        data = data[:-1] + b'\xff\xfe"}'
    return data, "text/plain" if shape == "text-plain" else "application/json"


_RAW_PATHS = ["/v1/responses", "/v1/responses/input_tokens", "/v1/responses/compact", "/v1/conversations"]


def run_raw(root: str, cases: int, counts: Counts) -> None:
    @given(body=raw_bodies(), path=st.sampled_from(_RAW_PATHS))
    @_settings(cases)
    def one(body: tuple[bytes, str], path: str) -> None:
        data, content_type = body
        response = httpx.post(root + path, content=data, headers={"content-type": content_type}, timeout=60)
        counts.check(f"POST {path} raw", response.status_code, response.headers.get("content-type", ""),
                     response.content)

    one()


_QUERY_VALUE = st.one_of(st.integers(-(2**80), 2**80).map(str), st.text(max_size=12),
                         st.sampled_from(["99999999999999999999", "-1", "1e9", "NaN", "\x00", "true", ""]))


def run_queries(root: str, cases: int, counts: Counts) -> None:
    """GET routes over a stored response, their query values of any size and type."""
    stored = httpx.post(f"{root}/v1/responses", json={"model": MODEL, "input": "hi", "stream": True}, timeout=60)
    response_id = stored.text.split('"id":"', 1)[1].split('"', 1)[0]

    @given(route=st.sampled_from(["", "/input_items"]), names=st.lists(st.sampled_from(
        ["stream", "starting_after", "after", "limit", "order", "include"]), min_size=1, max_size=3),
        values=st.lists(_QUERY_VALUE, min_size=3, max_size=3))
    @_settings(cases)
    def one(route: str, names: list[str], values: list[str]) -> None:
        response = httpx.get(f"{root}/v1/responses/{response_id}{route}", params=dict(zip(names, values)), timeout=60)
        counts.check(f"GET /v1/responses/{{id}}{route} query", response.status_code,
                     response.headers.get("content-type", ""), response.content)

    one()


_WS_FIELDS = ["stream_id", "generate", "background", "previous_response_id", "context_management", "stream",
              "prompt_cache_options", "input", "type"]
_ENDS = {"response.completed", "response.incomplete", "response.failed", "error", "response.steer.failed"}


@st.composite
def socket_frames(draw: Any) -> tuple[str, Any]:
    """(shape, frame): a client event bent one way; every shape gets one answer (an error, a failed steer, or one
    response's events), except `gone` (the client goes away mid-stream)."""
    shape = draw(st.sampled_from(["create", "create", "create", "steer", "unknown", "binary", "not-json",
                                  "not-object", "huge", "gone"]))
    if shape == "create":
        body, _ = draw(raw_bodies())
        try:
            event = json.loads(body)
        except RecursionError:  # nesting deeper than a JSON parser goes: sent as it is
            return "deep", body.decode("utf-8", "replace")
        except ValueError:
            return "not-json", body.decode("utf-8", "replace")
        if not isinstance(event, dict):
            return "not-object", json.dumps(event)
        event["type"] = "response.create"
        for key in draw(st.lists(st.sampled_from(_WS_FIELDS[:-2]), max_size=2)):
            event[key] = draw(_json)
        return shape, json.dumps(event)
    if shape == "steer":
        return shape, json.dumps({"type": "response.steer", "previous_response_id": draw(_json),
                                  "input": draw(st.one_of(_json, _items()))})
    if shape == "unknown":
        return shape, json.dumps({"type": draw(st.one_of(st.text(max_size=20), _json)), "event_id": draw(_json)})
    if shape == "binary":
        return shape, draw(st.binary(max_size=64))
    if shape == "not-json":
        return shape, draw(st.text(max_size=40).filter(lambda t: not _parses(t)))
    if shape == "not-object":
        return shape, json.dumps(draw(st.one_of(st.lists(_json, max_size=3), st.integers(), st.text(max_size=8))))
    if shape == "huge":
        return shape, json.dumps({"type": "response.create", "model": MODEL, "input": "x" * (5 * 1024 * 1024)})
    return shape, json.dumps({"type": "response.create", "model": MODEL, "input": "Write a long story."})


_EDGE_FRAMES = [
    ("huge", json.dumps({"type": "response.create", "model": MODEL, "input": "x" * (5 * 1024 * 1024)})),
    ("gone", json.dumps({"type": "response.create", "model": MODEL, "input": "Write a long story."})),
    ("binary", b"\x00\xff"), ("not-json", "{"), ("not-object", "[]"), ("unknown", '{"type": "session.update"}'),
    ("steer", '{"type": "response.steer", "previous_response_id": "resp_x", "input": "hi"}'),
    ("create", '{"type": "response.create", "model": "fuzz-model", "input": "hi", "generate": false}'),
    ("create", '{"type": "response.create", "model": "fuzz-model", "input": "hi", "background": true}'),
]


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def run_websocket(root: str, cases: int, counts: Counts) -> None:
    """Frames of every shape on fresh sockets: each is answered in the SDK's shapes (no 5xx status in an error, every
    response whole), and a create sent after it on its own lane is answered normally."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    @given(frame=socket_frames())
    @_settings(max(cases - len(_EDGE_FRAMES), 1))
    def generated(frame: tuple[str, Any]) -> None:
        one(frame)

    def one(frame: tuple[str, Any]) -> None:
        shape, data = frame
        with connect(root.replace("http://", "ws://") + "/v1/responses", max_size=None) as socket:
            socket.send(data)
            if shape == "gone":
                socket.recv(timeout=60)  # response.created: then the client goes away mid-stream
                counts.statuses[200] += 1
                return
            try:
                answer = _one_answer(socket, counts, f"ws {shape}")
            except ConnectionClosed as closed:
                counts.statuses[499] += 1
                if len(counts.violations) < 50:
                    code = closed.rcvd.code if closed.rcvd else None
                    counts.violations.append(f"ws {shape}: the server closed the socket ({code}): {str(data)[:200]}")
                return
            counts.statuses[answer] += 1
            socket.send(json.dumps({"type": "response.create", "model": MODEL, "input": "hi", "stream_id": "after"}))
            if _one_answer(socket, counts, "ws after") != 200:
                counts.violations.append(f"ws {shape}: a normal create after it failed: {str(data)[:200]}")

    for frame in _EDGE_FRAMES:  # each edge at least once, whatever hypothesis draws
        one(frame)
    generated()


def _one_answer(socket: Any, counts: Counts, label: str) -> int:
    """Read one answer (its events checked against the SDK's server events and the stream contract); its status."""
    from openai.types.responses import ResponsesServerEvent
    from pydantic import TypeAdapter, ValidationError

    adapter = TypeAdapter(ResponsesServerEvent)
    events: list[dict[str, Any]] = []
    while not events or events[-1]["type"] not in _ENDS:
        events.append(json.loads(socket.recv(timeout=60)))
        try:
            adapter.validate_python(events[-1])
        except ValidationError as exc:
            counts.violations.append(f"{label}: an event the SDK rejects ({exc.errors()[0]['msg']}): "
                                     f"{str(events[-1])[:300]}")
    last = events[-1]
    if last["type"] == "error":
        status = last.get("status", 0)
        if status >= 500 or not last["error"].get("code") or not last["error"].get("message"):
            counts.violations.append(f"{label}: a bad error event: {str(last)[:300]}")
        return status
    if last["type"] == "response.steer.failed":
        return 400
    try:
        validate_events([{k: v for k, v in e.items() if k != "stream_id"} for e in events])
    except (ContractViolation, ValueError) as exc:
        counts.violations.append(f"{label}: a broken response ({exc})")
    return 200


def healthy(root: str) -> bool:
    """A normal request still gets a normal answer."""
    response = httpx.post(f"{root}/v1/responses", json={"model": MODEL, "input": "hi"}, timeout=60)
    return response.status_code == 200 and response.json()["status"] == "completed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cases", type=int, default=10_000,
                        help="cases in all (about half from schemathesis, the rest raw)")
    args = parser.parse_args()
    counts = Counts()
    with fuzz_server() as root:
        import schemathesis

        operations = sum(1 for _ in schemathesis.openapi.from_url(f"{root}/openapi.json").get_all_operations())
        run_schemathesis(root, max(1, args.cases // 2 // (2 * operations)), counts)
        run_queries(root, max(1, args.cases // 20), counts)
        run_websocket(root, max(1, args.cases // 10), counts)
        run_raw(root, max(1, args.cases - counts.cases), counts)  # the rest, whatever schemathesis ran out of
        hostile = Findings()
        serve_costly(root, MODEL, hostile)
        serve_mutations(root, MODEL, hostile)
        serve_mutations(root, MODEL, hostile, every=4, websocket=True)
        serve_bad_uploads(root, hostile)
        still_healthy = healthy(root)
    with two_projects() as (root, key, theirs):
        serve_foreign_ids(root, MODEL, key, theirs, hostile)
    counts.violations += hostile.problems
    for status, number in hostile.statuses.items():
        counts.statuses[status] += number
    print(f"cases: {counts.cases}; 5xx: {counts.server_errors}; by status: {dict(sorted(counts.statuses.items()))}")
    print(f"invariants broken: {len(counts.violations)}; healthy afterwards: {still_healthy}")
    for skipped in counts.skipped:
        print(f"  not generated: {skipped[:200]}")
    for violation in counts.violations[:20]:
        print("  " + violation)
    sys.exit(0 if not counts.violations and still_healthy else 1)


if __name__ == "__main__":
    main()
