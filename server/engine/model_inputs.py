"""What a fleet model reads, and its prompts as its workers will run them: vLLM's input processing for the model, made
on the gateway as vLLM's own GPU-less render server makes it (a model config and a renderer; no engine, no device).

A model that sees gets its images sent to the worker as the data URLs of vLLM's `content_parts` (the worker's processor
expands each placeholder, as the embedded engine's does); the gateway's renderer expands them too, to know a prompt's
length before it is sent. Both run off the event loop, one image at a time.
"""

from __future__ import annotations

import asyncio
import base64
import io
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from server.engine.interface import EngineRequest


@dataclass
class ModelInputs:
    """A fleet model's input modalities, its text for one image, and (for a model that sees) vLLM's renderer."""

    input_modalities: tuple[str, ...] = ("text",)
    image_placeholder: str | None = None
    renderer: Any = None  # vLLM's renderer for the model: None for a model that reads text only
    _encoder: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1, "image-urls"), repr=False)

    @classmethod
    def for_model(cls, path: str, max_model_len: int | None = None) -> "ModelInputs":
        """Read from the model at `path` by vLLM, as its render server reads it (quantization set aside: nothing
        runs the weights here)."""
        from vllm.engine.arg_utils import EngineArgs

        from server.engine.vllm_engine import image_placeholder, input_modalities

        model_config = EngineArgs(model=path, max_model_len=max_model_len).create_model_config()
        modalities = input_modalities(model_config)
        if "image" not in modalities:
            return cls(modalities)
        from vllm.config import VllmConfig
        from vllm.renderers import renderer_from_config

        model_config.quantization = None
        renderer = renderer_from_config(VllmConfig(model_config=model_config))
        return cls(modalities, image_placeholder(model_config), renderer)

    async def prompt_length(self, request: EngineRequest) -> int:
        """The prompt's length with its images expanded by vLLM's processor for the model (in the renderer's own
        worker thread, past its cache: this prompt is not the one the worker runs)."""
        if not request.images or self.renderer is None:
            return len(request.prompt_token_ids)
        from server.engine.vllm_engine import tokens_prompt

        processed = await self.renderer.process_for_engine_async(tokens_prompt(request), time.time(),
                                                                 skip_mm_cache=True)
        return len(processed["prompt_token_ids"])

    async def content_parts(self, request: EngineRequest) -> list[dict[str, str]]:
        """The request's images as the worker takes them beside its token ids: vLLM's `content_parts`, in the
        prompt's order, each a PNG data URL (encoded in this model's one encoding thread, each distinct image once:
        one sent several times was decoded once)."""
        loop = asyncio.get_running_loop()
        urls: dict[int, str] = {}
        for image in request.images:
            if id(image) not in urls:
                urls[id(image)] = await loop.run_in_executor(self._encoder, png_data_url, image)
        return [{"type": "image_url", "url": urls[id(image)]} for image in request.images]

    def close(self) -> None:
        self._encoder.shutdown(wait=False)
        if self.renderer is not None:
            self.renderer.shutdown()


def png_data_url(image: Any) -> str:
    """A PIL image as a PNG data URL: lossless (the worker sees the pixels the embedded engine would), quickly
    compressed (it crosses a local network once)."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=1)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
