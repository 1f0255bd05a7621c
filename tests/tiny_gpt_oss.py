"""A tiny gpt-oss checkpoint built locally: `GptOssForCausalLM` with random weights and small dimensions (sinks,
sliding and full attention layers, a few experts, yarn rope, as the released models have), and the real
o200k_harmony tokenizer written as `tokenizer.json` from `openai_harmony`'s own encoding. Nothing is downloaded;
vLLM reads it as it reads gpt-oss-20b. Built once and kept in the cache, as the bundled model's conversion is."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

TINY_GPT_OSS_NAME = "tiny-gpt-oss"
_VERSION = "1"  # bumped whenever the checkpoint's content changes, so cached ones are rebuilt
# o200k's split pattern (tiktoken's o200k_base, which o200k_harmony extends with its special tokens).
O200K_PATTERN = "|".join([
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])
# The released models' sizes where they shape behaviour (vocabulary, rope, window); small ones elsewhere. vLLM's CPU
# attention kernel needs a head size of 32, 64, 80 or more.
CONFIG = {"num_hidden_layers": 2, "num_local_experts": 4, "num_experts_per_tok": 2, "hidden_size": 64,
          "intermediate_size": 64, "head_dim": 64, "num_attention_heads": 2, "num_key_value_heads": 1,
          "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"], "vocab_size": 201088,
          "max_position_embeddings": 131072, "eos_token_id": 200002, "pad_token_id": 199999,
          "bos_token_id": 199998}
# gpt-oss-20b's generation_config.json: three end ids (<|return|>, <|endoftext|>, <|call|>).
GENERATION_CONFIG = {"bos_token_id": 199998, "eos_token_id": [200002, 199999, 200012], "pad_token_id": 199999,
                     "do_sample": True}


def ensure_tiny_gpt_oss(target: Path) -> Path:
    """The checkpoint directory, built on first use (seconds) and reused while its version holds."""
    from server.bundled_model import built_once

    return built_once(target, _VERSION, build_tiny_gpt_oss)


def build_tiny_gpt_oss(out: Path) -> Path:
    """Config, random weights (seeded: the same every time), generation config and tokenizer in `out`."""
    import torch
    from transformers import GptOssConfig, GptOssForCausalLM

    torch.manual_seed(0)
    config = GptOssConfig(**CONFIG)
    config.architectures = ["GptOssForCausalLM"]
    model = GptOssForCausalLM(config).to(torch.float32)
    model.save_pretrained(out)
    (out / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2) + "\n")
    write_harmony_tokenizer(out)
    return out


def write_harmony_tokenizer(out: Path) -> None:
    """`tokenizer.json` and its config from o200k_harmony: every ordinary token's bytes at its rank (tiktoken's
    file format, converted by transformers' TikTokenConverter), then every special token at its own id."""
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    encoding = _harmony_encoding()
    # The encoding names one id past the model's vocabulary (<|reserved_201088|>), which no logit can produce.
    specials = {text: token_id for text, token_id in special_token_ids(encoding).items()
                if token_id < CONFIG["vocab_size"]}
    first_special = min(specials.values())
    assert sorted(specials.values()) == list(range(first_special, first_special + len(specials))), "ids have gaps"
    ranks = out / "o200k_harmony.tiktoken"
    ranks.write_text("".join(f"{base64.b64encode(encoding._inner.decode_bytes([rank])).decode()} {rank}\n"
                             for rank in range(first_special)))
    in_order = sorted(specials, key=specials.__getitem__)
    converted = TikTokenConverter(vocab_file=str(ranks), pattern=O200K_PATTERN, extra_special_tokens=in_order)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=converted.converted(), bos_token="<|startoftext|>",
                                        eos_token="<|return|>", pad_token="<|endoftext|>")
    tokenizer.model_max_length = CONFIG["max_position_embeddings"]
    tokenizer.save_pretrained(out)
    ranks.unlink()


def special_token_ids(encoding: Any) -> dict[str, int]:
    """Every special token of the encoding, with its id."""
    return {text: encoding.encode(text, allowed_special="all")[0] for text in encoding.special_tokens_set}


def _harmony_encoding() -> Any:
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding

    return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
