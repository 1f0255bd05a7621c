"""The tiny gpt-oss's tokenizer is o200k_harmony: the same ids as openai_harmony's own encoding, special tokens too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.paths.harmony import harmony_encoding
from tests.tiny_gpt_oss import CONFIG, GENERATION_CONFIG

SPECIALS = ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>", "<|return|>", "<|call|>",
            "<|endoftext|>", "<|startoftext|>", "<|reserved_200013|>", "<|reserved_201087|>"]
TEXTS = [
    "Hello, world!", "def f(x):\n    return x**2  # squared\r\n\n", "I'LL don't  WE'RE 12345678 3.14159",
    "Ünïcödé 日本語のテキスト 🎉🎉 Ωmega", "   leading\t\ttabs\n\n\n", '{"city":"Paris","n":[1,2,3]}',
    "<|start|>assistant<|channel|>final<|message|>Paris.<|return|>",
]


@pytest.fixture(scope="module")
def hf_tokenizer(tiny_gpt_oss: Path) -> Any:
    from server.engine.vllm_engine import load_tokenizer

    return load_tokenizer(str(tiny_gpt_oss))  # as vLLM loads it


def _same_ids(tokenizer: Any, text: str) -> None:
    assert tokenizer.encode(text, add_special_tokens=False) == harmony_encoding().encode(text, allowed_special="all")


@pytest.mark.parametrize("text", TEXTS + SPECIALS)
def test_the_tokenizer_gives_harmonys_ids(hf_tokenizer: Any, text: str) -> None:
    _same_ids(hf_tokenizer, text)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=30), st.sampled_from(SPECIALS)), max_size=6).map("".join))
def test_the_tokenizer_gives_harmonys_ids_on_any_text(hf_tokenizer: Any, text: str) -> None:
    _same_ids(hf_tokenizer, text)


def test_the_checkpoint_is_gpt_oss_with_every_feature(tiny_gpt_oss: Path, hf_tokenizer: Any) -> None:
    config = json.loads((tiny_gpt_oss / "config.json").read_text())
    assert config["model_type"] == "gpt_oss" and config["architectures"] == ["GptOssForCausalLM"]
    assert set(config["layer_types"]) == {"sliding_attention", "full_attention"}
    assert config["rope_parameters"]["rope_type"] == "yarn" and config["num_local_experts"] > 1
    assert config["vocab_size"] == CONFIG["vocab_size"] == len(hf_tokenizer)
    assert json.loads((tiny_gpt_oss / "generation_config.json").read_text())["eos_token_id"] == [200002, 199999, 200012]
    assert GENERATION_CONFIG["eos_token_id"][1] == hf_tokenizer.convert_tokens_to_ids("<|endoftext|>")
