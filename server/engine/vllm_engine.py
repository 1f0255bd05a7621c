"""The engine adapter around vLLM's AsyncLLM, with vLLM's argument parser, tokenizer loading and multi-API-server launch.

vLLM is imported here, in `server/engine/vllm_stats.py` (its Prometheus stat logger) and in
`server/paths/vllm_tool_parser.py` (vLLM's tool parsers), nowhere else.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import time
from functools import lru_cache
from typing import Any, AsyncIterator, Callable

from server.engine.interface import (SAMPLING_DEFAULT_KEYS, TAKEN, EngineRequest, EngineStep, Prefilled, StepLogprob,
                                     engine_finish, prefill_by_generating)

logger = logging.getLogger(__name__)

# Settings that work on the CPU build (measured on 2-core x86 machines), applied unless the user sets them.
CPU_DEFAULTS: dict[str, Any] = {
    "dtype": "float32",  # bfloat16 produced garbage on these CPUs
    "enforce_eager": True,  # engine start 22 s instead of ~3 min of compilation
    "gpu_memory_utilization": 0.3,  # on CPU: the share of RAM for the KV cache
}
_PLATFORM_DEPENDENT = tuple(CPU_DEFAULTS)


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """vLLM's own engine flags (`--model`, `--dtype`, `--max-model-len`, ...), as `vllm serve` has them."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    AsyncEngineArgs.add_cli_args(parser)
    # None marks "not given", so platform defaults can fill in what the user left out.
    parser.set_defaults(model=None, **{name: None for name in _PLATFORM_DEPENDENT})


def new_argument_parser(**kwargs: Any) -> argparse.ArgumentParser:
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return FlexibleArgumentParser(**kwargs)


def is_cpu_platform() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def engine_args(args: argparse.Namespace) -> Any:
    """AsyncEngineArgs from parsed flags, with platform defaults where the user gave none."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    defaults = CPU_DEFAULTS if is_cpu_platform() else {
        name: getattr(AsyncEngineArgs, name) for name in _PLATFORM_DEPENDENT
    }
    for name in _PLATFORM_DEPENDENT:
        if getattr(args, name) is None:
            setattr(args, name, defaults[name])
    return AsyncEngineArgs.from_cli_args(args)


# xgrammar 0.2.8's cache of token masks across grammars hashes a grammar's `token` element without its token id: a
# second structural tag whose rule differs from a cached one only in a token id gets the cached rule's mask (a call's
# `<|constrain|>` masked as `<|message|>`), and vLLM ends the request ("grammar rejected tokens"). Harmony's grammars
# are made of such tokens; the chat-template path's are made of strings. tests/test_constraints.py shows the
# collision on xgrammar alone; bench/grammar_cache.py measures what turning the cache off costs.
GRAMMAR_CACHE_VARIABLE = "VLLM_XGRAMMAR_CACHE_MB"


def prepare_grammar_cache(model_config: Any, harmony: bool) -> None:
    """Before the engine core starts: the cache off for a model on the harmony path (gpt-oss, or `--harmony`)."""
    if harmony or model_config.hf_config.model_type == "gpt_oss":
        avoid_grammar_cache_collisions()


def avoid_grammar_cache_collisions() -> None:
    """Turn vLLM's xgrammar cache off (before the engine core starts), unless the user set its size."""
    if GRAMMAR_CACHE_VARIABLE not in os.environ:
        logger.info("gpt-oss: xgrammar's grammar cache is off (%s=0), see avoid_grammar_cache_collisions",
                    GRAMMAR_CACHE_VARIABLE)
        os.environ[GRAMMAR_CACHE_VARIABLE] = "0"


def load_tokenizer(name: str, **kwargs: Any) -> Any:
    """The model's tokenizer, loaded the way vLLM loads it."""
    from vllm.tokenizers import get_tokenizer

    return get_tokenizer(name, **kwargs)


class VllmEngine:
    """Streams token-id steps from AsyncLLM; closing the iterator aborts the engine request."""

    def __init__(self, llm: Any) -> None:
        self._llm = llm
        self.tokenizer = llm.get_tokenizer()
        self.max_model_len: int = llm.model_config.max_model_len
        self.vocab_size: int = llm.model_config.get_vocab_size()
        self.model_type: str | None = getattr(llm.model_config.hf_config, "model_type", None)
        # What `vllm serve --generation-config auto` applies to requests that leave these out.
        self.sampling_defaults = _sampling_defaults(llm.model_config.get_diff_sampling_param())
        self.input_modalities = input_modalities(llm.model_config)
        self.image_placeholder = image_placeholder(llm.model_config) if "image" in self.input_modalities else None

    @classmethod
    def start(cls, args: Any, harmony: bool = False) -> "VllmEngine":
        """Start AsyncLLM (inside a running event loop) from AsyncEngineArgs, with `vllm serve`'s defaults for a
        server (on a large GPU, 8192 tokens a step where an embedded engine gets 2048); `harmony`: the harmony path
        is forced (`--harmony`)."""
        from vllm.usage.usage_lib import UsageContext
        from vllm.v1.engine.async_llm import AsyncLLM

        from server.engine.vllm_stats import ChangesOnlyStatLogger

        prepare_grammar_cache(args.create_model_config(), harmony)
        uncache_settings()
        return cls.started(AsyncLLM.from_engine_args(args, usage_context=UsageContext.OPENAI_API_SERVER,
                                                     stat_loggers=[ChangesOnlyStatLogger]))

    @classmethod
    def connect(cls, args: argparse.Namespace, client_config: dict[str, Any]) -> "VllmEngine":
        """Join an engine core started by `run_api_processes`, as API process `client_index` of `client_count`
        (inside a running event loop)."""
        from vllm.v1.engine.async_llm import AsyncLLM

        from server.engine.vllm_stats import ChangesOnlyStatLogger

        addresses = {key: value for key, value in client_config.items()
                     if key not in ("client_count", "client_index", "api_server_loads")}
        count, index = client_config["client_count"], client_config["client_index"]
        uncache_settings()
        arguments, vllm_config = _server_config(args, count, index)
        return cls.started(AsyncLLM.from_vllm_config(vllm_config=vllm_config, client_addresses=addresses,
                                                     client_count=count, client_index=index,
                                                     stat_loggers=[ChangesOnlyStatLogger],
                                                     disable_log_stats=arguments.disable_log_stats))

    @classmethod
    def started(cls, llm: Any) -> "VllmEngine":
        """The engine over a started AsyncLLM. vLLM's settings from the environment are read once from here on (as
        its engine core does, `enable_envs_cache`): its client would read two with `os.getenv` at every step."""
        from vllm.envs import enable_envs_cache

        enable_envs_cache()
        return cls(llm)

    async def generate(self, request: EngineRequest) -> AsyncIterator[EngineStep]:
        params = _sampling_params(request, self.vocab_size)
        first = True
        yield TAKEN  # in process: taken at once
        traced = request.trace_headers if self._llm.observability_config.otlp_traces_endpoint else None  # (vLLM's
        async for output in self._llm.generate(tokens_prompt(request), params, request.request_id,  # own spans, when its
                                               priority=request.priority, trace_headers=traced):  # flag turns them on)
            completion = output.outputs[0]
            finish = completion.finish_reason
            yield EngineStep(
                token_ids=list(completion.token_ids),
                finish_reason=engine_finish(finish),
                cached_tokens=(output.num_cached_tokens or 0) if first else 0,
                logprobs=_step_logprobs(completion.token_ids, completion.logprobs, request.sampling.logprobs or 0),
                prompt_tokens=len(output.prompt_token_ids) if first and output.prompt_token_ids else None,
            )
            first = False

    async def prefill(self, request: EngineRequest) -> Prefilled:
        """vLLM samples at least one token, which is dropped."""
        return await prefill_by_generating(self.generate, request)

    async def prompt_length(self, request: EngineRequest) -> int:
        """Images are expanded by vLLM's processor for the model, as for generation, but past its cache: that cache
        stands for what the engine core holds, and this prompt never reaches the engine core."""
        if not request.images:
            return len(request.prompt_token_ids)
        processed = await self._llm.renderer.process_for_engine_async(tokens_prompt(request), time.time(),
                                                                      skip_mm_cache=True)
        return len(processed["prompt_token_ids"])

    async def shutdown(self) -> None:
        self._llm.shutdown()


def uncache_settings() -> None:
    """vLLM's settings read from the environment as it is now, for an engine about to start (in a process that
    started one before, they were cached: see `VllmEngine.started`)."""
    from vllm.envs import disable_envs_cache

    disable_envs_cache()


def tokens_prompt(request: EngineRequest) -> Any:
    """vLLM's TokensPrompt for the request: its token ids, and its images for vLLM's processor for the model (which
    expands each placeholder into the image's tokens)."""
    from vllm.inputs import TokensPrompt

    prompt = TokensPrompt(prompt_token_ids=request.prompt_token_ids)
    if request.cache_salt is not None:
        prompt["cache_salt"] = request.cache_salt
    if request.images:
        prompt["multi_modal_data"] = {"image": list(request.images)}
    return prompt


def model_sampling_defaults(model: str) -> dict[str, float]:
    """The sampling defaults in a model's generation_config.json, read as vLLM reads them (for a replay)."""
    from vllm.transformers_utils.config import try_get_generation_config

    config = try_get_generation_config(model, trust_remote_code=False)
    return _sampling_defaults(config.to_diff_dict() if config is not None else {})


def input_modalities(model_config: Any) -> tuple[str, ...]:
    """What the model reads, from vLLM's model config and the multimodal registry's processor for its class."""
    if not model_config.is_multimodal_model:
        return ("text",)
    from vllm.multimodal import MULTIMODAL_REGISTRY

    limits = MULTIMODAL_REGISTRY.get_processing_info(model_config).supported_mm_limits
    return ("text", *sorted(modality for modality in limits if modality in ("image", "audio")))


def image_placeholder(model_config: Any) -> str | None:
    """The model's own text for one image in a prompt, as vLLM's chat rendering asks the model class for it."""
    from vllm.model_executor.models.registry import ModelRegistry

    model_class, _ = ModelRegistry.resolve_model_cls(model_config.architectures, model_config)
    return model_class.get_placeholder_str("image", 1)


def _sampling_defaults(values: dict[str, Any]) -> dict[str, float]:
    return {key: values[key] for key in SAMPLING_DEFAULT_KEYS if values.get(key) is not None}


def _sampling_params(request: EngineRequest, vocab_size: int) -> Any:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    sampling = request.sampling
    options: dict[str, Any] = {
        "max_tokens": sampling.max_tokens,
        "output_kind": RequestOutputKind.FINAL_ONLY if request.whole_output else RequestOutputKind.DELTA,
        "detokenize": False,  # we decode incrementally ourselves, identically for live and replayed output
        "skip_clone": True,  # made for this request alone: vLLM need not deep-copy it
        "logprobs": sampling.logprobs,
    }
    for key in (*SAMPLING_DEFAULT_KEYS, "presence_penalty", "frequency_penalty", "seed"):
        if getattr(sampling, key) is not None:
            options[key] = getattr(sampling, key)
    if sampling.stop_token_ids:
        options["stop_token_ids"] = list(sampling.stop_token_ids)
    if sampling.banned_token_ids:
        options["logit_bias"] = _banned(sampling.banned_token_ids, vocab_size)
    if sampling.thinking_token_budget is not None:
        options["thinking_token_budget"] = sampling.thinking_token_budget
    if sampling.structural_tag is not None:
        from vllm.sampling_params import StructuredOutputsParams

        options["structured_outputs"] = StructuredOutputsParams(structural_tag=sampling.structural_tag)
    return SamplingParams(**options)


@lru_cache(maxsize=8)
def _banned(token_ids: tuple[int, ...], vocab_size: int) -> dict[int, float]:
    """vLLM's logit_bias that bans `token_ids` (its lowest bias, -100, is past any logit a model writes)."""
    return {token_id: -100.0 for token_id in token_ids if token_id < vocab_size}


def _step_logprobs(token_ids: Any, logprobs: Any, top_k: int) -> list[StepLogprob]:
    """vLLM gives the sampled token plus the top k by rank (1-based); the sampled one may be outside the k."""
    if not logprobs:
        return []
    steps = []
    for token_id, candidates in zip(token_ids, logprobs):
        chosen = candidates[token_id].logprob
        ranked = sorted((entry.rank, other, entry.logprob) for other, entry in candidates.items()
                        if entry.rank is not None and 0 < entry.rank <= top_k)
        top = tuple((other, logprob) for _, other, logprob in ranked)
        steps.append(StepLogprob(token_id=token_id, logprob=chosen, top=top))
    return steps


def server_socket(host: str, port: int) -> socket.socket:
    """The listening socket several API processes share (bound here, before the engine starts, as vLLM does)."""
    from vllm.entrypoints.launchers.launcher import create_server_socket

    return create_server_socket((host, port), reuse_port=True)


def share_prometheus_directory() -> None:
    """Metrics from every API process, summed at `/metrics` (prometheus_client's multiprocess mode)."""
    from vllm.v1.metrics.prometheus import setup_multiprocess_prometheus

    setup_multiprocess_prometheus()


def run_api_processes(args: argparse.Namespace, count: int, sock: socket.socket, listen_address: str,
                      target: Callable[..., None], shutdown_timeout: float) -> None:
    """vLLM's own multi-API-server launch, as `vllm serve --api-server-count`: one engine core process, and `count`
    processes running `target(listen_address, sock, args, client_config)`, each with its client addresses to the
    core; returns when they have exited (SystemExit or KeyboardInterrupt stops them, each given `shutdown_timeout`)."""
    from vllm.v1.engine.utils import bind_engine_zmq_listeners, launch_core_engines
    from vllm.v1.executor import Executor
    from vllm.v1.utils import APIServerProcessManager, wait_for_completion_or_failure

    arguments, vllm_config = _server_config(args, count, -1)
    prepare_grammar_cache(vllm_config.model_config, getattr(args, "harmony", False))
    listeners = bind_engine_zmq_listeners(vllm_config, count)
    with launch_core_engines(vllm_config, Executor.get_class(vllm_config), not arguments.disable_log_stats,
                             listeners.addresses) as launch:
        coordinator = launch.coordinator
        manager = APIServerProcessManager(
            listen_address=listen_address, sock=sock, args=args, num_servers=count,
            input_listeners=listeners.inputs, output_listeners=listeners.outputs, target_server_fn=target,
            stats_update_address=coordinator.get_stats_publish_address() if coordinator else None,
            tensor_queue=launch.tensor_queue)
        launch.watched_frontend_processes = manager.processes
    try:
        wait_for_completion_or_failure(api_server_manager=manager, engine_manager=launch.engine_manager,
                                       coordinator=coordinator)
    finally:
        manager.shutdown(timeout=shutdown_timeout)
        if launch.engine_manager:
            launch.engine_manager.shutdown(timeout=vllm_config.shutdown_timeout)
        if coordinator:
            coordinator.shutdown(timeout=vllm_config.shutdown_timeout)


def _server_config(args: argparse.Namespace, count: int, rank: int) -> tuple[Any, Any]:
    """The engine arguments and vLLM config of API process `rank` of `count` (-1: the parent that launches the core),
    with `vllm serve`'s defaults for a server."""
    from vllm.usage.usage_lib import UsageContext

    arguments = engine_args(args)
    arguments._api_process_count, arguments._api_process_rank = count, rank
    return arguments, arguments.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
