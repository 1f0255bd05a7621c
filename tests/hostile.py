"""Hostile input, served while a probe watches the server: structure-aware mutations of every input item type the
SDK defines (a wrong type in each field, and fields the type does not have), and inputs built to cost (schemas that
fan out and nest, PDF and image compression bombs, many parts, deep nesting, huge counts).

Each case must get no 5xx; while each costly input is served, `/health` must answer within HEALTH_BOUND and the
server process must grow by less than RSS_BOUND. `make fuzz` runs every case; the suite runs them too
(tests/test_hostile_inputs.py), the mutations sampled.
"""

from __future__ import annotations

import base64
import io
import json
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Iterator, Literal, Union, get_args, get_origin, get_type_hints

import httpx
import psutil

from tests.codex_shapes import codex_item_seeds

HEALTH_BOUND = 2.0  # seconds: what /health may take while a costly input is served (an idle answer takes ~ms)
RSS_BOUND = 400 * 2**20  # bytes the server process may grow by while one costly input is served
WRONG_VALUES: list[Any] = [None, 7, -1, 2**63, 1.5, True, "", "x", "\x00", [], [7], ["x"], [{}], {}, {"a": 1},
                           {"type": "input_text"}]
EXTRA_FIELDS = ["content", "output", "image_url", "file_data", "arguments", "extra"]  # fields a type may not have


@dataclass
class Findings:
    """What a hostile run saw: cases by status, and every broken bound."""

    statuses: dict[int, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def cases(self) -> int:
        return sum(self.statuses.values())

    def saw(self, label: str, status: int, body: str = "") -> None:
        self.statuses[status] = self.statuses.get(status, 0) + 1
        if status >= 500 and len(self.problems) < 50:
            self.problems.append(f"{label}: {status}: {body[:300]}")


class Probe:
    """While open: `/health` asked every 50 ms from a thread (its slowest answer kept), and the process's growth
    in resident memory (sampled with it)."""

    def __init__(self, root: str) -> None:
        self.url, self.slowest, self.grown = f"{root}/health", 0.0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._probe, daemon=True)
        self._process = psutil.Process()

    def __enter__(self) -> "Probe":
        self._start_rss = self._process.memory_info().rss
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _probe(self) -> None:
        with httpx.Client(timeout=120) as client:
            while not self._stop.wait(0.05):
                started = time.monotonic()
                client.get(self.url)
                self.slowest = max(self.slowest, time.monotonic() - started)
                self._sample()

    def _sample(self) -> None:
        self.grown = max(self.grown, self._process.memory_info().rss - self._start_rss)


# -- structure-aware mutations -------------------------------------------------------------------------------------

def _value_of(annotation: Any) -> Any:
    """A plausible value of a TypedDict field's type: a Literal's first value, an empty list, a short string..."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return args[0]
    if origin is Union:
        return _value_of(args[0])
    if getattr(origin, "__name__", "") == "Required" or str(origin).endswith("Required"):
        return _value_of(args[0])
    if annotation is str:
        return "x"
    if annotation is bool:
        return True
    if annotation in (int, float):
        return 1
    if origin in (list, tuple) or getattr(origin, "__name__", "") in ("Iterable", "Sequence", "List"):
        return []
    return {}


def sdk_item_seeds() -> list[dict[str, Any]]:
    """One item of each input item type the SDK defines, every field given a value of its type; and the items
    the server reads, as clients send them (content parts of each kind included)."""
    from openai.types.responses.response_input_item_param import ResponseInputItemParam

    seeds = []
    for kind in get_args(ResponseInputItemParam):
        hints = get_type_hints(kind, include_extras=False)
        seed = {name: _value_of(annotation) for name, annotation in hints.items()}
        seeds.append({**seed, "call_id": "c1"} if "call_id" in seed else seed)  # outputs answer the call before them
    png = base64.b64encode(bilevel_png(4)).decode()
    seeds += [
        {"role": "user", "content": [{"type": "input_text", "text": "hi"},
                                     {"type": "input_image", "image_url": f"data:image/png;base64,{png}"},
                                     {"type": "input_file", "filename": "a.txt", "file_data": "data:text/plain;base64,aGk="}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "ok"}]},
        *codex_item_seeds(),
    ]
    return seeds


def mutations(seeds: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(label, request body): each seed with one field (its own, or one it does not have) set to each wrong
    value; and each content part of a seed's list with one field set so."""
    for seed in seeds:
        kind = seed.get("type") or "message"
        for name in [*seed, *(extra for extra in EXTRA_FIELDS if extra not in seed)]:
            for wrong in WRONG_VALUES:
                item = {**seed, name: wrong}
                yield f"{kind}.{name}={json.dumps(wrong)[:20]}", _body([item] if kind != "function_call_output"
                                                                       else [_CALL, item])
        for index, part in enumerate(seed.get("content") if isinstance(seed.get("content"), list) else []):
            for name in [*part, *(extra for extra in EXTRA_FIELDS if extra not in part), "detail", "filename"]:
                for wrong in WRONG_VALUES:
                    content = [*seed["content"][:index], {**part, name: wrong}, *seed["content"][index + 1:]]
                    yield f"{kind}.content[{index}].{name}={json.dumps(wrong)[:20]}", _body([{**seed, "content": content}])


_CALL = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}


def _body(items: list[Any]) -> dict[str, Any]:
    return {"input": [*items, {"role": "user", "content": "go on"}]}


# -- costly inputs -------------------------------------------------------------------------------------------------

def bilevel_png(side: int, seed: int = 0) -> bytes:
    """A side x side PNG of one bit per pixel (a few KB that decode to 3 bytes a pixel); `seed` makes it another."""
    from PIL import Image

    image = Image.new("1", (side, side))
    for bit in range(min(seed.bit_length(), side * side)):  # the seed's bits, as the first pixels
        image.putpixel((bit % side, bit // side), (seed >> bit) & 1)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def pdf_file(objects: list[bytes]) -> bytes:
    """A PDF of these objects (numbered from 1, the first the catalog), with its cross-reference table."""
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def pdf_bomb(pages: int = 4, repeats: int = 40_000) -> bytes:
    """A few KB of PDF whose one FlateDecode content stream, shared by every page, inflates to 1.4 MiB of text
    operators: pypdf reads it once per page (seconds each)."""
    stream = zlib.compress(b"BT /F1 12 Tf 72 720 Td (word) Tj ET\n" * repeats, 9)
    kids = b" ".join(b"%d 0 R" % (3 + n) for n in range(pages))
    content = 3 + pages
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages)]
    objects += [b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
                b"/Resources << /Font << /F1 %d 0 R >> >> >>" % (content, content + 1)] * pages
    objects += [b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
                b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    return pdf_file(objects)


def fanned_out_schema(levels: int, fan: int) -> dict[str, Any]:
    """Each of `levels` $defs has `fan` properties referring to the next one: `fan ** levels` paths."""
    defs: dict[str, Any] = {f"d{levels}": {"type": "string"}}
    for level in reversed(range(levels)):
        defs[f"d{level}"] = {"type": "object", "additionalProperties": False, "required": [f"p{n}" for n in range(fan)],
                             "properties": {f"p{n}": {"$ref": f"#/$defs/d{level + 1}"} for n in range(fan)}}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


def nested_schema(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"], "additionalProperties": False}
    return schema


def _answer_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"input": "hi", "text": {"format": {"type": "json_schema", "name": "s", "schema": schema, "strict": True}}}


def _user(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"input": [{"role": "user", "content": list(parts)}]}


def _image(data: bytes) -> dict[str, Any]:
    return {"type": "input_image", "image_url": "data:image/png;base64," + base64.b64encode(data).decode()}


def _deep_schema_text(levels: int) -> str:
    """A body whose answer schema nests `levels` objects, written as text (too deep for json.dumps to write)."""
    opening = '{"type": "object", "required": ["a"], "properties": {"a": ' * levels
    schema = opening + '{"type": "string"}' + "}}" * levels
    return '{"input": "hi", "text": {"format": {"type": "json_schema", "name": "s", "schema": ' + schema + "}}}"


def costly_inputs() -> Iterator[tuple[str, dict[str, Any] | str]]:
    """(label, request body, or its JSON text) of inputs built to cost, each a few KB to a few MB."""
    yield "schema fan-out 8x6", _answer_format(fanned_out_schema(8, 6))
    yield "schema fan-out as tool parameters", {"tools": [{"type": "function", "name": "f", "strict": True,
                                                           "parameters": fanned_out_schema(10, 8)}],
                                                "tool_choice": "required", "input": "hi"}
    yield "schema nested 250 levels", _answer_format(nested_schema(250))
    yield "schema nested 450 levels (as deep as JSON is parsed)", _deep_schema_text(450)
    yield "schema at the bound: 4,999 properties", _answer_format({
        "type": "object", "additionalProperties": False, "required": [f"p{n}" for n in range(4_999)],
        "properties": {f"p{n}": {"type": "string"} for n in range(4_999)}})
    yield "schema of 20,000 properties", _answer_format({"type": "object", "properties": {
        f"p{n}": {"type": "string"} for n in range(20_000)}})
    yield "an empty anyOf", _answer_format({"type": "object", "properties": {"a": {"anyOf": []}}})
    yield "PDF compression bomb", _user({"type": "input_file", "filename": "bomb.pdf", "file_data":
                                        "data:application/pdf;base64," + base64.b64encode(pdf_bomb()).decode()})
    yield "PDF bomb in four parts", _user(*[{"type": "input_file", "filename": f"b{n}.pdf", "file_data":
                                            "data:application/pdf;base64," + base64.b64encode(pdf_bomb(
                                                repeats=40_000 + n)).decode()} for n in range(4)])
    yield "image bombs: 8 PNGs of 40M pixels", _user(*[_image(bilevel_png(6_300 - n, n)) for n in range(8)])
    yield "one image bomb under many spellings", _user(*[
        {"type": "input_image", "image_url": f"data:image/png;n={n};base64,"
                                             + base64.b64encode(bilevel_png(6_000)).decode()} for n in range(16)])
    yield "10,000 text parts", _user(*[{"type": "input_text", "text": "x"}] * 10_000)
    yield "2,000 distinct tiny images", _user(*[_image(bilevel_png(16, n)) for n in range(2_000)])
    yield "5,000 input items", {"input": [{"role": "user", "content": "x"}] * 5_000}
    yield "1,000 tools", {"tools": [{"type": "function", "name": f"f{n}", "parameters": {
        "type": "object", "properties": {"a": {"type": "string"}}}} for n in range(1_000)], "input": "hi"}
    yield "input nested 100,000 lists deep", '{"input": ' + "[" * 100_000 + "]" * 100_000 + "}"


def serve_costly(root: str, model: str, findings: Findings) -> None:
    """Each costly input over HTTP, under a probe: no 5xx, /health within its bound, the process within its growth."""
    with httpx.Client(timeout=300) as client:
        for label, body in costly_inputs():
            text = json.dumps(body) if isinstance(body, dict) else body
            with Probe(root) as probe:
                answer = client.post(f"{root}/v1/responses", content=f'{{"model": {json.dumps(model)}, {text[1:]}',
                                     headers={"content-type": "application/json"})
            findings.saw(label, answer.status_code, answer.text)
            if probe.slowest > HEALTH_BOUND:
                findings.problems.append(f"{label}: /health took {probe.slowest:.1f} s (bound {HEALTH_BOUND} s)")
            if probe.grown > RSS_BOUND:
                findings.problems.append(f"{label}: the server grew by {probe.grown / 2**20:.0f} MiB "
                                         f"(bound {RSS_BOUND / 2**20:.0f} MiB)")


def serve_mutations(root: str, model: str, findings: Findings, every: int = 1, websocket: bool = False) -> None:
    """Every `every`-th mutation, over HTTP (or as response.create events on a WebSocket): no 5xx."""
    cases = [case for index, case in enumerate(mutations(sdk_item_seeds())) if index % every == 0]
    if not websocket:
        with httpx.Client(timeout=60) as client:
            for label, body in cases:
                answer = client.post(f"{root}/v1/responses", json={"model": model, **body})
                findings.saw(label, answer.status_code, answer.text)
        return
    from websockets.sync.client import connect

    with connect(root.replace("http://", "ws://") + "/v1/responses", max_size=None) as socket:
        for label, body in cases:
            socket.send(json.dumps({"type": "response.create", "model": model, **body}))
            status, last = _answered(socket)
            findings.saw(f"ws {label}", status, json.dumps(last))


def _answered(socket: Any) -> tuple[int, dict[str, Any]]:
    """The status of one WebSocket answer: an error event's, else 200 once the response's terminal event came."""
    while True:
        event = json.loads(socket.recv(timeout=60))
        if event["type"] == "error":
            return int(event.get("status", 0)), event
        if event["type"] in ("response.completed", "response.failed", "response.incomplete"):
            return 200, event


# -- another project's ids, everywhere an id goes ------------------------------------------------------------------

MARKER = "beta-private-7f3c"  # in every object the other project makes: an answer holding it is a leak


def foreign_id_cases(ids: dict[str, str]) -> Iterator[tuple[str, str, str, dict[str, Any] | None]]:
    """(label, method, path, body) for every place a request names an object by id, naming the one in `ids`
    (`response`, `conversation`, `item`, `file`): the routes over stored objects, and the fields of a request body."""
    response, conversation, item, file = ids["response"], ids["conversation"], ids["item"], ids["file"]
    store, batch = ids["vector_store"], ids["batch"]
    yield "get vector store", "GET", f"/v1/vector_stores/{store}", None
    yield "update vector store", "POST", f"/v1/vector_stores/{store}", {"name": "mine now"}
    yield "search vector store", "POST", f"/v1/vector_stores/{store}/search", {"query": MARKER}
    yield "vector store files", "GET", f"/v1/vector_stores/{store}/files", None
    yield "add to vector store", "POST", f"/v1/vector_stores/{store}/files", {"file_id": file}
    yield "vector store file", "GET", f"/v1/vector_stores/{store}/files/{file}", None
    yield "vector store file attributes", "POST", f"/v1/vector_stores/{store}/files/{file}", {"attributes": {}}
    yield "vector store batch", "POST", f"/v1/vector_stores/{store}/file_batches", {"file_ids": [file]}
    yield "get batch", "GET", f"/v1/vector_stores/{store}/file_batches/{batch}", None
    yield "batch files", "GET", f"/v1/vector_stores/{store}/file_batches/{batch}/files", None
    yield "cancel batch", "POST", f"/v1/vector_stores/{store}/file_batches/{batch}/cancel", None
    yield "remove from vector store", "DELETE", f"/v1/vector_stores/{store}/files/{file}", None
    yield "delete vector store", "DELETE", f"/v1/vector_stores/{store}", None
    yield "file_search vector_store_ids", "POST", "/v1/responses", {"input": "find", "tools": [
        {"type": "file_search", "vector_store_ids": [store]}]}
    yield "new vector store file_ids", "POST", "/v1/vector_stores", {"file_ids": [file]}
    yield "get file", "GET", f"/v1/files/{file}", None
    yield "file content", "GET", f"/v1/files/{file}/content", None
    yield "delete file", "DELETE", f"/v1/files/{file}", None
    yield "input_file file_id", "POST", "/v1/responses", {"input": [{"role": "user", "content": [
        {"type": "input_file", "file_id": file}]}]}
    yield "get response", "GET", f"/v1/responses/{response}", None
    yield "list responses", "GET", "/v1/responses", None
    yield "list responses after", "GET", f"/v1/responses?after={response}", None
    yield "list responses continuing", "GET", f"/v1/responses?previous_response_id={response}", None
    yield "replay response", "GET", f"/v1/responses/{response}?stream=true&starting_after=0", None
    yield "input items", "GET", f"/v1/responses/{response}/input_items", None
    yield "input items after", "GET", f"/v1/responses/{response}/input_items?after={item}", None
    yield "cancel", "POST", f"/v1/responses/{response}/cancel", None
    yield "delete response", "DELETE", f"/v1/responses/{response}", None
    yield "get conversation", "GET", f"/v1/conversations/{conversation}", None
    yield "update conversation", "POST", f"/v1/conversations/{conversation}", {"metadata": {"k": "v"}}
    yield "conversation items", "GET", f"/v1/conversations/{conversation}/items", None
    yield "add items", "POST", f"/v1/conversations/{conversation}/items", {"items": [{"role": "user", "content": "x"}]}
    yield "get item", "GET", f"/v1/conversations/{conversation}/items/{item}", None
    yield "delete item", "DELETE", f"/v1/conversations/{conversation}/items/{item}", None
    yield "delete conversation", "DELETE", f"/v1/conversations/{conversation}", None
    for path in ("/v1/responses", "/v1/responses/input_tokens", "/v1/responses/compact"):
        yield f"{path} previous_response_id", "POST", path, {"input": "go on", "previous_response_id": response}
        yield f"{path} conversation", "POST", path, {"input": "go on", "conversation": conversation}
    yield "stream previous_response_id", "POST", "/v1/responses", {"input": "go on", "stream": True,
                                                                   "previous_response_id": response}
    yield "background previous_response_id", "POST", "/v1/responses", {"input": "go on", "background": True,
                                                                       "previous_response_id": response}
    for seed in sdk_item_seeds():  # every item type, its own id (and an approval's request id) naming theirs
        kind = seed.get("type") or "message"
        for name in ("id", "approval_request_id"):
            if name in seed or name == "id":
                value = item if name == "id" else response
                yield f"{kind}.{name}", "POST", "/v1/responses", _body([{**seed, name: value}]
                                                                     if kind != "function_call_output"
                                                                     else [_CALL, {**seed, name: value}])


def random_ids(ids: dict[str, str]) -> dict[str, str]:
    """Ids of the same kinds and shapes that name nothing."""
    unknown = {}
    for kind, value in ids.items():
        cut = max(value.find("_"), value.find("-")) + 1
        unknown[kind] = value[:cut] + "0" * len(value[cut:])
    return unknown


def bad_uploads() -> Iterator[tuple[str, dict[str, Any]]]:
    """(label, httpx request arguments) for uploads to /v1/files that are malformed or out of bounds."""
    yield "no body", {}
    yield "json body", {"json": {"file": "x", "purpose": "user_data"}}
    yield "no file", {"data": {"purpose": "user_data"}}
    yield "file as text", {"data": {"file": "x", "purpose": "user_data"}}
    yield "no purpose", {"files": {"file": ("a.txt", b"a")}}
    yield "long purpose", {"files": {"file": ("a.txt", b"a")}, "data": {"purpose": "p" * 100_000}}
    yield "two files", {"files": [("file", ("a.txt", b"a")), ("file", ("b.txt", b"b"))],
                        "data": {"purpose": "user_data"}}
    yield "many fields", {"files": {"file": ("a.txt", b"a")}, "data": {f"f{n}": "x" for n in range(50)}}
    for seconds in ("-1", "1e9", "x", "99999999999999999999"):
        yield f"expiry {seconds}", {"files": {"file": ("a.txt", b"a")}, "data": {
            "purpose": "user_data", "expires_after[anchor]": "created_at", "expires_after[seconds]": seconds}}
    yield "broken multipart", {"content": b"--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nx",
                               "headers": {"content-type": "multipart/form-data; boundary=b"}}
    yield "no boundary", {"content": b"x", "headers": {"content-type": "multipart/form-data"}}


DEEP = "<deep filter>"  # in a body: replaced by the filter's JSON text once the rest is encoded


def deep_filter(depth: int) -> str:
    """A filter `depth` compounds deep, as JSON text (Python's encoder would recurse too deep to write it)."""
    return '{"type": "or", "filters": [' * depth + '{"type": "eq", "key": "k", "value": 1}' + "]}" * depth


def bad_retrieval_requests(store: str, file: str) -> Iterator[tuple[str, str, str, Any]]:
    """(label, method, path, JSON body) of requests to the vector store routes, on `store` (the caller's own, with
    its uploaded `file`), that are malformed, out of bounds, or name what does not exist."""
    search = f"/v1/vector_stores/{store}/search"
    for depth in (17, 1000, 20_000):
        yield f"filter {depth} deep", "POST", search, ({"query": "q", "filters": DEEP}, deep_filter(depth))
        yield f"tool filter {depth} deep", "POST", "/v1/responses", ({"model": "m", "input": "q", "tools": [
            {"type": "file_search", "vector_store_ids": [store], "filters": DEEP}]}, deep_filter(depth))
    wide = {"type": "and", "filters": [{"type": "eq", "key": "k", "value": n} for n in range(10_000)]}
    yield "filter 10,000 wide", "POST", search, {"query": "q", "filters": wide}
    for label, value in (("no type", {"key": "k", "value": 1}), ("bad type", {"type": "like", "key": "k"}),
                         ("no key", {"type": "eq", "value": 1}), ("object value", {"type": "eq", "key": "k",
                                                                                   "value": {}}),
                         ("in scalar", {"type": "in", "key": "k", "value": 1}), ("gt bool", {"type": "gt", "key": "k",
                                                                                          "value": True}),
                         ("empty and", {"type": "and", "filters": []}), ("list", [1, 2]), ("nan", {
                             "type": "eq", "key": "k", "value": float("inf")})):
        yield f"filter {label}", "POST", search, {"query": "q", "filters": value}
    for label, query in (("empty", ""), ("blank list", []), ("number", 7), ("list of numbers", [1]),
                         ("nested", [["q"]]), ("null", None)):
        yield f"query {label}", "POST", search, {"query": query}
    for value in (0, 51, 10**12, "5", 2.5, True):
        yield f"max_num_results {value!r}", "POST", search, {"query": "q", "max_num_results": value}
    for label, options in (("ranker", {"ranker": "best"}), ("threshold", {"score_threshold": 1.5}),
                           ("threshold text", {"score_threshold": "x"}), ("weights zero", {"hybrid_search": {
                               "embedding_weight": 0, "text_weight": 0}}), ("negative weight", {"hybrid_search": {
                               "text_weight": -1}}), ("not an object", [1])):
        yield f"ranking {label}", "POST", search, {"query": "q", "ranking_options": options}
    files = f"/v1/vector_stores/{store}/files"
    for label, strategy in (("unknown", {"type": "semantic"}), ("static none", {"type": "static"}),
                            ("too small", {"type": "static", "static": {"max_chunk_size_tokens": 10,
                                                                        "chunk_overlap_tokens": 0}}),
                            ("overlap", {"type": "static", "static": {"max_chunk_size_tokens": 200,
                                                                      "chunk_overlap_tokens": 150}}),
                            ("huge", {"type": "static", "static": {"max_chunk_size_tokens": 10**9,
                                                                   "chunk_overlap_tokens": 0}})):
        yield f"chunking {label}", "POST", files, {"file_id": file, "chunking_strategy": strategy}
    for label, attributes in (("17 keys", {f"k{n}": n for n in range(17)}), ("long key", {"k" * 65: 1}),
                              ("long value", {"k": "v" * 513}), ("nested", {"k": {"a": 1}}), ("list", [1])):
        yield f"attributes {label}", "POST", files, {"file_id": file, "attributes": attributes}
    yield "no file_id", "POST", files, {}
    yield "unknown file", "POST", files, {"file_id": "file-000000000000000000000000000"}
    batches = f"/v1/vector_stores/{store}/file_batches"
    yield "batch of both", "POST", batches, {"file_ids": [file], "files": [{"file_id": file}]}
    yield "batch of neither", "POST", batches, {}
    yield "batch of 2,001", "POST", batches, {"file_ids": [file] * 2001}
    yield "batch file no id", "POST", batches, {"files": [{"attributes": {}}]}
    yield "unknown batch", "GET", f"{batches}/vsfb_0000000000000000000000", None
    yield "metadata 17 keys", "POST", "/v1/vector_stores", {"metadata": {f"k{n}": "v" for n in range(17)}}
    yield "expiry 0 days", "POST", "/v1/vector_stores", {"expires_after": {"anchor": "last_active_at", "days": 0}}
    yield "expiry anchor", "POST", "/v1/vector_stores", {"expires_after": {"anchor": "created_at", "days": 1}}
    yield "name a list", "POST", "/v1/vector_stores", {"name": ["x"]}
    yield "file_ids text", "POST", "/v1/vector_stores", {"file_ids": "file-x"}
    yield "unknown store", "GET", "/v1/vector_stores/vs_0000000000000000000000", None
    yield "unknown store search", "POST", "/v1/vector_stores/vs_0000000000000000000000/search", {"query": "q"}
    yield "list limit 0", "GET", "/v1/vector_stores?limit=0", None
    yield "files filter", "GET", f"{files}?filter=nearly", None
    yield "tool no stores", "POST", "/v1/responses", {"model": "m", "input": "q", "tools": [{"type": "file_search"}]}
    yield "tool store list of numbers", "POST", "/v1/responses", {"model": "m", "input": "q", "tools": [
        {"type": "file_search", "vector_store_ids": [1]}]}
    yield "two tools", "POST", "/v1/responses", {"model": "m", "input": "q", "tools": [
        {"type": "file_search", "vector_store_ids": [store]}, {"type": "file_search", "vector_store_ids": [store]}]}


def serve_bad_retrieval(root: str, model: str, findings: Findings, headers: dict[str, str] | None = None) -> None:
    """Every bad vector store request: a 4xx with an error body, never a 5xx."""
    with httpx.Client(base_url=root, timeout=60, headers=headers or {}) as client:
        file = client.post("/v1/files", files={"file": ("own.txt", b"own words")}, data={"purpose": "user_data"})
        store = client.post("/v1/vector_stores", json={"name": "own"})
        assert file.status_code == 200 and store.status_code == 200, (file.text, store.text)
        for label, method, path, body in bad_retrieval_requests(store.json()["id"], file.json()["id"]):
            body, deep = body if isinstance(body, tuple) else (body, None)
            if isinstance(body, dict) and body.get("model") == "m":
                body = {**body, "model": model}
            text = json.dumps(body, allow_nan=True) if body is not None else None
            if text is not None and deep is not None:
                text = text.replace(json.dumps(DEEP), deep)
            answer = client.request(method, path, content=text, headers={"content-type": "application/json"})
            findings.saw(f"retrieval {label}", answer.status_code, answer.text)
            error = answer.json().get("error") if answer.headers.get("content-type", "").startswith(
                "application/json") else None
            if not 400 <= answer.status_code < 500 or not isinstance(error, dict) or not error.get("message"):
                findings.problems.append(f"retrieval {label}: {answer.status_code}: {answer.text[:200]}")


def serve_bad_uploads(root: str, findings: Findings, headers: dict[str, str] | None = None) -> None:
    """Every bad upload: a 4xx, never a 5xx."""
    with httpx.Client(base_url=root, timeout=60, headers=headers or {}) as client:
        for label, arguments in bad_uploads():
            answer = client.post("/v1/files", **arguments)
            findings.saw(f"upload {label}", answer.status_code, answer.text)
            if not 400 <= answer.status_code < 500:
                findings.problems.append(f"upload {label}: {answer.status_code}: {answer.text[:200]}")


def serve_foreign_ids(root: str, model: str, key: str, theirs: dict[str, str], findings: Findings,
                      websocket: bool = True) -> None:
    """Every case of `foreign_id_cases` with `key` (one project's) naming `theirs` (another's), then naming ids that
    do not exist: no 5xx, nothing of theirs in any answer, and each answer what a random id gets (the same status;
    the same message, the id aside). A case that differs is a problem."""
    headers = {"Authorization": f"Bearer {key}"}
    unknown = random_ids(theirs)
    with httpx.Client(base_url=root, timeout=60, headers=headers) as client:
        for (label, method, path, body), (_, _, blank_path, blank_body) in zip(foreign_id_cases(theirs),
                                                                                 foreign_id_cases(unknown)):
            answers = []
            for where, what in ((path, body), (blank_path, blank_body)):
                payload = {"model": model, **what} if what is not None and where.startswith("/v1/responses") else what
                answer = client.request(method, where, json=payload)
                answers.append((answer.status_code, _without_ids(answer.text, theirs, unknown)))
            (status, text), (blank_status, blank_text) = answers
            findings.saw(f"foreign {label}", status, text)
            _compare(findings, label, status, text, blank_status, blank_text)
    if websocket:
        _foreign_over_a_websocket(root, model, headers, theirs, unknown, findings)


def _foreign_over_a_websocket(root: str, model: str, headers: dict[str, str], theirs: dict[str, str],
                              unknown: dict[str, str], findings: Findings) -> None:
    from websockets.sync.client import connect

    with connect(root.replace("http://", "ws://") + "/v1/responses", max_size=None,
                 additional_headers=headers) as socket:
        for field_name, kind in (("previous_response_id", "response"), ("conversation", "conversation")):
            answers = []
            for ids in (theirs, unknown):
                socket.send(json.dumps({"type": "response.create", "model": model, "input": "go on",
                                        field_name: ids[kind]}))
                status, last = _answered(socket)
                answers.append((status, _without_ids(json.dumps(last), theirs, unknown)))
            (status, text), (blank_status, blank_text) = answers
            findings.saw(f"ws foreign {field_name}", status, text)
            _compare(findings, f"ws {field_name}", status, text, blank_status, blank_text)


def _compare(findings: Findings, label: str, status: int, text: str, blank_status: int, blank_text: str) -> None:
    if MARKER in text:
        findings.problems.append(f"{label}: their object leaked: {text[:300]}")
    elif (status, _messages(text)) != (blank_status, _messages(blank_text)):
        findings.problems.append(f"{label}: {status} {text[:200]} where an unknown id gets {blank_status} "
                                 f"{blank_text[:200]}")


def _without_ids(text: str, *ids: dict[str, str]) -> str:
    for named in ids:
        for value in named.values():
            text = text.replace(value, "<id>")
    return text


def _messages(text: str) -> Any:
    """An answer's error (type, code, param, message), or its status and output for one that was served."""
    try:
        body = json.loads(text)
    except ValueError:
        return text.count("event:") > 0  # a stream: both streamed
    if not isinstance(body, dict):
        return body
    error = body.get("error")
    if isinstance(error, dict):
        return error.get("type"), error.get("code"), error.get("param"), error.get("message")
    response = body.get("response", body)
    return response.get("object"), response.get("status") if isinstance(response, dict) else None
