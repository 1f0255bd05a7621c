"""What a newcomer sees first: the README's examples and JSON mode, each run N times against a running server.

    make serve   # in another terminal
    .venv/bin/python bench/first_answers.py [--url http://127.0.0.1:8000/v1] [--runs 20] [--set frequency_penalty=0.5]

Each example is sent `--runs` times at once (the engine batches them), as the README sends it: the model's own
sampling defaults, no `max_output_tokens` (the server's default cap applies). JSON mode is the issue's case:
"Describe Paris as JSON." with `json_object`, 200 output tokens, temperature 1.0. Prints, for each, how many ended
`incomplete`, how many were not JSON where JSON was asked, and the median output length.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from dataclasses import dataclass
from typing import Any

from openai import AsyncOpenAI

EXAMPLES: dict[str, dict[str, Any]] = {
    "capital (curl, SDK)": {"input": "What is the capital of France?"},
    "hi (SDK stream)": {"input": "Hi!"},
    "system prompt": {"instructions": "You are a pirate. Answer like one.", "input": "Who are you?"},
    "counting (temperature 0)": {"input": "Count from 1 to 300, separated by commas.", "temperature": 0,
                                 "max_output_tokens": 120},
    "json_object": {"input": "Describe Paris as JSON.", "text": {"format": {"type": "json_object"}},
                    "max_output_tokens": 200, "temperature": 1.0},
}


@dataclass
class Tally:
    """One example's runs."""

    name: str
    incomplete: int = 0
    not_json: int = 0
    tokens: list[int] | None = None


async def run_example(client: AsyncOpenAI, model: str, name: str, runs: int, extra: dict[str, Any]) -> Tally:
    body = EXAMPLES[name]
    responses = await asyncio.gather(*(client.responses.create(model=model, **body, extra_body=extra)
                                       for _ in range(runs)))
    tally = Tally(name, tokens=[])
    for response in responses:
        tally.incomplete += response.status == "incomplete"
        tally.tokens.append(response.usage.output_tokens if response.usage else 0)  # type: ignore[union-attr]
        if "text" in body and not _is_json_object(response.output_text):
            tally.not_json += 1
    return tally


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=JSON",
                        help="a request field added to every example (repeatable), to compare sampling settings")
    args = parser.parse_args()
    extra = {field: json.loads(value) for field, value in (item.split("=", 1) for item in args.set)}
    client = AsyncOpenAI(base_url=args.url, api_key="unused", timeout=900, max_retries=0)
    model = (await client.models.list()).data[0].id
    print(f"{'example':<22} {'runs':>4} {'incomplete':>10} {'not JSON':>8} {'median tokens':>13}")
    for name in EXAMPLES:
        tally = await run_example(client, model, name, args.runs, extra)
        not_json = str(tally.not_json) if "text" in EXAMPLES[name] else "-"
        print(f"{name:<22} {args.runs:>4} {tally.incomplete:>10} {not_json:>8} "
              f"{statistics.median(tally.tokens or [0]):>13}")


if __name__ == "__main__":
    asyncio.run(main())
