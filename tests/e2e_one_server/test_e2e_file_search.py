"""Files, vector stores and `file_search` on the real server: the bundled model answering, the bundled embedding
model (all-MiniLM-L6-v2 on vLLM's pooling runner) embedding, through the openai SDK and the Agents SDK."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI

from conformance.contract import validate_events
from tests.servers import MODEL, RunningServer
from tests.sse import events_of, parse_frames

DOCS = {"cats.txt": "Cats are small carnivorous mammals. A cat sleeps between twelve and sixteen hours a day.",
        "rockets.txt": "A rocket engine burns propellant to make thrust. Liquid oxygen and kerosene power rockets.",
        "bread.txt": "Bread is made from flour, water and yeast. The dough rises as the yeast ferments sugars."}
QUESTIONS = {"How many hours a day does a cat sleep?": "cats.txt", "What fuel do rockets burn?": "rockets.txt",
             "Why does dough rise?": "bread.txt"}


@pytest.fixture(scope="module")
def store(server: RunningServer) -> str:
    """A store of DOCS, uploaded and ingested as the SDK's helper does (the embedding model starts here)."""
    client = server.client
    created = client.vector_stores.create(name="e2e", metadata={"suite": "e2e"})
    files = [(name, io.BytesIO(text.encode())) for name, text in DOCS.items()]
    batch = client.vector_stores.file_batches.upload_and_poll(vector_store_id=created.id, files=files,
                                                              poll_interval_ms=500)
    assert batch.status == "completed" and batch.file_counts.completed == len(DOCS), batch
    return created.id


def test_search_finds_each_questions_document_on_the_real_embedding_model(server: RunningServer, store: str) -> None:
    for question, expected in QUESTIONS.items():
        for weights in ({}, {"text_weight": 0.0}):  # hybrid, and the embedding model alone
            page = server.client.vector_stores.search(vector_store_id=store, query=question, max_num_results=3,
                                                      ranking_options={"hybrid_search": weights} if weights else {})
            assert page.data[0].filename == expected, (question, weights, page.data)
            assert page.data[0].content[0].text == DOCS[expected]


def _tool(store: str) -> dict[str, Any]:
    return {"type": "file_search", "vector_store_ids": [store], "max_num_results": 2}


def test_the_model_calls_file_search_with_results_and_citations_streamed_and_not(server: RunningServer,
                                                                                 store: str) -> None:
    body = {"model": MODEL, "input": "How many hours a day does a cat sleep? Cite the result.",
            "tools": [_tool(store)], "tool_choice": {"type": "file_search"}, "include": ["file_search_call.results"],
            "max_output_tokens": 120, "temperature": 0}
    answer = server.client.responses.create(**body)
    with httpx.stream("POST", f"{server.base_url}/responses", json={**body, "stream": True}, timeout=600) as response:
        assert response.status_code == 200, response.read()
        streamed = validate_events(events_of(parse_frames(response.iter_lines())))
    for final in (answer, streamed):
        call = final.output[0]
        assert call.type == "file_search_call" and call.status == "completed", final.output
        assert call.queries and call.results, call  # type: ignore[union-attr]
        found = {result.file_id for result in call.results}  # type: ignore[union-attr]
        for item in final.output[1:]:
            for part in getattr(item, "content", None) or []:
                for annotation in getattr(part, "annotations", None) or []:
                    assert annotation.type == "file_citation" and annotation.file_id in found, annotation


def test_the_agents_sdk_file_search_tool_runs_on_the_server(server: RunningServer, store: str) -> None:
    from agents import Agent, FileSearchTool, ModelSettings, OpenAIResponsesModel, Runner, set_tracing_disabled

    set_tracing_disabled(True)

    async def run() -> Any:
        client = AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=600)
        agent = Agent(name="librarian", instructions="Answer from the files.",
                      tools=[FileSearchTool(vector_store_ids=[store], max_num_results=2, include_search_results=True)],
                      model=OpenAIResponsesModel(model=MODEL, openai_client=client),
                      model_settings=ModelSettings(tool_choice="file_search", max_tokens=256, temperature=0))
        return await Runner.run(agent, "What fuel do rockets burn?", max_turns=2)

    result = asyncio.run(run())
    calls = [item.raw_item for item in result.new_items if getattr(item.raw_item, "type", None) == "file_search_call"]
    assert calls and calls[0].status == "completed" and calls[0].results, result.new_items


def test_a_forced_search_closes_and_runs_within_a_small_budget(server: RunningServer, store: str) -> None:
    """A forced file_search under `max_output_tokens: 64` was cut mid-query at temperature 1.0 (one seed in three):
    the call incomplete, never run. Its arguments now close by the schema before the budget ends, and it runs. From
    48 tokens: SmolLM2 writes the call's head (`<tool_call>`, name) in 15 tokens, and the shortest arguments and
    end in bytes (`{"queries":["a"]}}` and `</tool_call>`) take 31 more; below that, no call fits."""
    cases = [(budget, seed) for budget in (48, 56, 64) for seed in (1, 2, 3)]

    async def run() -> list[Any]:
        client = AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=600)
        return await asyncio.gather(*(client.responses.create(
            model=MODEL, input="Search the files for bread recipes and summarize what you find in detail.",
            tools=[_tool(store)], tool_choice={"type": "file_search"}, include=["file_search_call.results"],
            max_output_tokens=budget, temperature=1.0, extra_body={"seed": seed}) for budget, seed in cases))

    for (budget, seed), response in zip(cases, asyncio.run(run())):
        call = response.output[0]
        assert call.type == "file_search_call" and call.status == "completed", (budget, seed, response.output)
        assert call.queries and call.results is not None, (budget, seed, call)
        assert response.usage is not None and response.usage.output_tokens <= budget


def test_deferred_tools_are_searched_on_the_real_model_and_embedding_model(server: RunningServer, store: str) -> None:
    """Through the SDK: a request's deferred tools cost the prompt their names alone (input_tokens counted by the
    SDK's helper), and a forced search streams its call and its output, which the SDK's accumulator folds."""
    from tests.test_tool_search import TOOLS, _undeferred

    client = server.client
    deferred = client.responses.input_tokens.count(model=MODEL, input="Weather?", tools=TOOLS)  # type: ignore[arg-type]
    whole = client.responses.input_tokens.count(model=MODEL, input="Weather?", tools=_undeferred(TOOLS))  # type: ignore[arg-type]
    assert deferred.input_tokens < whole.input_tokens
    body = {"model": MODEL, "input": "What is the weather in Paris?", "tools": TOOLS,
            "tool_choice": {"type": "tool_search"}, "max_output_tokens": 96, "temperature": 0}
    with client.responses.stream(**body) as stream:  # type: ignore[arg-type]
        for _ in stream:
            pass
        final = stream.get_final_response()
    with httpx.stream("POST", f"{server.base_url}/responses", json={**body, "stream": True}, timeout=600) as answer:
        streamed = validate_events(events_of(parse_frames(answer.iter_lines())))
    assert [item.type for item in streamed.output] == [item.type for item in final.output]
    assert [item.type for item in final.output[:2]] == ["tool_search_call", "tool_search_output"], final.output
    call, found = final.output[:2]
    assert call.execution == "server" and call.status == "completed" and found.call_id == call.call_id  # type: ignore[union-attr]
