"""What the served model reads, worked out from vLLM's model config and multimodal registry, and reported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from server.config import ServerConfig
from server.engine.vllm_engine import input_modalities
from server.http.app import create_app
from server.runs.context import ServingContext
from tests.conftest import serve_in_thread
from tests.scripted_engine import ScriptedEngine
from tests.tiny_vlm import build_tiny_vlm_config


def _model_config(path: Path) -> Any:
    from vllm.config import ModelConfig

    return ModelConfig(model=str(path), tokenizer=str(path))


def test_a_text_model_reads_text_and_a_vision_model_images(bundled_model: Path, tmp_path: Path) -> None:
    assert input_modalities(_model_config(bundled_model)) == ("text",)
    vision = build_tiny_vlm_config(bundled_model, tmp_path / "tiny-vlm")
    assert input_modalities(_model_config(vision)) == ("text", "image")


@pytest.mark.parametrize("modalities", [("text",), ("text", "image")])
def test_models_lists_what_the_model_reads(tokenizer: Any, modalities: tuple[str, ...]) -> None:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]], input_modalities=modalities)
    context = ServingContext(config=ServerConfig(served_model_name="m"), engine_factory=lambda: engine)
    with serve_in_thread(create_app(context)) as base_url:
        model = httpx.get(f"{base_url}/models").json()["data"][0]
    assert model["input_modalities"] == list(modalities)
