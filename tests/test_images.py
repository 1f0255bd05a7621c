"""Images for a model that sees: data URLs decoded and checked, placed in the prompt as the model's placeholder,
sent to the engine as its multimodal data, and counted in usage as the engine ran them; a clear 400 otherwise."""

from __future__ import annotations

import base64
import io
import struct
import zlib
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from openai import OpenAI
from PIL import Image

from server.config import ServerConfig
from server.records import open_records
from server.responses.records import RetentionPolicy
from server.http.app import create_app
from server.runs.context import ServingContext
from streaming.ids import counting_ids
from tests.conftest import serve_in_thread
from tests.scale_out_worker import engine_served
from tests.scripted_engine import ScriptedEngine, steps_from_tokens
from tests.sse import events_of, parse_frames
from conformance.contract import validate_events

MODEL = "vision-model"
PLACEHOLDER = "<image>"
EXPANDED = 64  # prompt tokens the scripted engine says each image took


def image_url(width: int = 8, height: int = 6, kind: str = "PNG", mime: str = "image/png") -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(buffer, format=kind)
    return f"data:{mime};base64," + base64.b64encode(buffer.getvalue()).decode()


def png_header(width: int, height: int) -> str:
    """A PNG claiming these dimensions, with no pixel data: only decoding it would find out."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", b"") + chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(png).decode()


class Vision:
    def __init__(self, engine: ScriptedEngine, base_url: str, tokenizer: Any) -> None:
        self.engine, self.base_url, self.tokenizer = engine, base_url, tokenizer

    def post(self, **body: Any) -> httpx.Response:
        return httpx.post(f"{self.base_url}/responses", json={"model": MODEL, **body}, timeout=30)

    def prompt(self) -> str:
        return self.tokenizer.decode(self.engine.requests[-1].prompt_token_ids)


def _image_host() -> Any:
    """An HTTP server with images to fetch (and a missing one, a redirect, one too large)."""
    from starlette.applications import Starlette
    from starlette.responses import RedirectResponse, Response
    from starlette.routing import Route

    png = base64.b64decode(image_url(9, 9).split(",")[1])
    return Starlette(routes=[
        Route("/red.png", lambda _: Response(png, media_type="image/png")),
        Route("/huge.png", lambda _: Response(png + b"\0" * (2 * 1024 * 1024), media_type="image/png")),
        Route("/moved.png", lambda _: RedirectResponse("/red.png")),
        Route("/text", lambda _: Response(b"hello", media_type="text/plain")),
    ])


@pytest.fixture(scope="module")
def images_at() -> Iterator[str]:
    with serve_in_thread(_image_host()) as base_url:
        yield base_url.removesuffix("/v1")


@contextmanager
def served_vision(tokenizer: Any, store: Path, how: str) -> Iterator[Vision]:
    """The app on a scripted engine that sees: in the server's process, or (`scale_out`) behind a scale-out worker
    (the images sent as vLLM's `content_parts` and decoded by the worker)."""
    answer = steps_from_tokens(tokenizer.encode("A red square.", add_special_tokens=False), cuts=[1])
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[answer], input_modalities=("text", "image"),
                            image_placeholder=PLACEHOLDER)
    config = ServerConfig(served_model_name=MODEL, allowed_media_domains=("127.0.0.1",))
    with engine_served(engine, how, MODEL) as start_engine:
        context = ServingContext(config=config, engine_factory=start_engine, ids=counting_ids(),
                                 records=open_records(f"sqlite:///{store}", RetentionPolicy(), Path("unused")))
        with serve_in_thread(create_app(context)) as base_url:
            yield Vision(engine, base_url, tokenizer)


@pytest.fixture(scope="module", params=["in_process", "scale_out"])
def vision(request: pytest.FixtureRequest, tokenizer: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Vision]:
    """This module's tests run on both engines."""
    with served_vision(tokenizer, tmp_path_factory.mktemp("store") / "responses.db", request.param) as served:
        yield served


def _user(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(parts)}


def test_an_image_reaches_the_engine_at_its_place_in_the_prompt(vision: Vision) -> None:
    body = vision.post(input=[_user({"type": "input_text", "text": "What is this?"},
                                    {"type": "input_image", "image_url": image_url(8, 6), "detail": "low"})])
    assert body.status_code == 200, body.text
    request = vision.engine.requests[-1]
    assert [image.size for image in request.images] == [(8, 6)]
    assert f"What is this?{PLACEHOLDER}" in vision.prompt()


def test_images_in_several_messages_and_a_tool_output_go_in_prompt_order(vision: Vision) -> None:
    body = vision.post(input=[
        _user({"type": "input_image", "image_url": image_url(3, 3)}, {"type": "input_text", "text": "and"},
              {"type": "input_image", "image_url": image_url(4, 4, "JPEG", "image/jpeg")}),
        {"type": "function_call", "call_id": "c1", "name": "view_image", "arguments": '{"path": "a.png"}'},
        {"type": "function_call_output", "call_id": "c1",
         "output": [{"type": "input_image", "image_url": image_url(5, 2, "WEBP", "image/webp")}]},
        _user({"type": "input_image", "image_url": image_url(2, 7, "GIF", "image/gif")})],
        tools=[{"type": "function", "name": "view_image", "parameters": {"type": "object", "properties": {}}}])
    assert body.status_code == 200, body.text
    assert [image.size for image in vision.engine.requests[-1].images] == [(3, 3), (4, 4), (5, 2), (2, 7)]
    assert vision.prompt().count(PLACEHOLDER) == 4


def test_detail_low_sends_the_model_at_most_512_pixels_a_side_and_the_rest_as_sent(vision: Vision) -> None:
    wide, small = image_url(2000, 1000), image_url(300, 200)
    body = vision.post(input=[_user({"type": "input_image", "image_url": wide, "detail": "low"},
                                    {"type": "input_image", "image_url": wide, "detail": "high"},
                                    {"type": "input_image", "image_url": wide},
                                    {"type": "input_image", "image_url": wide, "detail": "original"},
                                    {"type": "input_image", "image_url": small, "detail": "low"})])
    assert body.status_code == 200, body.text
    sizes = [image.size for image in vision.engine.requests[-1].images]
    assert sizes == [(512, 256), (2000, 1000), (2000, 1000), (2000, 1000), (300, 200)]
    again = vision.post(previous_response_id=body.json()["id"], input="And now?")
    assert again.status_code == 200, again.text
    assert [image.size for image in vision.engine.requests[-1].images] == sizes  # the history keeps each detail


def test_an_unknown_detail_is_a_400_naming_the_part(vision: Vision) -> None:
    response = vision.post(input=[_user({"type": "input_text", "text": "Look"},
                                        {"type": "input_image", "image_url": image_url(), "detail": "medium"})])
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "input[0].content[1].detail" and "detail" in error["message"], error


def test_usage_counts_the_prompt_as_the_engine_ran_it(vision: Vision, tokenizer: Any) -> None:
    vision.engine.scripts = [[replace(step, prompt_tokens=EXPANDED + 10 if index == 0 else None)
                              for index, step in enumerate(vision.engine.scripts[0])]]
    with httpx.stream("POST", f"{vision.base_url}/responses", timeout=30, json={
            "model": MODEL, "stream": True, "input": [_user({"type": "input_image", "image_url": image_url()})]}) as r:
        final = validate_events(events_of(parse_frames(r.iter_lines())))
    assert final.usage is not None and final.usage.input_tokens == EXPANDED + 10


def test_an_image_stored_with_a_response_goes_to_the_engine_again_in_the_next_turn(vision: Vision) -> None:
    first = vision.post(input=[_user({"type": "input_image", "image_url": image_url(6, 6)})]).json()
    again = vision.post(previous_response_id=first["id"], input="And now?")
    assert again.status_code == 200, again.text
    assert [image.size for image in vision.engine.requests[-1].images] == [(6, 6)]
    items = httpx.get(f"{vision.base_url}/responses/{first['id']}/input_items", timeout=30,
                      params={"include": IMAGE_URLS}).json()["data"]
    assert items[0]["content"][0]["image_url"] == image_url(6, 6)  # kept as sent, not re-encoded
    assert items[0]["content"][0]["detail"] == "auto"  # listed with its default, as the SDK's type requires one


IMAGE_URLS = "message.input_image.image_url"


def test_read_routes_show_an_input_images_url_only_when_included(vision: Vision) -> None:
    """As OpenAI's: an input image's URL (here a data URL of the whole image) is listed only under `include`; the
    SDK's readers pass it as a query parameter. An unknown include value is a 400 naming it."""
    client = OpenAI(base_url=vision.base_url, api_key="unused", max_retries=0)
    conversation = client.conversations.create(items=[_user({"type": "input_image", "image_url": image_url(5, 5)})])
    first = vision.post(input=[_user({"type": "input_image", "image_url": image_url(6, 6)})],
                        conversation=conversation.id).json()
    readers = {"input items": lambda **kw: client.responses.input_items.list(first["id"], **kw).data,
               "conversation items": lambda **kw: client.conversations.items.list(conversation.id, **kw).data}
    for name, read in readers.items():
        images = [part for item in read() if item.type == "message" for part in item.content
                  if part.type == "input_image"]
        assert images and all(part.image_url is None for part in images), (name, images)
        included = [part for item in read(include=[IMAGE_URLS]) if item.type == "message" for part in item.content
                    if part.type == "input_image"]
        assert included and all(part.image_url.startswith("data:image/png") for part in included), name
    item_id = client.conversations.items.list(conversation.id, order="asc").data[0].id
    item = client.conversations.items.retrieve(item_id, conversation_id=conversation.id)
    assert item.content[0].image_url is None  # type: ignore[union-attr]
    item = client.conversations.items.retrieve(item_id, conversation_id=conversation.id, include=[IMAGE_URLS])
    assert item.content[0].image_url == image_url(5, 5)  # type: ignore[union-attr]
    bad = httpx.get(f"{vision.base_url}/responses/{first['id']}/input_items", params={"include": "nonsense"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "include", bad.text


def test_an_image_cut_short_is_decoded_as_far_as_it_goes(vision: Vision) -> None:
    whole = base64.b64decode(image_url(32, 32).split(",")[1])
    cut = "data:image/png;base64," + base64.b64encode(whole[: len(whole) - 20]).decode()
    assert vision.post(input=[_user({"type": "input_image", "image_url": cut})]).status_code == 200
    assert [image.size for image in vision.engine.requests[-1].images] == [(32, 32)]


BAD_IMAGES = [
    ("not base64", "data:image/png;base64,@@@@", "not valid base64"),
    ("a type that is no image", "data:text/plain;base64,aGVsbG8=", "Unsupported image type"),
    ("bytes of another type", image_url(kind="JPEG", mime="image/png"), "not the PNG"),
    ("garbage bytes", "data:image/png;base64," + base64.b64encode(b"not an image").decode(), "could not be decoded"),
    ("more pixels than the server takes", png_header(7_000, 7_000), "pixels"),
    ("more pixels than PIL would open", png_header(100_000, 100_000), "pixels"),
    ("a URL to fetch", "https://example.com/cat.png", "does not fetch"),
    ("no URL", None, "needs an image_url"),
]


@pytest.mark.parametrize(("url", "message"), [case[1:] for case in BAD_IMAGES], ids=[case[0] for case in BAD_IMAGES])
def test_a_bad_image_is_a_400_naming_its_part(vision: Vision, url: Any, message: str) -> None:
    part = {"type": "input_image", **({"image_url": url} if url is not None else {})}
    response = vision.post(input=[_user({"type": "input_text", "text": "look"}, part)])
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "input[0].content[1]" and message in error["message"]


def test_an_image_url_is_fetched_from_an_allowed_domain(vision: Vision, images_at: str) -> None:
    url = f"{images_at}/red.png"
    response = vision.post(input=[_user({"type": "input_image", "image_url": url})])
    assert response.status_code == 200, response.text
    assert [image.size for image in vision.engine.requests[-1].images] == [(9, 9)]
    again = vision.post(previous_response_id=response.json()["id"], input="Again?")
    assert again.status_code == 200 and [i.size for i in vision.engine.requests[-1].images] == [(9, 9)]


@pytest.mark.parametrize(("where", "message"), [
    ("http://localhost:{port}/red.png", "does not fetch images from 'localhost'"),
    ("{root}/missing.png", "HTTP 404"),
    ("{root}/moved.png", "HTTP 307"),
    ("{root}/huge.png", "larger than"),
    ("{root}/text", "could not be decoded"),
    ("http://127.0.0.1:1/unreachable.png", "could not be fetched"),
], ids=["another-domain", "missing", "redirect", "too-large", "not-an-image", "unreachable"])
def test_an_image_url_that_cannot_be_used_is_a_400_naming_its_part(vision: Vision, images_at: str, where: str,
                                                                   message: str, monkeypatch: Any) -> None:
    monkeypatch.setattr("server.attachments.media_fetch.MAX_IMAGE_BYTES", 1024 * 1024)
    url = where.format(root=images_at, port=images_at.rsplit(":", 1)[1])
    response = vision.post(input=[_user({"type": "input_text", "text": "look"}, {"type": "input_image", "image_url": url})])
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "input[0].content[1]" and message in error["message"]


def test_an_image_survives_compaction_as_sent(vision: Vision) -> None:
    """The compaction keeps the user's image part inside its sealed item; the next turn sends it to the engine."""
    picture = image_url(7, 5)
    compacted = httpx.post(f"{vision.base_url}/responses/compact", timeout=30, json={"model": MODEL, "input": [
        _user({"type": "input_text", "text": "Keep this picture in mind."}, {"type": "input_image", "image_url": picture})]})
    assert compacted.status_code == 200, compacted.text
    assert [image.size for image in vision.engine.requests[-1].images] == [(7, 5)]  # the summary saw it
    follow_up = vision.post(input=[*compacted.json()["output"], {"role": "user", "content": "What was it?"}])
    assert follow_up.status_code == 200, follow_up.text
    assert [image.size for image in vision.engine.requests[-1].images] == [(7, 5)]


def test_an_image_in_a_conversation_goes_to_the_engine_in_later_turns(vision: Vision) -> None:
    conversation = httpx.post(f"{vision.base_url}/conversations", json={}, timeout=30).json()["id"]
    first = vision.post(conversation=conversation, input=[_user({"type": "input_image", "image_url": image_url(4, 9)})])
    assert first.status_code == 200, first.text
    later = vision.post(conversation=conversation, input="And what colour was it?")
    assert later.status_code == 200, later.text
    assert [image.size for image in vision.engine.requests[-1].images] == [(4, 9)]
    items = httpx.get(f"{vision.base_url}/conversations/{conversation}/items?order=asc&include={IMAGE_URLS}", timeout=30).json()["data"]
    assert items[0]["content"][0]["image_url"] == image_url(4, 9)  # stored as sent


def test_an_uploaded_image_is_sent_by_file_id_through_the_sdk(vision: Vision) -> None:
    """An input_image by `file_id`: the project's uploaded file, read through the Files API's owner check, reaches
    the engine as an image sent inline would; a file that is not there is a 400 naming the part's file_id."""
    import openai

    client = openai.OpenAI(base_url=vision.base_url, api_key="none", max_retries=0)
    png = base64.b64decode(image_url(10, 7).split(",")[1])
    uploaded = client.files.create(file=("red.png", png), purpose="vision")
    response = client.responses.create(model=MODEL, input=[_user(
        {"type": "input_text", "text": "What is this?"}, {"type": "input_image", "file_id": uploaded.id,
                                                          "detail": "auto"})])
    assert response.status == "completed" and [image.size for image in vision.engine.requests[-1].images] == [(10, 7)]
    assert f"What is this?{PLACEHOLDER}" in vision.prompt()
    missing = vision.post(input=[_user({"type": "input_image", "file_id": "file-" + "0" * 24})])
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "input[0].content[0].file_id"
    assert missing.json()["error"]["code"] == "file_not_found"
