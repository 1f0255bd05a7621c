"""What a gateway asks a worker before it sends it a turn, free of I/O: a generator that yields each request it needs
(method, path, JSON body) and is sent back each answer (status, body), so the start (blocking, before serving) and
the health checks (in the event loop) ask the same questions and draw the same conclusions.

A worker is refused, naming the fix, when it wants a key the gateway was not given (or refuses the one it was), serves
another model, has no scale-out API (`--enable-scale-out`), or tokenizes a fixed probe otherwise than the gateway's
`path` (the gateway's token ids would mean something else there).
"""

from __future__ import annotations

import json
import logging
from typing import Any, Generator

from server.engine.scale_out import ABORT_PATH
from server.engine.workers import Worker

logger = logging.getLogger(__name__)
# Text that tells tokenizers apart: accents, CJK, digits, code, JSON and a symbol past the basic plane
TOKENIZER_PROBE = 'Hello, world! 123 naïve café 東京 {"a": [1, 2.5]}\n\tdef f(x): return x ** 2  # ✓ 🦙'
Ask = tuple[str, str, Any]  # method, path, JSON body (None: none)
Answer = tuple[int, bytes]  # status, body
Checks = Generator[Ask, Answer, None]


class WorkerMismatch(ValueError):
    """A worker that cannot serve the model as the fleet file says: the gateway refuses to start, or holds it out."""


def worker_checks(worker: Worker, model: str, keyed: bool, probe_ids: list[int]) -> Checks:
    """The questions for `worker` of `model` (`keyed`: the gateway sends it a key); WorkerMismatch naming the fix,
    ValueError for an answer that is not vLLM's. Notes the worker's window."""
    status, body = yield "GET", "/v1/models", None
    if status == 401:
        raise WorkerMismatch(f"engine worker {worker.url} refused the key the fleet file names for '{model}'" if keyed
                             else f"engine worker {worker.url} wants a key (it runs with --api-key): name it with "
                             f"`api_key_env` or `api_key_file` in the fleet file's model '{model}'")
    _check_served(worker, json.loads(body), model)
    status, _ = yield "POST", ABORT_PATH, {"request_ids": []}
    if status in (404, 405):
        raise WorkerMismatch(f"engine worker {worker.url} has no scale-out API ({ABORT_PATH} answered {status}): "
                             f"start it with --enable-scale-out")
    status, body = yield "POST", "/tokenize", {"model": model, "prompt": TOKENIZER_PROBE, "add_special_tokens": False}
    if status != 200:  # a worker with no tokenizer (--tokens-only) cannot be asked
        logger.info("engine worker %s did not tokenize the probe (%d): its tokenizer is not checked", worker.url,
                    status)
        return
    tokens = json.loads(body).get("tokens")
    if tokens != probe_ids:
        raise WorkerMismatch(f"engine worker {worker.url} tokenizes otherwise than the gateway's `path` for '{model}' "
                             f"({len(tokens or [])} tokens against {len(probe_ids)} for the same text): point `path` "
                             f"at the model the worker serves, with the same tokenizer")


def _check_served(worker: Worker, models: Any, model: str) -> None:
    """The worker's /v1/models answer names `model` (WorkerMismatch naming both otherwise); its window is noted."""
    served = {entry.get("id"): entry for entry in models.get("data", []) if isinstance(entry, dict)}
    if model not in served:
        raise WorkerMismatch(f"engine worker {worker.url} serves {', '.join(map(repr, served)) or 'no model'}, not "
                             f"'{model}' as the fleet file says (start it with --served-model-name '{model}')")
    worker.max_model_len = served[model].get("max_model_len") or worker.max_model_len
