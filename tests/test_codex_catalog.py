"""`GET /v1/models` as Codex asks it (`?client_version=`): its catalog, made from the engine; others get the list."""

from __future__ import annotations

import json
from typing import Any, Iterator

import httpx
import pytest

from server.codex_catalog import ServedModel, codex_model_info
from server.config import ServerConfig
from server.http.app import create_app
from server.runs.context import ServingContext
from streaming.ids import counting_ids
from tests.conftest import serve_in_thread
from tests.scripted_engine import ScriptedEngine
from tests.test_server import MODEL

CODEX_VERSION = {"client_version": "0.171.0"}
# ModelInfo's fields without a default in codex-rs (`protocol/src/openai_models.rs`): a catalog without one is
# refused whole ("failed to decode models response"), and Codex falls back to guessing.
REQUIRED = ("slug", "display_name", "supported_reasoning_levels", "shell_type", "visibility", "supported_in_api",
            "priority", "base_instructions", "supports_reasoning_summaries", "support_verbosity",
            "truncation_policy", "supports_parallel_tool_calls", "experimental_supported_tools")


def served(tokenizer: Any, **config: Any) -> Iterator[str]:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]], max_model_len=16000)
    context = ServingContext(config=ServerConfig(served_model_name=MODEL, **config), engine_factory=lambda: engine,
                             ids=counting_ids())
    with serve_in_thread(create_app(context)) as base_url:
        yield base_url


@pytest.fixture(scope="module")
def base_url(tokenizer: Any) -> Iterator[str]:
    yield from served(tokenizer, default_max_output_tokens=512)


def test_codex_gets_its_catalog_and_everyone_else_the_list(base_url: str) -> None:
    listed = httpx.get(f"{base_url}/models").json()
    assert listed["object"] == "list" and [model["id"] for model in listed["data"]] == [MODEL]
    [info] = httpx.get(f"{base_url}/models", params=CODEX_VERSION).json()["models"]
    assert [field for field in REQUIRED if field not in info] == []
    assert info["slug"] == MODEL and info["context_window"] == info["max_context_window"] == 16000
    assert info["effective_context_window_percent"] == 100  # the whole window is usable: no reserve hidden
    # Compacting at the limit leaves room for the answer (512, the server's cap), the compaction request and its summary.
    assert 8000 <= info["auto_compact_token_limit"] <= 16000 - 512 - 2048
    assert info["input_modalities"] == ["text"]  # a text-only model
    assert info["supported_reasoning_levels"] == [] and info["default_reasoning_level"] is None
    assert info["truncation_policy"] == {"mode": "tokens", "limit": 2000}


def test_reasoning_levels_follow_the_model_path() -> None:
    harmony = codex_model_info(ServedModel("gpt-oss", 131072, ("text",), ("low", "medium", "high")))
    assert [level["effort"] for level in harmony["supported_reasoning_levels"]] == ["low", "medium", "high"]
    assert harmony["default_reasoning_level"] == "medium" and harmony["supports_reasoning_summaries"]
    seeing = codex_model_info(ServedModel("vlm", 8192, ("text", "image"), ()))
    assert seeing["input_modalities"] == ["text", "image"]
    assert 4096 <= seeing["auto_compact_token_limit"] < 8192 - 1024  # an answer's share of the window is kept


def test_the_operator_overrides_any_field(tokenizer: Any, tmp_path: Any) -> None:
    from server.codex_catalog import read_overrides

    path = tmp_path / "codex.json"
    path.write_text(json.dumps({"auto_compact_token_limit": 9000, "base_instructions": "Be brief."}))
    for url in served(tokenizer, codex_model_info=read_overrides(path)):
        [info] = httpx.get(f"{url}/models", params=CODEX_VERSION).json()["models"]
        assert info["auto_compact_token_limit"] == 9000 and info["base_instructions"] == "Be brief."
        assert info["context_window"] == 16000
    path.write_text("[1]")
    with pytest.raises(ValueError):
        read_overrides(path)
