"""vLLM's Prometheus stat logger, its writes that change nothing skipped: the same `vllm:` metrics, less CPU a step.

vLLM's logger writes every counter and gauge at every engine step: at a decode step most of those writes add 0 to a
counter or set a gauge to the value it holds, each under prometheus_client's lock (bench/turn_cost.py: a fifth of
the API process's main thread on a short turn). The exposition is the same: a counter is exported from its creation,
and a gauge holds the last value set.
"""

from __future__ import annotations

from typing import Any

from vllm.v1.metrics.loggers import PrometheusStatLogger

# The gauges vLLM's `record` sets (and nothing else writes); its counters are only ever added to.
_RECORDED_GAUGES = ("gauge_scheduler_running", "gauge_scheduler_waiting", "gauge_waiting_by_reason",
                    "gauge_kv_fetch_by_stage", "gauge_kv_cache_usage")


class ChangesOnlyStatLogger(PrometheusStatLogger):
    """vLLM's PrometheusStatLogger (given as AsyncLLM's stat logger, it replaces the default one), with its
    per-engine counters skipping `inc(0)` and its recorded gauges skipping a `set` of the value they hold."""

    def __init__(self, vllm_config: Any, engine_indexes: list[int] | None = None) -> None:
        super().__init__(vllm_config, engine_indexes)
        for name, metric in list(vars(self).items()):
            if name.startswith("counter_"):
                setattr(self, name, _wrapped(metric, _CounterChanges))
            elif name in _RECORDED_GAUGES:
                setattr(self, name, _wrapped(metric, _GaugeChanges))


def _wrapped(metric: Any, wrapper: type) -> Any:
    """The per-engine children (`{engine: child}`, or `{label: {engine: child}}`) wrapped; a parent metric (whose
    children come from `labels()`) as it is."""
    if isinstance(metric, dict):
        return {key: _wrapped(child, wrapper) for key, child in metric.items()}
    return wrapper(metric) if getattr(metric, "_labelvalues", None) or _unlabelled(metric) else metric


def _unlabelled(metric: Any) -> bool:
    return hasattr(metric, "_labelnames") and not metric._labelnames


class _CounterChanges:
    """A counter child that skips adding nothing."""

    __slots__ = ("_counter",)

    def __init__(self, counter: Any) -> None:
        self._counter = counter

    def inc(self, amount: float = 1, exemplar: dict[str, str] | None = None) -> None:
        if amount:
            self._counter.inc(amount, exemplar)


class _GaugeChanges:
    """A gauge child that skips setting the value it holds (only this logger's `record` sets it)."""

    __slots__ = ("_gauge", "_value")

    def __init__(self, gauge: Any) -> None:
        self._gauge, self._value = gauge, None

    def set(self, value: float) -> None:
        if value != self._value:
            self._value = value
            self._gauge.set(value)
