"""Limits per project and key: requests and tokens per minute, requests at once, tokens per day; the headers that
count down; the refusal a client retries; usage counted once per response."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from server.tenancy.keys import Caller
from server.tenancy.limiter import Limiter
from server.tenancy.limits import Limits, RateLimited
from server.tenancy.usage import MemoryLedger
from streaming.outcome import Usage

ALPHA, BETA = Caller("alpha", "key_a"), Caller("beta", "key_b")


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:  # 10 s into a minute... of a day
        self.now = now

    def __call__(self) -> float:
        return self.now


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def limiter(clock: Clock, **projects: Limits) -> Limiter:
    return Limiter(MemoryLedger(), projects=projects, clock=clock)


def test_requests_per_minute_count_down_then_refuse_until_the_minute_turns() -> None:
    clock = Clock()
    gate = limiter(clock, alpha=Limits(requests_per_minute=3))

    async def scenario() -> tuple[list[str], RateLimited, str]:
        remaining = []
        for _ in range(3):
            ticket = await gate.admit(ALPHA, "m")
            remaining.append(ticket.headers["x-ratelimit-remaining-requests"])
            ticket.finish(Usage(input_tokens=5, output_tokens=5))
        with pytest.raises(RateLimited) as refused:
            await gate.admit(ALPHA, "m")
        await gate.admit(BETA, "m")  # another project is not limited by alpha's
        clock.now += 60 - clock.now % 60  # the next minute
        after = await gate.admit(ALPHA, "m")
        return remaining, refused.value, after.headers["x-ratelimit-remaining-requests"]

    remaining, refused, after = run(scenario())
    assert remaining == ["2", "1", "0"]
    assert refused.kind == "requests" and refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert 1 <= refused.retry_after <= 60 and f"try again in {refused.retry_after}s" in str(refused)
    assert after == "2"


def test_tokens_per_minute_count_what_responses_used() -> None:
    clock = Clock()
    gate = limiter(clock, alpha=Limits(tokens_per_minute=100))

    async def scenario() -> RateLimited:
        first = await gate.admit(ALPHA, "m")
        first.finish(Usage(input_tokens=70, output_tokens=40))
        await gate.close()
        with pytest.raises(RateLimited) as refused:
            await gate.admit(ALPHA, "m")
        return refused.value

    refused = run(scenario())
    assert refused.kind == "tokens" and refused.headers["x-ratelimit-remaining-tokens"] == "0"


def test_requests_at_once_are_given_back_when_responses_end_and_shared_among_replicas() -> None:
    clock = Clock()
    gate = limiter(clock, alpha=Limits(concurrent_requests=4))

    async def scenario() -> tuple[int, int]:
        held = [await gate.admit(ALPHA, "m") for _ in range(4)]
        with pytest.raises(RateLimited):
            await gate.admit(ALPHA, "m")
        held.pop().finish(None)
        held.append(await gate.admit(ALPHA, "m"))
        for ticket in held:
            ticket.finish(None)
            ticket.finish(None)  # once only
        gate.replicas = lambda: 3  # this replica's share: 2 of 4
        shared = []
        while True:
            try:
                shared.append(await gate.admit(ALPHA, "m"))
            except RateLimited:
                return len(held), len(shared)

    assert run(scenario()) == (4, 2)


def test_a_daily_budget_is_a_quota_refusal_until_midnight() -> None:
    clock = Clock()
    gate = limiter(clock, alpha=Limits(tokens_per_day=1000))

    async def scenario() -> RateLimited:
        for _ in range(5):
            (await gate.admit(ALPHA, "m")).finish(Usage(input_tokens=100, output_tokens=100))
            clock.now += 120  # spread over minutes: the day counts them all
        await gate.close()
        with pytest.raises(RateLimited) as refused:
            await gate.admit(ALPHA, "m")
        return refused.value

    refused = run(scenario())
    assert refused.kind == "quota" and "midnight UTC" in str(refused)


def test_a_keys_own_limit_holds_beside_its_projects() -> None:
    clock = Clock()
    gate = Limiter(MemoryLedger(), projects={"alpha": Limits(requests_per_minute=10)},
                   keys={"key_a": Limits(requests_per_minute=2)}, clock=clock)
    other_key = Caller("alpha", "key_other")

    async def scenario() -> tuple[str, RateLimited, int]:
        first = await gate.admit(ALPHA, "m")
        await gate.admit(ALPHA, "m")
        with pytest.raises(RateLimited) as refused:
            await gate.admit(ALPHA, "m")
        others = [await gate.admit(other_key, "m") for _ in range(3)]  # the project's other keys still may
        return first.headers["x-ratelimit-remaining-requests"], refused.value, len(others)

    told, refused, others = run(scenario())
    assert told == "1"  # the tighter of the two remaining counts is told
    assert "key key_a" in str(refused) and others == 3


def test_usage_is_counted_once_per_response_by_project_key_and_model() -> None:
    clock = Clock()
    ledger = MemoryLedger()
    gate = Limiter(ledger, projects={"alpha": Limits(requests_per_minute=100)}, clock=clock)

    async def scenario() -> list[Any]:
        for caller, model, used in ((ALPHA, "m1", 10), (ALPHA, "m1", 20), (ALPHA, "m2", 5), (BETA, "m1", 7)):
            (await gate.admit(caller, model)).finish(Usage(input_tokens=used, cached_tokens=1, output_tokens=used,
                                                           reasoning_tokens=2))
        await gate.close()
        return await ledger.usage_between(0, 10**9)

    rows = {(row.project, row.api_key_id, row.model): row for row in run(scenario())}
    assert {key: (row.requests, row.input_tokens, row.output_tokens, row.cached_tokens, row.reasoning_tokens)
            for key, row in rows.items()} == {("alpha", "key_a", "m1"): (2, 30, 30, 2, 4),
                                              ("alpha", "key_a", "m2"): (1, 5, 5, 1, 2),
                                              ("beta", "key_b", "m1"): (1, 7, 7, 1, 2)}


def two_replicas(shared: Any, close: bool) -> tuple[int, Any, list[Any]]:
    """Two limiters on one ledger take turns admitting 8 requests of a project allowed 5 a minute."""
    clock = Clock()
    limits = {"alpha": Limits(requests_per_minute=5, tokens_per_day=10_000)}

    async def scenario() -> tuple[int, Any, list[Any]]:
        one, two = Limiter(shared, projects=limits, clock=clock), Limiter(shared, projects=limits, clock=clock)
        admitted = 0
        for gate in (one, two) * 4:
            try:
                (await gate.admit(ALPHA, "m")).finish(Usage(input_tokens=3, output_tokens=4))
                admitted += 1
            except RateLimited:
                pass
        await one.close()
        await two.close()
        spent = await shared.spent("alpha", None, int(clock.now // 60), 0)
        rows = await shared.usage_between(0, 10**9)
        if close:
            await shared.database.close()
        return admitted, spent, rows

    return run(scenario())


def test_two_replicas_counting_into_one_store_hold_one_limit(store_url: str) -> None:
    """Requests per minute and tokens per day are counted where every replica counts: two limiters on one store
    (SQLite and PostgreSQL) admit the project's limit between them, not each."""
    from tests.test_store import open_url

    admitted, spent, rows = two_replicas(open_url(store_url).usage, close=True)
    assert admitted == 5
    assert (spent.requests, spent.tokens, spent.day_tokens) == (5, 35, 35)
    assert [(row.requests, row.input_tokens, row.output_tokens) for row in rows] == [(5, 15, 20)]


def test_the_memory_ledger_counts_as_the_stores_do() -> None:
    admitted, spent, rows = two_replicas(MemoryLedger(), close=False)
    assert admitted == 5
    assert (spent.requests, spent.tokens, spent.day_tokens) == (5, 35, 35)
    assert [(row.requests, row.input_tokens, row.output_tokens) for row in rows] == [(5, 15, 20)]


# -- on the wire -----------------------------------------------------------------------------------------------------

KEYS = {"alpha": "alpha-secret-key-0123456789abcdef", "beta": "beta-secret-key-0123456789abcdef"}


def limited_server(tokenizer: Any, store: Any, alpha: Limits, admin_key: str | None = None) -> Any:
    """An app with projects alpha (its `alpha` limits) and beta (none), each with a key (and an admin key, when
    given); every answer is one sentence."""
    import hashlib

    from server.config import ServerConfig
    from server.http.app import create_app
    from server.runs.context import ServingContext
    from server.tenancy.keys import ApiKey
    from server.tenancy.projects_file import ProjectsFile
    from tests.conftest import serve_in_thread
    from tests.scripted_engine import ScriptedEngine, steps_from_tokens
    from tests.test_server import MODEL

    keys = tuple(ApiKey(id=f"file_{name}", name=name, project=name, hash=hashlib.sha256(key.encode()).hexdigest())
                 for name, key in KEYS.items())
    if admin_key is not None:
        keys += (ApiKey(id="file_admin", name="ops", project="default", admin=True,
                        hash=hashlib.sha256(admin_key.encode()).hexdigest()),)
    answer = steps_from_tokens(tokenizer.encode("Paris is the capital.", add_special_tokens=False)
                               + [tokenizer.eos_token_id], cuts=list(range(1, 8)))
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[answer])
    config = ServerConfig(served_model_name=MODEL, projects=ProjectsFile(keys, {"alpha": alpha}))
    context = ServingContext(config=config, engine_factory=lambda: engine, records=store, clock=Clock())  # the clock
    # stands still: the minute does not turn between requests
    return serve_in_thread(create_app(context))


def post(base_url: str, project: str, **body: Any) -> Any:
    import httpx

    from tests.test_server import MODEL

    return httpx.post(f"{base_url}/responses", json={"model": MODEL, "input": "Capital of France?", **body},
                      headers={"Authorization": f"Bearer {KEYS[project]}"}, timeout=30)


def test_past_its_limit_a_project_gets_a_429_the_sdk_reads_and_the_other_project_is_served(
        tokenizer: Any, tmp_path: Any) -> None:
    import openai

    from tests.stores import sqlite_records
    from tests.test_server import MODEL
    from tests.test_websocket import Socket

    store = sqlite_records(tmp_path / "responses.db")
    with limited_server(tokenizer, store, Limits(requests_per_minute=3)) as base_url:
        answers = [post(base_url, "alpha", stream=stream) for stream in (False, True, False)]
        assert [answer.status_code for answer in answers] == [200, 200, 200]
        assert [answer.headers["x-ratelimit-remaining-requests"] for answer in answers] == ["2", "1", "0"]
        assert all(answer.headers["x-ratelimit-limit-requests"] == "3" for answer in answers)
        refused = post(base_url, "alpha")
        unprepared = post(base_url, "alpha", previous_response_id="resp_missing")  # refused before any lookup
        beta = [post(base_url, "beta") for _ in range(5)]
        client = openai.OpenAI(base_url=base_url, api_key=KEYS["alpha"], max_retries=0)
        with pytest.raises(openai.RateLimitError) as sdk_refused:
            client.responses.create(model=MODEL, input="Capital of France?")
        socket = Socket(base_url, additional_headers={"Authorization": f"Bearer {KEYS['alpha']}"})
        socket.send({"type": "response.create", "model": MODEL, "input": "Capital of France?"})
        socket_refusal = socket.until_terminal()[-1]
        socket.ws.close()
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limit_exceeded" and refused.json()["error"]["type"] == "requests"
    assert "try again in" in refused.json()["error"]["message"]
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert unprepared.status_code == 429  # a project past its limit costs the server no preparation (not a 404)
    assert [answer.status_code for answer in beta] == [200] * 5
    assert socket_refusal["type"] == "error" and socket_refusal["status"] == 429, socket_refusal
    assert socket_refusal["error"]["code"] == "rate_limit_exceeded"
    assert all("x-ratelimit-limit-requests" not in answer.headers for answer in beta)  # beta has no limits
    assert sdk_refused.value.code == "rate_limit_exceeded"


def test_the_usage_api_sums_the_responses_usage_by_project_key_and_model(tokenizer: Any, tmp_path: Any) -> None:
    """A scripted workload of two projects: the admin's usage page matches the sum of the responses' `usage`, per
    project and key; a project key may not read it."""
    import time

    import httpx

    from tests.stores import sqlite_records

    admin_key = "admin-secret-key-0123456789abcdef"
    store = sqlite_records(tmp_path / "responses.db")
    with limited_server(tokenizer, store, Limits(requests_per_minute=100), admin_key) as base_url:
        usage: dict[str, list[int]] = {"alpha": [0, 0, 0], "beta": [0, 0, 0]}
        for project, count in (("alpha", 3), ("beta", 2)):
            for index in range(count):
                body = post(base_url, project, stream=False, store=index % 2 == 0).json()["usage"]
                usage[project] = [usage[project][0] + 1, usage[project][1] + body["input_tokens"],
                                  usage[project][2] + body["output_tokens"]]
        start = int(Clock().now) - 3600  # the server's clock stands still at Clock's
        query = {"start_time": start, "bucket_width": "1h", "group_by": ["project_id", "api_key_id", "model"]}
        refused = httpx.get(f"{base_url}/organization/usage/completions", params=query,
                            headers={"Authorization": f"Bearer {KEYS['alpha']}"}, timeout=30)
        deadline = time.monotonic() + 10
        while True:  # usage is written as each response ends, just after its answer
            page = httpx.get(f"{base_url}/organization/usage/completions", params=query,
                             headers={"Authorization": f"Bearer {admin_key}"}, timeout=30).json()
            results = [result for bucket in page["data"] for result in bucket["results"]]
            seen = {result["project_id"]: [result["num_model_requests"], result["input_tokens"],
                                           result["output_tokens"]] for result in results}
            if seen == usage or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        metrics = httpx.get(f"{base_url.removesuffix('/v1')}/metrics", timeout=30).text
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "insufficient_permissions"
    assert seen == usage
    assert {(r["project_id"], r["api_key_id"]) for r in results} == {("alpha", "file_alpha"), ("beta", "file_beta")}
    counted = {line.split('"')[1]: float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith("responses_server_project_requests_total{")}
    assert counted["alpha"] >= 3 and counted["beta"] >= 2  # (the registry is the test process's: others count too)
    assert KEYS["alpha"] not in metrics and "file_alpha" not in metrics
    assert page["object"] == "page" and all(bucket["end_time"] - bucket["start_time"] == 3600 for bucket in page["data"])


def Params(**fields: Any) -> Any:  # noqa: N802 - stands for the query parameters' type
    """Query parameters as Starlette gives them to the route (a list value: the name repeated)."""
    from starlette.datastructures import QueryParams

    return QueryParams([(name, item) for name, value in fields.items()
                        for item in (value if isinstance(value, list) else [value])])


def test_usage_buckets_group_filter_and_page() -> None:
    from server.errors import RequestError
    from server.tenancy.usage import UsageRecord
    from server.tenancy.usage_report import UsageQuery, usage_page

    day = 86_400 * 20_000  # a UTC midnight
    records = [UsageRecord("alpha", "k1", "m", (day + 60) // 60, requests=1, input_tokens=10, output_tokens=1),
               UsageRecord("alpha", "k2", "m", (day + 3700) // 60, requests=2, input_tokens=20, output_tokens=2),
               UsageRecord("beta", "k3", "m", (day + 86_400 + 5) // 60, requests=4, input_tokens=40, output_tokens=4)]
    whole = usage_page(UsageQuery.parse(Params(start_time=str(day + 30))), records, now=day + 2 * 86_400)
    assert [(b["start_time"], [r["num_model_requests"] for r in b["results"]]) for b in whole["data"]] == [
        (day, [3]), (day + 86_400, [4]), (day + 2 * 86_400, [])]
    assert whole["data"][0]["results"][0]["project_id"] is None  # no group_by: one result for all
    grouped = usage_page(UsageQuery.parse(Params(start_time=str(day), bucket_width="1h", group_by=["api_key_id"],
                                                 project_ids=["alpha"], limit="2")), records, now=day + 86_400 * 2)
    assert [[(r["api_key_id"], r["input_tokens"]) for r in b["results"]] for b in grouped["data"]] == [
        [("k1", 10)], [("k2", 20)]]
    assert grouped["has_more"] and grouped["next_page"] == str(day + 7200)
    following = usage_page(UsageQuery.parse(Params(start_time=str(day), bucket_width="1h", limit="2",
                                                   page=grouped["next_page"])), records, now=day + 86_400 * 2)
    assert following["data"][0]["start_time"] == day + 7200
    for bad in (Params(), Params(start_time="x"), Params(start_time="1", bucket_width="2h"),
                Params(start_time="1", group_by=["user"]), Params(start_time="1", limit="32")):
        with pytest.raises(RequestError):
            UsageQuery.parse(bad)


def test_a_page_from_the_epoch_is_one_page_not_every_bucket_since() -> None:
    from server.tenancy.usage_report import UsageQuery, usage_page

    page = usage_page(UsageQuery.parse(Params(start_time="0", bucket_width="1m")), [], now=1_800_000_000)
    assert len(page["data"]) == 60 and page["has_more"] and page["next_page"] == "3600"


def test_a_scope_refused_for_its_minute_is_refused_without_reading_the_ledger_until_it_turns() -> None:
    clock = Clock()

    class CountingLedger(MemoryLedger):
        reads = 0

        async def spent(self, *args: Any) -> Any:
            CountingLedger.reads += 1
            return await super().spent(*args)

    gate = Limiter(CountingLedger(), projects={"alpha": Limits(requests_per_minute=1)}, clock=clock)

    async def scenario() -> tuple[int, int]:
        await gate.admit(ALPHA, "m")
        for _ in range(50):
            with pytest.raises(RateLimited):
                await gate.admit(ALPHA, "m")
        during = CountingLedger.reads
        clock.now += 60 - clock.now % 60  # the minute turns: counted afresh, admitted
        await gate.admit(ALPHA, "m")
        return during, CountingLedger.reads

    assert run(scenario()) == (2, 3)  # the first admission and the first refusal read it; then the new minute
