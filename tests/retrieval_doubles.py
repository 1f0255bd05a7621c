"""A test double for the embedding engine: each word a random unit direction (seeded by the word), a prompt the
normalized sum of its words' directions, so that texts sharing words are near. Deterministic; no model."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from server.retrieval.embeddings import EmbeddingModel

DIMENSIONS = 64
WORDS = re.compile(r"\w+")


@dataclass
class WordsEmbedder:
    """Embeds prompts of the embedding tokenizer's ids (decoded back to words); counts the prompts it embedded."""

    tokenizer: Any
    model: str = "words-test"
    window: int = 256
    dimensions: int = DIMENSIONS
    embedded: int = 0
    fail: Exception | None = None  # raised by every call while set
    calls: list[int] = field(default_factory=list)

    async def embed(self, prompts: list[list[int]]) -> list[list[float]]:
        if self.fail is not None:
            raise self.fail
        self.embedded += len(prompts)
        self.calls.append(len(prompts))
        return [text_vector(self.tokenizer.decode(prompt, skip_special_tokens=True)) for prompt in prompts]

    async def shutdown(self) -> None:
        pass


def text_vector(text: str) -> list[float]:
    total = np.zeros(DIMENSIONS)
    for word in WORDS.findall(text.lower()):
        seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "little")
        total += np.random.default_rng(seed).standard_normal(DIMENSIONS)
    norm = np.linalg.norm(total)
    return list(total / norm) if norm else [1.0] + [0.0] * (DIMENSIONS - 1)


def words_model(path: str) -> EmbeddingModel:
    """The double's model: named apart from any real one, reading the bundled embedding model's tokenizer."""
    return EmbeddingModel("words-test", path, 256, DIMENSIONS)
