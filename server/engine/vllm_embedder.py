"""The embedding engine: an embedding model on vLLM's pooling runner, an AsyncLLM of its own beside the generating
model's (its engine core is a process of its own, as the generating engine's is)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from server.engine.vllm_engine import is_cpu_platform

# On the CPU build: float32 (as the generating model), no compilation, and a small share of memory for the KV cache
# (an encoder keeps none between steps; vLLM still reserves a share).
_CPU_SETTINGS: dict[str, Any] = {"dtype": "float32", "enforce_eager": True, "gpu_memory_utilization": 0.02}
# On a GPU: the share of its memory the embedding engine takes, beside the generating engine's (0.9 by default,
# taken first: vLLM checks that this much is free when the embedding engine starts).
_GPU_SETTINGS: dict[str, Any] = {"gpu_memory_utilization": 0.05}


class VllmEmbedder:
    """Embeds token-id prompts with vLLM's pooling runner: one vector each, normalized as the model's pooling
    config says (mean pooling and L2 normalization for sentence-transformers models)."""

    def __init__(self, llm: Any, name: str, window: int, dimensions: int) -> None:
        self._llm = llm
        self._ids = itertools.count()
        self.model, self.window, self.dimensions = name, window, dimensions

    @classmethod
    async def start(cls, model: str, name: str, window: int | None) -> "VllmEmbedder":
        """Start the engine (inside a running event loop) for the checkpoint at `model`, reading at most `window`
        tokens (None: the model's own limit); its dimensions are those of a first embedding."""
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        settings = _CPU_SETTINGS if is_cpu_platform() else _GPU_SETTINGS
        args = AsyncEngineArgs(model=model, runner="pooling", max_model_len=window, **settings)
        llm = AsyncLLM.from_engine_args(args)
        embedder = cls(llm, name, llm.model_config.max_model_len, 0)
        probe = llm.get_tokenizer()("probe")["input_ids"]
        embedder.dimensions = len((await embedder.embed([probe]))[0])
        return embedder

    async def embed(self, prompts: list[list[int]]) -> list[list[float]]:
        """One vector per prompt (each at most `window` tokens, special tokens included), all sent to the engine
        at once so that it batches them."""
        return list(await asyncio.gather(*(self._one(prompt) for prompt in prompts)))

    async def _one(self, prompt: list[int]) -> list[float]:
        from vllm import PoolingParams
        from vllm.inputs import TokensPrompt

        output = None
        async for output in self._llm.encode(TokensPrompt(prompt_token_ids=prompt), PoolingParams(task="embed"),
                                             f"embed-{next(self._ids)}"):
            pass
        assert output is not None, "vLLM ends every pooling request with an output"
        return output.outputs.data.tolist()

    async def shutdown(self) -> None:
        self._llm.shutdown()
