"""`responses-server check URL`: the end-to-end scenarios against any /v1/responses endpoint (ours on a GPU, vLLM's
or SGLang's server, OpenAI), on each transport; reports which pass, as text or JSON, and exits 1 if any fails."""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Sequence

from conformance.scenarios import SCENARIOS, Scenario
from conformance.transports import Endpoint, JsonTransport, SseTransport, Transport, WebSocketTransport

TRANSPORTS = ("http", "sse", "websocket")
PARALLEL_RUNS = 8  # with --parallel: runs at once (the engine batches them; 8 halves the check on a 2-core CPU)


@dataclass(frozen=True)
class Outcome:
    """One scenario on one transport."""

    scenario: str
    transport: str
    passed: bool
    seconds: float
    detail: str = ""


def run_checks(endpoint: Endpoint, scenarios: Sequence[str], transports: Sequence[str],
               parallel: bool = False) -> list[Outcome]:
    """Every named scenario on every transport it runs on, reported in order; with `parallel`, up to PARALLEL_RUNS
    of them run at once. A failure is recorded, never raised."""
    made: dict[str, Transport] = {"http": JsonTransport(endpoint), "sse": SseTransport(endpoint),
                                  "websocket": WebSocketTransport(endpoint)}
    with ThreadPoolExecutor(max_workers=PARALLEL_RUNS if parallel else 1) as pool:
        runs = [pool.submit(_outcome, name, SCENARIOS[name][0], made[transport], endpoint) for name in scenarios
                for transport in transports if SCENARIOS[name][1] is None or transport in SCENARIOS[name][1]]
        return [run.result() for run in runs]


def _outcome(name: str, scenario: Scenario, transport: Transport, endpoint: Endpoint) -> Outcome:
    extra = (endpoint,) if len(inspect.signature(scenario).parameters) == 2 else ()
    start = time.monotonic()
    try:
        scenario(transport, *extra)
        return Outcome(name, transport.name, True, time.monotonic() - start)
    except Exception as exc:  # a failed check, or the endpoint failing in a way the check did not foresee
        detail = f"{type(exc).__name__}: {exc}".splitlines()[0][:400]
        return Outcome(name, transport.name, False, time.monotonic() - start, detail)


def report_text(outcomes: list[Outcome]) -> str:
    lines = [f"{'scenario':<20} {'transport':<10} {'result':<6} {'seconds':>7}  detail"]
    for outcome in outcomes:
        result = "pass" if outcome.passed else "FAIL"
        lines.append(f"{outcome.scenario:<20} {outcome.transport:<10} {result:<6} {outcome.seconds:>7.1f}  {outcome.detail}")
    passed = sum(outcome.passed for outcome in outcomes)
    lines.append(f"{passed} passed, {len(outcomes) - passed} failed")
    return "\n".join(lines)


def report_json(endpoint: Endpoint, outcomes: list[Outcome]) -> str:
    passed = sum(outcome.passed for outcome in outcomes)
    return json.dumps({"url": endpoint.base_url, "model": endpoint.model, "passed": passed,
                       "failed": len(outcomes) - passed, "results": [asdict(outcome) for outcome in outcomes]},
                      indent=2)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="responses-server check", description=__doc__.splitlines()[0])
    parser.add_argument("url", help="the API's base URL, e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--model", default=None, help="the model to ask (default: the first that /models lists)")
    parser.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", "unused"),
                        help="sent as 'Authorization: Bearer KEY' (default: $OPENAI_API_KEY)")
    parser.add_argument("--scenario", action="append", choices=list(SCENARIOS), default=None,
                        help="run only this scenario (repeatable; default: all)")
    parser.add_argument("--transport", action="append", choices=TRANSPORTS, default=None,
                        help="use only this transport (repeatable; default: all three)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for one request")
    parser.add_argument("--seed", type=int, default=None,
                        help="send vLLM's `seed` with every request, so a model samples the same output each run "
                             "(a server that takes no `seed`, such as OpenAI's, refuses it)")
    parser.add_argument("--parallel", action="store_true",
                        help=f"run up to {PARALLEL_RUNS} scenario runs at once (faster; the requests then share the "
                             "engine)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    url = args.url.rstrip("/")
    endpoint = Endpoint(url if url.endswith("/v1") else url + "/v1", args.api_key, args.model or "", args.timeout,
                        extra={"seed": args.seed} if args.seed is not None else {})
    if not endpoint.model:
        endpoint.model = endpoint.get("/models")["data"][0]["id"]
    outcomes = run_checks(endpoint, args.scenario or list(SCENARIOS), args.transport or TRANSPORTS, args.parallel)
    print(report_json(endpoint, outcomes) if args.json else report_text(outcomes))
    return 0 if all(outcome.passed for outcome in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
