"""The usage API's answer (`GET /v1/organization/usage/completions`, as OpenAI shapes it): the counted minutes
summed into time buckets, grouped by project, key and model as asked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from server.errors import RequestError
from server.tenancy.usage import NO_KEY, UsageRecord

WIDTHS = {"1m": 60, "1h": 3600, "1d": 86_400}
# Buckets per page: (default, most), as OpenAI's usage API allows them.
PAGE_SIZES = {"1m": (60, 1440), "1h": (24, 168), "1d": (7, 31)}
GROUPS = ("project_id", "api_key_id", "model", "batch")


@dataclass(frozen=True)
class UsageQuery:
    """What a usage request asks: buckets of `width` from `start` (Unix seconds) before `end`, grouped and
    filtered."""

    start: int
    end: int | None
    width: str = "1d"
    group_by: tuple[str, ...] = ()
    project_ids: tuple[str, ...] = ()
    api_key_ids: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    limit: int | None = None
    batch: bool | None = None  # only batch work (True), only the rest (False), or both

    @classmethod
    def parse(cls, params: Any) -> "UsageQuery":
        """From query parameters (a multi-dict: `group_by=project_id&group_by=model`); RequestError naming a bad one."""
        width = params.get("bucket_width", "1d")
        if width not in WIDTHS:
            raise RequestError("bucket_width is one of 1m, 1h, 1d.", param="bucket_width")
        groups = tuple(params.getlist("group_by") or params.getlist("group_by[]"))
        if any(group not in GROUPS for group in groups):
            raise RequestError(f"group_by takes {', '.join(GROUPS)}.", param="group_by")
        start, end = _seconds(params, "start_time", required=True), _seconds(params, "end_time")
        assert start is not None
        limit = _seconds(params, "limit")
        if limit is not None and not 1 <= limit <= PAGE_SIZES[width][1]:
            raise RequestError(f"limit is 1 to {PAGE_SIZES[width][1]} for bucket_width {width}.", param="limit")
        page = _seconds(params, "page")
        return cls(max(start, page or start), end, width, groups, _list(params, "project_ids"),
                   _list(params, "api_key_ids"), _list(params, "models"), limit, _flag(params, "batch"))

    def buckets(self, now: float) -> list[tuple[int, int]]:
        """The (start, end) of each bucket on this page: aligned to the width, from the start's bucket on."""
        width = WIDTHS[self.width]
        first = self.start // width * width
        end = self.end if self.end is not None else int(now) + 1
        count = self.limit or PAGE_SIZES[self.width][0]
        return [(at, at + width) for at in range(first, min(end, first + count * width), width)]

    def keeps(self, record: UsageRecord) -> bool:
        return ((not self.project_ids or record.project in self.project_ids)
                and (not self.api_key_ids or record.api_key_id in self.api_key_ids)
                and (not self.models or record.model in self.models)
                and (self.batch is None or record.batch is self.batch))


def usage_page(query: UsageQuery, records: Iterable[UsageRecord], now: float) -> dict[str, Any]:
    """The page of buckets, each with one result per group (one for all, with no group_by)."""
    buckets = query.buckets(now)
    sums: dict[tuple[int, tuple[str | bool | None, ...]], dict[str, int]] = {}
    width = WIDTHS[query.width]
    for record in records:
        if not query.keeps(record):
            continue
        at = record.minute * 60 // width * width
        key = (at, tuple(_group_value(record, group) for group in query.group_by))
        counts = sums.setdefault(key, dict.fromkeys(_COUNT_FIELDS.values(), 0))
        for field, name in _COUNT_FIELDS.items():
            counts[name] += getattr(record, field)
    data = [{"object": "bucket", "start_time": start, "end_time": end,
             "results": [_result(query.group_by, group, counts) for (at, group), counts in sorted(
                 sums.items(), key=lambda item: (item[0][0], [str(value or "") for value in item[0][1]]))
                 if at == start]}
            for start, end in buckets]
    end = query.end if query.end is not None else int(now) + 1
    more = bool(buckets) and buckets[-1][1] < end
    return {"object": "page", "data": data, "has_more": more, "next_page": str(buckets[-1][1]) if more else None}


def minutes_of(query: UsageQuery, now: float) -> tuple[int, int]:
    """The minutes [first, last) the page's buckets span: what to read from the ledger."""
    buckets = query.buckets(now)
    if not buckets:
        return 0, 0
    return buckets[0][0] // 60, buckets[-1][1] // 60


_COUNT_FIELDS = {"input_tokens": "input_tokens", "output_tokens": "output_tokens",
                 "cached_tokens": "input_cached_tokens", "requests": "num_model_requests",
                 "reasoning_tokens": "output_reasoning_tokens"}


def _result(groups: tuple[str, ...], values: tuple[str | bool | None, ...], counts: dict[str, int]) -> dict[str, Any]:
    grouped = dict(zip(groups, values))
    return {"object": "organization.usage.completions.result", **counts, "input_audio_tokens": 0,
            "output_audio_tokens": 0, "project_id": grouped.get("project_id"), "user_id": None,
            "api_key_id": grouped.get("api_key_id"), "model": grouped.get("model"), "batch": grouped.get("batch")}


def _group_value(record: UsageRecord, group: str) -> str | bool | None:
    if group == "batch":
        return record.batch
    if group == "project_id":
        return record.project
    if group == "api_key_id":
        return record.api_key_id if record.api_key_id != NO_KEY else None
    return record.model


def _seconds(params: Any, name: str, required: bool = False) -> int | None:
    value = params.get(name)
    if value is None:
        if required:
            raise RequestError(f"{name} is required (Unix seconds).", param=name)
        return None
    try:
        number = int(value)
    except ValueError:
        raise RequestError(f"{name} is a whole number.", param=name) from None
    if number < 0:
        raise RequestError(f"{name} is a whole number of at least 0.", param=name)
    return number


def _flag(params: Any, name: str) -> bool | None:
    value = params.get(name)
    if value is None:
        return None
    if value not in ("true", "false"):
        raise RequestError(f"{name} is true or false.", param=name)
    return value == "true"


def _list(params: Any, name: str) -> tuple[str, ...]:
    return tuple(params.getlist(name) or params.getlist(f"{name}[]"))
