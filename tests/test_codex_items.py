"""Every input item Codex sends (shapes read out of codex-rs, `protocol/src/models.rs`, ResponseItem) is accepted and
rendered for the model, or deliberately left out of the prompt: never a 400."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from server.config import ServerConfig
from server.http.app import create_app
from server.runs.context import ServingContext
from streaming.ids import counting_ids
from tests.conftest import serve_in_thread
from tests.codex_shapes import CODEX_ITEMS, USER
from tests.scripted_engine import ScriptedEngine, steps_from_tokens
from tests.test_server import MODEL, SEALER, Harness

SHELL = {"type": "function", "name": "shell", "description": "Runs a command.",
         "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}}}}
LEFT_OUT = ["gAAAA", "iVBORw0KGgo", "late_tool"]  # opaque or unusable: never shown to the model


@pytest.fixture(scope="module")
def harness(tokenizer: Any) -> Iterator[Harness]:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    config = ServerConfig(served_model_name=MODEL)  # as the bundled model is served
    context = ServingContext(config=config, engine_factory=lambda: engine,
                             ids=counting_ids(), sealer=SEALER)
    with serve_in_thread(create_app(context)) as base_url:
        yield Harness(engine, base_url)


@pytest.mark.parametrize("shape", sorted(CODEX_ITEMS))
def test_codex_items_are_accepted_and_rendered(harness: Harness, tokenizer: Any, shape: str) -> None:
    items, shown = CODEX_ITEMS[shape]
    harness.play(steps_from_tokens(tokenizer.encode("Done.") + [tokenizer.eos_token_id], cuts=[1]))
    response = harness.post(input=[USER, *items, {**USER, "content": [{"type": "input_text", "text": "Go on."}]}],
                            tools=[SHELL], store=False)  # Codex always offers its tools
    assert response.status_code == 200, response.text
    prompt = tokenizer.decode(harness.engine.requests[-1].prompt_token_ids)
    for words in shown:
        assert words in prompt, f"{words!r} is not in the prompt:\n{prompt}"
    for words in LEFT_OUT:
        assert words not in prompt, f"{words!r} reached the prompt"


VIEW_IMAGE = {"type": "function", "name": "view_image", "description": "View a local image file.",
              "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}


@pytest.mark.parametrize("modalities", [("text",), ("text", "image")])
def test_codex_image_tool_is_offered_only_to_a_model_that_sees(tokenizer: Any, modalities: tuple[str, ...]) -> None:
    """Codex offers view_image whatever its catalog says; a text-only model would call it, and the image it returns
    could not be shown: that model is not offered it (the response still echoes the tools as sent)."""
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[steps_from_tokens(
        tokenizer.encode("Done.") + [tokenizer.eos_token_id], cuts=[1])], input_modalities=modalities)
    context = ServingContext(config=ServerConfig(served_model_name=MODEL), engine_factory=lambda: engine)
    with serve_in_thread(create_app(context)) as base_url:
        response = Harness(engine, base_url).post(input=[USER], tools=[SHELL, VIEW_IMAGE], store=False)
    assert response.status_code == 200, response.text
    prompt = tokenizer.decode(engine.requests[-1].prompt_token_ids)
    assert SHELL["name"] in prompt and ("View a local image file." in prompt) == ("image" in modalities)
    assert [tool["name"] for tool in response.json()["tools"]] == [SHELL["name"], "view_image"]
