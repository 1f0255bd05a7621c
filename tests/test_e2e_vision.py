"""End to end with a model that sees: a tiny Idefics3 (SmolVLM) built in the test from the bundled model, on the
real CPU engine (in the server's process, and behind the server as a fleet's scale-out worker), with the real openai
SDK. Its answers about images are noise; every part of the pipeline is real:
the data URL decoded, the model's placeholder in the prompt, vLLM's processor expanding it, the image tokens counted."""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from PIL import Image

from server.engine.recording import read_recordings
from tests.servers import RunningServer
from tests.tiny_vlm import IMAGE_SEQ_LEN, build_tiny_vlm
from tests.vllm_workers import VllmWorker
from conformance.contract import validate_events

pytestmark = pytest.mark.e2e
CAP = 48
# The Open Responses compliance suite's image-input shape: a 32x32 red heart icon.
HEART = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAACAAAAAgCAIAAAD8GO2jAAABmklEQVR42tyWAaTyUBzFew/eG4AHz+MBSAHKBiJ"
         "RGFKwIgQQJKLUIioBIhCAiCAAEizAQIAECaASqFFJq84nudjnaqvuPnxzgP9xfrq5938csPn7PwHTKSoViCIEAYEAMhmoKsU2mUCWEQqB5x"
         "EMIp/HaGQG2G6RSuH9HQ7H34rFrtPbdz4jl6PbwmEsl3QA1mt4vcRKk8dz9eg6IpF7tt9fzGY0gCgafFRFo5Blc5vLhf3eCOj1yNhM5GRMV"
         "K0aATxPZoz09YXjkQDmczJgquGQAPp9WwCNBgG027YACgUC6HRsAZRKBDAY2AJoNv/ZnwzA6WScznG3p4UAymXGAEkyXrTFAh8fLAGqagQA"
         "yfrNfMvqoXZy6PTXRGhTkK9ZsOY3r1+nzgAAAAAA//8DAGJWRHpoM6pxAAAAAElFTkSuQmCC")


def png(width: int, height: int) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (20, 120, 220)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


@pytest.fixture(scope="module")
def tiny_vlm(bundled_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_vlm(bundled_model, tmp_path_factory.mktemp("tiny-vlm"))


@pytest.fixture(scope="module", params=["embedded", "fleet"])
def vlm(request: pytest.FixtureRequest, tiny_vlm: Path, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[RunningServer]:
    """The server with the model in its process, and (`fleet`) in front of a vLLM scale-out worker of it: the images
    go to the worker beside the prompt's token ids, and its processor expands them."""
    logs = tmp_path_factory.mktemp(f"logs-{request.param}")
    flags = ["--record-engine-output", str(logs / "engine.jsonl")]
    worker = None
    if request.param == "embedded":
        flags += ["--model", str(tiny_vlm), "--served-model-name", "tiny-vlm", "--max-model-len", "2048",
                  "--default-max-output-tokens", str(CAP)]
    else:
        worker = VllmWorker(tiny_vlm, "tiny-vlm", logs / "worker.log", 2048).start().wait_healthy()
        fleet = logs / "fleet.toml"
        fleet.write_text(f'[[models]]\nname = "tiny-vlm"\npath = "{tiny_vlm}"\nengines = ["{worker.url}"]\n'
                         f"default_max_output_tokens = {CAP}\n")
        flags += ["--fleet", str(fleet)]
    running = RunningServer(flags, logs / "vision.log")
    yield running
    running.stop()
    if worker is not None:
        worker.stop()


def _ask(server: RunningServer, *parts: dict[str, Any], **body: Any) -> Any:
    return server.client.responses.create(model="tiny-vlm", input=[{"role": "user", "content": list(parts)}],
                                          temperature=0, **body)


def test_the_model_says_it_sees(vlm: RunningServer) -> None:
    model = httpx.get(f"{vlm.base_url}/models").json()["data"][0]
    assert model["input_modalities"] == ["text", "image"]


def test_an_image_by_data_url_is_answered_and_its_tokens_counted(vlm: RunningServer) -> None:
    question = {"type": "input_text", "text": "What is in this picture?"}
    text_only = _ask(vlm, question)
    with_image = _ask(vlm, question, {"type": "input_image", "image_url": png(40, 30), "detail": "auto"})
    assert with_image.status in ("completed", "incomplete") and with_image.output
    assert text_only.usage is not None and with_image.usage is not None
    grown = with_image.usage.input_tokens - text_only.usage.input_tokens
    assert grown > IMAGE_SEQ_LEN, grown  # the image's tokens, and the tokens around them, counted
    recorded = read_recordings(vlm.log.parent / "engine.jsonl")[-1]
    assert recorded.images == [[40, 30]]  # the image reached the engine
    for include, shown in (([], None), (["message.input_image.image_url"], png(40, 30))):  # as OpenAI lists it
        listed = vlm.client.responses.input_items.list(with_image.id, include=include)  # type: ignore[arg-type]
        assert listed.data[0].content[1].image_url == shown  # type: ignore[union-attr]


def test_an_image_streams_too(vlm: RunningServer) -> None:
    events = vlm.raw_stream(model="tiny-vlm", input=[{"role": "user", "content": [
        {"type": "input_text", "text": "Describe it."}, {"type": "input_image", "image_url": png(16, 16)}]}],
        temperature=0)
    final = validate_events(events)
    assert final.status in ("completed", "incomplete") and final.usage is not None


def test_the_open_responses_image_input_shape(vlm: RunningServer) -> None:
    response = vlm.client.responses.create(model="tiny-vlm", input=[{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "What do you see in this image? Answer in one sentence."},
        {"type": "input_image", "image_url": HEART}]}])  # type: ignore[list-item, typeddict-item]
    assert response.output
    assert response.status == "completed" or response.incomplete_details is not None


def test_an_image_in_a_tool_output_continues_the_tool_loop(vlm: RunningServer) -> None:
    view_image = {"type": "function", "name": "view_image", "description": "Look at an image file",
                  "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}
    response = vlm.client.responses.create(model="tiny-vlm", tools=[view_image], temperature=0, input=[  # type: ignore[list-item]
        {"role": "user", "content": "What is in shot.png?"},
        {"type": "function_call", "call_id": "call_1", "name": "view_image", "arguments": '{"path": "shot.png"}'},
        {"type": "function_call_output", "call_id": "call_1",
         "output": [{"type": "input_image", "image_url": png(24, 24)}]}])
    assert response.output and response.usage is not None
    assert read_recordings(vlm.log.parent / "engine.jsonl")[-1].images == [[24, 24]]


def test_the_input_token_count_counts_each_image_as_the_engine_runs_it(vlm: RunningServer) -> None:
    """`POST /v1/responses/input_tokens` gives the `usage.input_tokens` the same request reports, images and all."""
    content = [{"type": "input_text", "text": "Compare these."}, {"type": "input_image", "image_url": png(40, 30)},
               {"type": "input_image", "image_url": HEART}]
    body = {"model": "tiny-vlm", "input": [{"role": "user", "content": content}]}
    counted = vlm.client.responses.input_tokens.count(**body)  # type: ignore[arg-type]
    answered = vlm.client.responses.create(**body, temperature=0)  # type: ignore[arg-type]
    assert answered.usage is not None and counted.input_tokens == answered.usage.input_tokens
    again = vlm.client.responses.create(**body, temperature=0)  # type: ignore[arg-type]
    assert again.usage is not None and again.usage.input_tokens == counted.input_tokens  # counting left no trace


def test_detail_low_sends_the_engine_at_most_512_pixels_a_side(vlm: RunningServer) -> None:
    wide = png(1200, 600)
    response = _ask(vlm, {"type": "input_text", "text": "What is it?"},
                    {"type": "input_image", "image_url": wide, "detail": "low"},
                    {"type": "input_image", "image_url": wide, "detail": "high"})
    assert response.output and response.usage is not None
    assert read_recordings(vlm.log.parent / "engine.jsonl")[-1].images == [[512, 256], [1200, 600]]


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_that_fits_only_before_its_images_are_expanded_is_a_400(vlm: RunningServer, stream: bool) -> None:
    """The context is checked against the prompt as the engine runs it: each image placeholder grows into the
    image's tokens, so 60 images of a few tokens each push a prompt that fits as text past the context."""
    filler = "word " * 1700
    images = [{"type": "input_image", "image_url": png(8 + n, 8)} for n in range(60)]
    content = [{"type": "input_text", "text": filler}, *images]
    body = {"model": "tiny-vlm", "input": [{"role": "user", "content": content}], "max_output_tokens": 16,
            "stream": stream}
    counted = vlm.client.responses.input_tokens.count(model="tiny-vlm", input=body["input"])  # type: ignore[arg-type]
    assert counted.input_tokens > 2048  # as the engine would run it
    reply = httpx.post(f"{vlm.base_url}/responses", json=body, timeout=300)
    assert reply.status_code == 400, reply.text[:2000]
    error = reply.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "input"
    assert str(counted.input_tokens) in error["message"]
    assert _ask(vlm, {"type": "input_text", "text": "Still there?"}).status in ("completed", "incomplete")
