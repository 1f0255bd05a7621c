"""What Codex reads of the served model (`GET /v1/models?client_version=...`, its catalog's `ModelInfo` schema in
codex-rs `protocol/src/openai_models.rs`): the window, when to compact, what it reads and how its tools are called."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from server.history.compaction import SUMMARY_MAX_TOKENS

# Codex's compaction request is the history, then its summary prompt: room for that prompt and for the summary.
COMPACTION_ROOM = 2048
# Without a cap of the server's, Codex's answers get this share of the window (at most 8,192 tokens).
ANSWER_SHARE = 8
ANSWER_CAP = 8192
# A tool output Codex keeps in its history, at most, in tokens: this share of the window (at least 1,000).
TOOL_OUTPUT_SHARE = 8
BASE_INSTRUCTIONS = (
    "You are a coding agent working in the user's workspace. Use the tools to look before you act: run shell "
    "commands to read files and run programs, and change files with apply_patch. Keep each command's output "
    "short (head, tail, grep). When the task is done, or you cannot go on, say so in a brief final answer.")
_EFFORT_WORDS = {"low": "Fast responses with light reasoning", "medium": "Balanced reasoning for everyday tasks",
                 "high": "Deeper reasoning for hard problems"}


@dataclass(frozen=True)
class ServedModel:
    """The facts of the served model the catalog is made from."""

    name: str
    context_window: int
    input_modalities: tuple[str, ...]
    reasoning_efforts: tuple[str, ...]
    default_max_output_tokens: int | None = None


def codex_model_info(model: ServedModel, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The model's entry in Codex's catalog; `overrides` (the operator's) replace any field."""
    window = model.context_window
    answer = model.default_max_output_tokens or min(window // ANSWER_SHARE, ANSWER_CAP)
    efforts = [{"effort": effort, "description": _EFFORT_WORDS.get(effort, effort)}
               for effort in model.reasoning_efforts]
    info = {
        "slug": model.name, "display_name": model.name, "description": "Served by responses-server on vLLM.",
        "default_reasoning_level": "medium" if "medium" in model.reasoning_efforts else None,
        "supported_reasoning_levels": efforts, "supports_reasoning_summaries": bool(efforts),
        "shell_type": "shell_command", "apply_patch_tool_type": "freeform", "supports_parallel_tool_calls": True,
        "visibility": "list", "supported_in_api": True, "priority": 0, "upgrade": None,
        "base_instructions": BASE_INSTRUCTIONS, "support_verbosity": False, "default_verbosity": None,
        "truncation_policy": {"mode": "tokens", "limit": max(window // TOOL_OUTPUT_SHARE, 1000)},
        # The window as this server accepts it, all of it usable: Codex's own arithmetic then holds.
        "context_window": window, "max_context_window": window, "effective_context_window_percent": 100,
        # Compact while the answer and the compaction request itself still fit.
        "auto_compact_token_limit": max(window - answer - COMPACTION_ROOM - SUMMARY_MAX_TOKENS, window // 2),
        "experimental_supported_tools": [], "input_modalities": list(model.input_modalities),
    }
    return {**info, **(overrides or {})}


def catalog(models: list[tuple[ServedModel, dict[str, Any]]]) -> dict[str, Any]:
    """Codex's `ModelsResponse`: every served model, each with the operator's fields for its entry."""
    return {"models": [codex_model_info(model, overrides) for model, overrides in models]}


def read_overrides(path: Path) -> dict[str, Any]:
    """The operator's fields for the catalog entry (`--codex-model-info FILE`, a JSON object); ValueError if not."""
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object of ModelInfo fields")
    return data
