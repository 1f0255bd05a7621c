"""Deferred tools and tool search: what deferring saves of the prompt, and how often the lexical search finds the tool
a request needs.

    .venv/bin/python bench/tool_search.py [--out bench/results]

A catalog of 30 tools in 6 namespaces (CRM, calendar, files, code hosting, billing, weather), each with a schema of
the size agents send. Search: one query per tool, written as a user would ask for it (most share few words with the
tool's name), through the server's search (server/tools/tool_search.py, in process), by words alone and on the
bundled embedding model (all-MiniLM-L6-v2 on vLLM's pooling runner, as the server starts it): how often the tool
wanted is the first found, and among those loaded (at most 3). Prompt: one server of the bundled model counts `usage.input_tokens`
(`POST /v1/responses/input_tokens`) of one request with the catalog offered whole, deferred behind `tool_search`,
and deferred with one namespace loaded by a search. Writes tool_search.json to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.servers import ENGINE_FLAGS, Server  # noqa: E402
from server.tools.tool_search import ToolSearch  # noqa: E402

PORT = 8724
# namespace -> (its description, [(tool, its description, its parameters, a user's query for it)])
CATALOG: dict[str, tuple[str, list[tuple[str, str, list[str], str]]]] = {
    "crm": ("Customer records, contacts and orders.", [
        ("find_customer", "Find a customer by name, email or phone number.", ["name", "email", "phone"],
         "look up the client whose email is ann@example.com"),
        ("list_open_orders", "List the open orders of a customer.", ["customer_id", "since"],
         "which orders has customer 42 not received yet"),
        ("refund_order", "Refund an order, fully or in part.", ["order_id", "amount", "reason"],
         "give the money back for order 981"),
        ("add_note", "Add a note to a customer's record.", ["customer_id", "text"],
         "write down on Ann's record that she called"),
        ("merge_customers", "Merge two duplicate customer records into one.", ["keep_id", "merge_id"],
         "these two customer entries are the same person, combine them")]),
    "calendar": ("Events, meetings and availability.", [
        ("create_event", "Create a calendar event with attendees.", ["title", "start", "end", "attendees"],
         "schedule a meeting with Bob tomorrow at 3"),
        ("find_free_slots", "Find times when all attendees are free.", ["attendees", "duration", "within"],
         "when are Ann and Bob both available next week"),
        ("cancel_event", "Cancel an event and notify its attendees.", ["event_id", "message"],
         "call off friday's standup"),
        ("list_events", "List the events in a date range.", ["start", "end"],
         "what is on my agenda today"),
        ("move_event", "Move an event to another time.", ["event_id", "start"],
         "reschedule the review to monday morning")]),
    "files": ("Documents and folders in the shared drive.", [
        ("search_documents", "Search documents by their text.", ["query", "folder"],
         "find the document that mentions the Q3 budget"),
        ("read_document", "Read a document's content.", ["document_id"],
         "open the onboarding guide and show me what it says"),
        ("share_document", "Share a document with people, as viewers or editors.", ["document_id", "emails", "role"],
         "let Carol edit the design doc"),
        ("create_folder", "Create a folder.", ["name", "parent"],
         "make a new directory for the 2027 plans"),
        ("delete_document", "Delete a document.", ["document_id"],
         "remove the old draft from the drive")]),
    "code": ("Repositories, pull requests and issues on the code host.", [
        ("open_pull_request", "Open a pull request from a branch.", ["repo", "branch", "title", "body"],
         "propose merging my feature branch into main"),
        ("list_issues", "List a repository's issues, filtered by label.", ["repo", "labels", "state"],
         "which bugs are still open in the api repo"),
        ("comment_on_issue", "Comment on an issue or pull request.", ["repo", "number", "text"],
         "reply on ticket 17 that it is fixed"),
        ("merge_pull_request", "Merge a pull request.", ["repo", "number", "method"],
         "land PR 204 with a squash"),
        ("get_file", "Read a file of a repository at a commit.", ["repo", "path", "ref"],
         "show me the README of the web repo")]),
    "billing": ("Invoices, payments and subscriptions.", [
        ("create_invoice", "Create an invoice for a customer.", ["customer_id", "lines", "due"],
         "bill Acme for March's consulting"),
        ("list_payments", "List the payments received in a date range.", ["start", "end"],
         "how much money came in last month"),
        ("cancel_subscription", "Cancel a customer's subscription.", ["subscription_id", "at_period_end"],
         "stop Ann's plan from renewing"),
        ("apply_discount", "Apply a discount code to a subscription.", ["subscription_id", "code"],
         "give this customer 20 percent off with code SPRING"),
        ("send_reminder", "Send a reminder for an unpaid invoice.", ["invoice_id"],
         "nudge the client about the overdue invoice")]),
    "weather": ("Forecasts and current conditions.", [
        ("current_weather", "The current weather in a city.", ["city", "units"],
         "is it raining in Paris right now"),
        ("forecast", "The forecast for the coming days in a city.", ["city", "days"],
         "will it be sunny in Rome this weekend"),
        ("air_quality", "The air quality index in a city.", ["city"],
         "how polluted is the air in Delhi today"),
        ("sunrise_sunset", "The times of sunrise and sunset in a city.", ["city", "date"],
         "when does the sun come up in Oslo tomorrow"),
        ("weather_alerts", "Severe weather warnings for a region.", ["region"],
         "are there any storm warnings for Florida")]),
}


def tools(deferred: bool) -> list[dict[str, Any]]:
    """The catalog as a request's `tools`: one namespace each, its members deferred or not."""
    flag = {"defer_loading": True} if deferred else {}
    return [{"type": "namespace", "name": namespace, "description": description, "tools": [
        {"type": "function", "name": name, "description": text, "strict": False, **flag, "parameters": {
            "type": "object", "additionalProperties": False, "required": parameters[:1],
            "properties": {parameter: {"type": "string", "description": f"The {parameter.replace('_', ' ')} "
                                                                         f"this call applies to."}
                           for parameter in parameters}}}
        for name, text, parameters, _ in members]} for namespace, (description, members) in CATALOG.items()]


async def search_quality(embedded: bool) -> dict[str, Any]:
    search = ToolSearch({"type": "tool_search"}, await embedder() if embedded else None)
    search.offered(tools(deferred=True), [])
    first = loaded = 0
    misses = []
    for namespace, (_, members) in CATALOG.items():
        for name, _, _, query in members:
            result = await search.call(json.dumps({"query": query}))
            found = [(space["name"], member["name"]) for space in result.data or []
                     for member in space.get("tools", [])]
            first += bool(found) and found[0] == (namespace, name)
            loaded += (namespace, name) in found
            if (namespace, name) not in found:
                misses.append(query)
    total = sum(len(members) for _, members in CATALOG.values())
    return {"queries": total, "first": first / total, "loaded": loaded / total, "missed": misses}


async def embedder() -> Any:
    """The server's embedding path: the bundled model on vLLM's pooling runner, a text's vector as a query's."""
    from server.engine.vllm_embedder import VllmEmbedder
    from server.retrieval.embedding_model import BUNDLED_EMBEDDING_MODEL, ensure_embedding_model, window_tokens
    from server.retrieval.embeddings import Embeddings, embedding_model

    path = ensure_embedding_model()
    model = embedding_model(BUNDLED_EMBEDDING_MODEL, path, window_tokens(path))
    embeddings = Embeddings(model, lambda: VllmEmbedder.start(model.path, model.name, model.window))
    return embeddings.query_vector


def prompt_tokens(model: str) -> dict[str, int]:
    def count(body_tools: list[dict[str, Any]], extra: list[dict[str, Any]] | None = None) -> int:
        answer = httpx.post(f"http://127.0.0.1:{PORT}/v1/responses/input_tokens", timeout=120, json={
            "model": model, "tools": body_tools, "input": [{"role": "user", "content": "Schedule a meeting."},
                                                            *(extra or [])]})
        answer.raise_for_status()
        return int(answer.json()["input_tokens"])

    deferred = [*tools(deferred=True), {"type": "tool_search"}]
    calendar = next(tool for tool in tools(deferred=False) if tool["name"] == "calendar")
    searched = [{"type": "tool_search_call", "call_id": "call_1", "execution": "server", "status": "completed",
                 "arguments": {"query": "calendar meeting"}},
                {"type": "tool_search_output", "call_id": "call_1", "execution": "server", "status": "completed",
                 "tools": [calendar]}]
    return {"whole": count(tools(deferred=False)), "deferred": count(deferred),
            "deferred, one namespace loaded": count(deferred, searched), "no tools": count([])}


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = options.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from server.bundled_model import BUNDLED_MODEL_NAME

    quality = {how: asyncio.run(search_quality(how == "embedding")) for how in ("words", "embedding")}
    for how, measured in quality.items():
        print(f"search by {how}: the tool wanted first in {measured['first']:.0%} of {measured['queries']} queries, "
              f"loaded in {measured['loaded']:.0%}", flush=True)
    with Server([sys.executable, "-m", "server", "--port", str(PORT), *ENGINE_FLAGS, "--max-model-len", "8192"], PORT,
                args.out / "tool_search.log"):
        tokens = prompt_tokens(BUNDLED_MODEL_NAME)
    print("input tokens: " + ", ".join(f"{name} {count}" for name, count in tokens.items()))
    (args.out / "tool_search.json").write_text(json.dumps({"search": quality, "input_tokens": tokens}, indent=1))


if __name__ == "__main__":
    main()
