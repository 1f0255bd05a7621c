"""A project's (or a key's) limits, what it has spent against them, and the refusal past one (a 429 the SDK and
Codex retry): requests and tokens per minute, requests at once, tokens per day."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Literal

MINUTE, DAY = 60, 86_400
LIMIT_FIELDS = ("requests_per_minute", "tokens_per_minute", "concurrent_requests", "tokens_per_day")


@dataclass(frozen=True)
class Limits:
    """None: no limit of that kind."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None  # input + output tokens, as the engine counted them
    concurrent_requests: int | None = None  # responses running at once (per replica: its share, see Limiter)
    tokens_per_day: int | None = None  # a budget per UTC day

    @property
    def counted(self) -> bool:
        """Whether admitting a request needs what was spent (a limit per minute or day)."""
        return any(value is not None for value in (self.requests_per_minute, self.tokens_per_minute,
                                                   self.tokens_per_day))

    @classmethod
    def from_table(cls, table: dict[str, Any], where: str) -> "Limits":
        """The limits a TOML table sets (its other fields are not limits); ValueError naming a bad one."""
        values = {}
        for name in LIMIT_FIELDS:
            value = table.get(name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"{where}: `{name}` is a whole number of at least 1")
            values[name] = value
        return cls(**values)

    def __bool__(self) -> bool:
        return any(getattr(self, field.name) is not None for field in fields(self))


@dataclass(frozen=True)
class Spent:
    """What one project (or key) spent: requests and tokens in the current minute, tokens in the current day."""

    requests: int = 0
    tokens: int = 0
    day_tokens: int = 0


Kind = Literal["requests", "tokens", "concurrency", "quota"]


class RateLimited(Exception):
    """Refused: past a limit of `scope` (a project, or a key). `retry_after`: seconds until the limit's window
    resets; `headers`: the x-ratelimit-* headers as on any answer."""

    def __init__(self, scope: str, kind: Kind, limit: int, used: int, retry_after: float,
                 headers: dict[str, str]) -> None:
        wait = max(1, math.ceil(retry_after))
        what = {"requests": "requests per minute", "tokens": "tokens per minute",
                "concurrency": "requests at once", "quota": "tokens per day"}[kind]
        ending = ("The budget renews at midnight UTC." if kind == "quota"
                  else f"Please try again in {wait}s.")
        super().__init__(f"Rate limit reached for {scope} on {what}: limit {limit}, used {used}. {ending}")
        self.kind, self.retry_after, self.headers = kind, wait, headers


def refusal(scope: str, limits: Limits, spent: Spent, running: int, now: float) -> RateLimited | None:
    """The refusal of one more request under `limits`, given what was `spent` and how many run (None: admitted)."""
    headers = rate_headers(limits, spent, now)
    minute_left, day_left = MINUTE - now % MINUTE, DAY - now % DAY
    checks: list[tuple[Kind, int | None, int, float]] = [
        ("quota", limits.tokens_per_day, spent.day_tokens, day_left),
        ("requests", limits.requests_per_minute, spent.requests, minute_left),
        ("tokens", limits.tokens_per_minute, spent.tokens, minute_left),
        ("concurrency", limits.concurrent_requests, running, 1.0),
    ]
    for kind, limit, used, wait in checks:
        if limit is not None and used >= limit:
            return RateLimited(scope, kind, limit, used, wait, headers)
    return None


def rate_headers(limits: Limits, spent: Spent, now: float, admitted: bool = False) -> dict[str, str]:
    """OpenAI's x-ratelimit-* headers for the limits per minute that are set (remaining: after this request, when
    `admitted`)."""
    reset = _duration(MINUTE - now % MINUTE)
    headers: dict[str, str] = {}
    if limits.requests_per_minute is not None:
        used = spent.requests + (1 if admitted else 0)
        headers |= {"x-ratelimit-limit-requests": str(limits.requests_per_minute),
                    "x-ratelimit-remaining-requests": str(max(0, limits.requests_per_minute - used)),
                    "x-ratelimit-reset-requests": reset}
    if limits.tokens_per_minute is not None:
        headers |= {"x-ratelimit-limit-tokens": str(limits.tokens_per_minute),
                    "x-ratelimit-remaining-tokens": str(max(0, limits.tokens_per_minute - spent.tokens)),
                    "x-ratelimit-reset-tokens": reset}
    return headers


def _duration(seconds: float) -> str:
    """A wait as OpenAI writes it in x-ratelimit-reset-*: `6s`, `1m0s`."""
    whole = max(1, math.ceil(seconds))
    return f"{whole // 60}m{whole % 60}s" if whole >= 60 else f"{whole}s"
