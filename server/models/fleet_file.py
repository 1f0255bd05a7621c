"""`--fleet FILE`: the models a gateway serves from remote vLLM workers, in TOML; a mistake is refused naming its line.

    health_seconds = 2.0          # optional: how often each worker's health and load are read
    max_waiting = 8               # optional: a worker with this many more waiting requests than the least loaded
                                  # one is passed over for a turn that would go to it
    first_token_seconds = 300.0   # optional: a stream that sends nothing this long after its request is lost
    idle_seconds = 60.0           # optional: and after this long between two pieces (each model may set its own)
    failures_to_eject = 3         # optional: failed requests in a row that take a worker out of rotation
    ejection_seconds = 5.0        # optional: the first ejection's length (the n-th: n times it)
    max_ejection_seconds = 300.0  # optional: no ejection lasts longer
    max_ejected_share = 0.5       # optional: at most this share of a model's workers is ejected at once
    retry_budget = 0.2            # optional: retries in flight at most this share of the requests in flight,
    min_retries = 3               # optional: or this many
    load_bound = 1.25             # optional: a worker running more than this times the mean passes a turn on (0: off),
    load_slack = 16               # optional: when it also runs this many more than the least loaded one
    max_kv_usage = 0.95           # optional: a worker whose KV cache is this full passes a turn to one less full
    max_running_per_worker = 0    # optional: what a gateway runs on one worker at most; more wait, in turn between
                                  # projects (0: no cap)

    [[models]]
    name = "SmolLM2-135M-Instruct"                   # what clients send as `model`
    path = "/models/smollm2"                         # tokenizer, chat template, config: read by the gateway
    engines = ["http://w1:8000", "http://w2:8000"]   # `vllm serve --enable-scale-out` workers, or one router
    tool_call_parser = "hermes"                      # optional, each: the model's own settings
    reasoning_parser = "qwen3"
    harmony = false
    max_model_len = 16384                            # optional: the window (else the workers' own)
    default_max_output_tokens = 512
    sampling_defaults = { frequency_penalty = 0.5 }
    codex_model_info = { auto_compact_token_limit = 12000 }
    api_key_env = "WORKER_KEY"                       # optional: the workers' key (vLLM's --api-key), from this
    # api_key_file = "/run/secrets/worker-key"       #   environment variable or this file; sent as a bearer token
    ca_file = "/etc/fleet/ca.pem"                    # optional: the CA that signed https workers' certificates
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from server.engine.access import WorkerAccess
from server.engine.interface import SAMPLING_KEYS
from server.engine.stall import StallLimits
from server.engine.workers import LoadLimits, OutlierPolicy
from server.model_settings import ModelSettings

_MODEL_KEYS = {"name", "path", "engines", "reasoning_parser", "tool_call_parser", "harmony", "max_model_len",
               "default_max_output_tokens", "sampling_defaults", "codex_model_info", "first_token_seconds",
               "idle_seconds", "api_key_env", "api_key_file", "ca_file"}
_OUTLIER_KEYS = ("failures_to_eject", "ejection_seconds", "max_ejection_seconds", "max_ejected_share")
_TOP_KEYS = {"models", "health_seconds", "max_waiting", "first_token_seconds", "idle_seconds", "retry_budget",
             "min_retries", "load_bound", "load_slack", "max_kv_usage", "max_running_per_worker", *_OUTLIER_KEYS}
_URL = re.compile(r"https?://[^/\s]+(/\S*)?")


@dataclass(frozen=True)
class FleetModel:
    """One model of the fleet: its settings, where the gateway reads its tokenizer, and the workers that run it."""

    settings: ModelSettings
    path: str
    engines: tuple[str, ...]
    max_model_len: int | None = None  # None: the smallest window its workers report
    limits: StallLimits = StallLimits()  # how long its workers' streams may send nothing
    access: WorkerAccess = WorkerAccess()  # its workers' key and CA


@dataclass(frozen=True)
class Fleet:
    """What a fleet file declares."""

    models: tuple[FleetModel, ...]
    health_seconds: float = 2.0
    outliers: OutlierPolicy = OutlierPolicy()
    retry_budget: float = 0.2
    min_retries: int = 3
    load: LoadLimits = LoadLimits()


class FleetFileError(ValueError):
    """The fleet file cannot be served; the message names the file, the line and what is wrong."""


def read_fleet_file(path: Path) -> Fleet:
    """The fleet the file declares (FleetFileError naming the line of the first mistake)."""
    try:
        text = path.read_text()
        document = tomllib.loads(text)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise FleetFileError(f"--fleet {path}: {exc}") from exc
    lines = _Lines(path, text)
    for key in document:
        if key not in _TOP_KEYS:
            raise lines.error(f"unknown key `{key}` (known: {', '.join(sorted(_TOP_KEYS))})", key=key)
    entries = document.get("models")
    if not isinstance(entries, list) or not entries:
        raise lines.error("no [[models]]: a fleet serves one model or more")
    limits = StallLimits(*(_seconds(document, key, None, lines, getattr(StallLimits(), key))
                           for key in ("first_token_seconds", "idle_seconds")))
    models = [_model(entry, index, lines, limits) for index, entry in enumerate(entries)]
    seen: set[str] = set()
    for index, model in enumerate(models):
        if model.settings.name in seen:
            raise lines.error(f"model `{model.settings.name}` is declared twice", index, "name")
        seen.add(model.settings.name)
    health = document.get("health_seconds", 2.0)
    waiting = document.get("max_waiting", 8)
    if not isinstance(health, (int, float)) or isinstance(health, bool) or health <= 0:
        raise lines.error("`health_seconds` must be a number of seconds above 0", key="health_seconds")
    if not isinstance(waiting, int) or isinstance(waiting, bool) or waiting < 1:
        raise lines.error("`max_waiting` must be a whole number of 1 or more", key="max_waiting")
    outliers = OutlierPolicy(
        failures_to_eject=_whole(document, "failures_to_eject", lines, OutlierPolicy.failures_to_eject),
        ejection_seconds=_seconds(document, "ejection_seconds", None, lines, OutlierPolicy.ejection_seconds),
        max_ejection_seconds=_seconds(document, "max_ejection_seconds", None, lines,
                                      OutlierPolicy.max_ejection_seconds),
        max_ejected_share=_share(document, "max_ejected_share", lines, OutlierPolicy.max_ejected_share))
    bound = document.get("load_bound", 1.25)
    if not isinstance(bound, (int, float)) or isinstance(bound, bool) or not (bound == 0 or bound >= 1):
        raise lines.error("`load_bound` must be 0 (no bound) or a number of 1 or more", key="load_bound")
    load = LoadLimits(waiting, float(bound), _whole(document, "load_slack", lines, LoadLimits.load_slack, least=0),
                      _share(document, "max_kv_usage", lines, LoadLimits.max_kv_usage),
                      _whole(document, "max_running_per_worker", lines, LoadLimits.max_running, least=0))
    return Fleet(tuple(models), float(health), outliers, _share(document, "retry_budget", lines, 0.2),
                 _whole(document, "min_retries", lines, 3, least=0), load)


def _seconds(entry: dict[str, Any], key: str, index: int | None, lines: "_Lines", default: float) -> float:
    value = entry.get(key, default)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise lines.error(f"`{key}` must be a number of seconds above 0", index, key)
    return float(value)


def _whole(document: dict[str, Any], key: str, lines: "_Lines", default: int, least: int = 1) -> int:
    value = document.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise lines.error(f"`{key}` must be a whole number of {least} or more", key=key)
    return value


def _share(document: dict[str, Any], key: str, lines: "_Lines", default: float) -> float:
    value = document.get(key, default)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= 1:
        raise lines.error(f"`{key}` must be a share from 0 to 1", key=key)
    return float(value)


def _model(entry: Any, index: int, lines: "_Lines", limits: StallLimits) -> FleetModel:
    if not isinstance(entry, dict):
        raise lines.error("each model is a table: [[models]]", index)
    for key in entry:
        if key not in _MODEL_KEYS:
            raise lines.error(f"unknown key `{key}` (known: {', '.join(sorted(_MODEL_KEYS))})", index, key)
    for key in ("name", "path"):
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            raise lines.error(f"`{key}` is missing: each model needs a `{key}`", index, key if key in entry else None)
    engines = entry.get("engines")
    if not isinstance(engines, list) or not engines:
        raise lines.error("`engines` is missing or empty: each model needs the URL of one worker or more", index,
                          "engines" if "engines" in entry else None)
    for number, url in enumerate(engines):
        if isinstance(url, str) and "@" in url.split("://", 1)[-1].split("/", 1)[0]:
            raise lines.error(f"engine {number + 1} carries credentials in its URL: name the key with `api_key_env` "
                              "or `api_key_file` instead (it is sent as a bearer token, and never logged)", index,
                              "engines")
        if not isinstance(url, str) or not _URL.fullmatch(url):
            raise lines.error(f"engine {url!r} is not an http:// or https:// URL", index, "engines")
    if len(set(engines)) != len(engines):
        raise lines.error("an engine is listed twice", index, "engines")
    settings = ModelSettings(
        name=entry["name"],
        reasoning_parser=_optional(entry, "reasoning_parser", str, index, lines),
        tool_call_parser=_optional(entry, "tool_call_parser", str, index, lines),
        harmony=_optional(entry, "harmony", bool, index, lines) or False,
        default_max_output_tokens=_positive(entry, "default_max_output_tokens", index, lines),
        sampling_defaults=_sampling(entry, index, lines),
        codex_model_info=_optional(entry, "codex_model_info", dict, index, lines) or {},
    )
    own = StallLimits(_seconds(entry, "first_token_seconds", index, lines, limits.first_token_seconds),
                      _seconds(entry, "idle_seconds", index, lines, limits.idle_seconds))
    return FleetModel(settings, entry["path"], tuple(url.rstrip("/") for url in engines),
                      _positive(entry, "max_model_len", index, lines), own, _access(entry, index, lines))


def _access(entry: dict[str, Any], index: int, lines: "_Lines") -> WorkerAccess:
    """The model's workers' key, read from the environment variable or file the entry names, and its CA file."""
    variable = _optional(entry, "api_key_env", str, index, lines)
    key_file = _optional(entry, "api_key_file", str, index, lines)
    ca_file = _optional(entry, "ca_file", str, index, lines)
    if variable and key_file:
        raise lines.error("`api_key_env` and `api_key_file` both name a key: keep one", index, "api_key_file")
    key = None
    if variable:
        key = os.environ.get(variable, "").strip()
        if not key:
            raise lines.error(f"`api_key_env`: the environment variable {variable} is not set", index, "api_key_env")
    if key_file:
        try:
            key = Path(key_file).read_text().strip()
        except OSError as exc:
            raise lines.error(f"`api_key_file`: {key_file} cannot be read ({exc.strerror})", index,
                              "api_key_file") from exc
    if ca_file and not Path(ca_file).is_file():
        raise lines.error(f"`ca_file`: {ca_file} is not a file", index, "ca_file")
    return WorkerAccess(key or None, ca_file)


def _optional(entry: dict[str, Any], key: str, kind: type, index: int, lines: "_Lines") -> Any:
    value = entry.get(key)
    if value is not None and not isinstance(value, kind):
        raise lines.error(f"`{key}` must be a {kind.__name__}", index, key)
    return value


def _positive(entry: dict[str, Any], key: str, index: int, lines: "_Lines") -> int | None:
    value = entry.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise lines.error(f"`{key}` must be a whole number of 1 or more", index, key)
    return value


def _sampling(entry: dict[str, Any], index: int, lines: "_Lines") -> dict[str, float]:
    values = _optional(entry, "sampling_defaults", dict, index, lines) or {}
    for key, value in values.items():
        if key not in SAMPLING_KEYS or not isinstance(value, (int, float)) or isinstance(value, bool):
            raise lines.error(f"`sampling_defaults.{key}`: a number for one of {', '.join(SAMPLING_KEYS)}", index,
                              "sampling_defaults")
    return {key: float(value) for key, value in values.items()}


@dataclass(frozen=True)
class _Lines:
    """Where in the file a model's table, or a key in it, is written (tomllib keeps no positions)."""

    path: Path
    text: str

    def error(self, problem: str, index: int | None = None, key: str | None = None) -> FleetFileError:
        line = self.line_of(index, key)
        where = f"--fleet {self.path}, line {line}" if line else f"--fleet {self.path}"
        model = f" (models[{index}])" if index is not None else ""
        return FleetFileError(f"{where}{model}: {problem}")

    def line_of(self, index: int | None, key: str | None) -> int | None:
        """The line of the `index`-th [[models]] table (None: the top of the file), or of `key` in it."""
        lines = self.text.splitlines()
        headers = [number for number, line in enumerate(lines) if re.match(r"\s*\[\[\s*models\s*\]\]", line)]
        if index is None:
            start, end = 0, headers[0] if headers else len(lines)
        elif index < len(headers):
            start, end = headers[index], headers[index + 1] if index + 1 < len(headers) else len(lines)
        else:
            return None
        if key is not None:
            pattern = re.compile(rf"\s*\"?{re.escape(key)}\"?\s*=")
            for number in range(start, end):
                if pattern.match(lines[number]):
                    return number + 1
        return start + 1 if index is not None else None
