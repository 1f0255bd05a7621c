"""Choosing the model path, once per served model."""

from __future__ import annotations

from server.model_settings import ModelSettings
from server.engine.interface import Engine
from server.paths.base import ModelPath


def choose_path(engine: Engine, config: ModelSettings) -> ModelPath:
    """Harmony when forced (`--harmony`) or when the model's config says gpt_oss; else the chat template."""
    if config.harmony or engine.model_type == "gpt_oss":
        from server.paths.harmony import HarmonyPath

        return HarmonyPath(config)
    from server.paths.chat_template import ChatTemplatePath

    return ChatTemplatePath(engine.tokenizer, config, engine.image_placeholder)
