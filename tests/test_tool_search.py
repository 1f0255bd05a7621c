"""Deferred tools and tool search (issue 64): deferred tools stay out of the prompt, the server's search loads what
it finds for the rest of the response and its chain, a client's search is the client's to answer; through the real
app with a scripted engine (hermes), the events checked by the contract."""

from __future__ import annotations

import json
from typing import Any, Iterator

import pytest

from conformance.contract import validate_events
from server.config import ServerConfig
from server.http.app import create_app
from server.runs.context import ServingContext
from server.tools.tool_search import found_tools
from streaming.ids import counting_ids
from tests.conftest import serve_in_thread
from tests.scripted_engine import ScriptedEngine
from tests.test_grammar_closing import harmony  # noqa: F401  (fixture: the harmony path on a scripted engine)
from tests.test_hosted_tools import call_text, prompt_text, script
from tests.test_server import MODEL, Harness
from tests.test_store import open_url

WEATHER_MARK = "fahrenheit_or_celsius"  # in the deferred tool's schema only: seen in a prompt once it is loaded
ORDERS_MARK = "customer_reference_number"
WEATHER = {"type": "function", "name": "get_weather", "description": "Get the current weather for a city.",
           "defer_loading": True, "parameters": {"type": "object", "properties": {
               "city": {"type": "string"}, WEATHER_MARK: {"type": "string"}}, "required": ["city"]}}
CRM = {"type": "namespace", "name": "crm", "description": "CRM tools for customer lookup and order management.",
       "tools": [{"type": "function", "name": "list_open_orders", "description": "List open orders for a customer.",
                  "defer_loading": True, "parameters": {"type": "object", "properties": {
                      ORDERS_MARK: {"type": "string"}}, "required": [ORDERS_MARK]}},
                 {"type": "function", "name": "refund_order", "description": "Refund an order by its id.",
                  "defer_loading": True, "parameters": {"type": "object", "properties": {
                      "order_id": {"type": "string"}}, "required": ["order_id"]}}]}
TIME = {"type": "function", "name": "get_time", "description": "Get the time in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
TOOLS = [TIME, WEATHER, CRM, {"type": "tool_search"}]


@pytest.fixture(scope="module")
def served(tokenizer: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    database = tmp_path_factory.mktemp("tool_search") / "responses.db"
    context = ServingContext(config=ServerConfig(served_model_name=MODEL, tool_call_parser="hermes"),
                             engine_factory=lambda: engine, ids=counting_ids(), records=open_url(f"sqlite:///{database}"))
    with serve_in_thread(create_app(context)) as base_url:
        yield Harness(engine, base_url)


def _undeferred(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for tool in tools:
        if tool["type"] == "tool_search":
            continue
        tool = {key: value for key, value in tool.items() if key != "defer_loading"}
        if tool["type"] == "namespace":
            tool["tools"] = _undeferred(tool["tools"])
        out.append(tool)
    return out


def test_deferred_tools_stay_out_of_the_prompt_and_input_tokens_show_it(served: Harness, tokenizer: Any) -> None:
    """Before, `defer_loading` was ignored (every tool rendered whole) and `tool_search` dropped. Now the model sees
    the search, with the deferred tools' names and descriptions (a namespace's own), not their schemas."""
    served.play(script(tokenizer, "Hello."), script(tokenizer, "Hello."))
    deferred = served.post(input="Hi", tools=TOOLS).json()
    prompt = prompt_text(served, tokenizer)
    assert "tool_search" in prompt and "get_weather" in prompt and "CRM tools" in prompt
    assert WEATHER_MARK not in prompt and ORDERS_MARK not in prompt and "refund_order" not in prompt
    assert "get_time" in prompt  # not deferred: offered as before
    whole = served.post(input="Hi", tools=_undeferred(TOOLS)).json()
    assert WEATHER_MARK in prompt_text(served, tokenizer)
    assert deferred["usage"]["input_tokens"] < whole["usage"]["input_tokens"]


def _types(output: list[Any]) -> list[str]:
    return [item.type for item in output]


def test_a_hosted_search_loads_what_it_finds_for_the_rest_of_the_response_and_its_chain(served: Harness,
                                                                                       tokenizer: Any) -> None:
    served.play(script(tokenizer, call_text("tool_search", {"query": "weather in a city"})),
                script(tokenizer, call_text("get_weather", {"city": "Paris"})))
    before = len(served.engine.requests)
    final = validate_events(served.raw_stream(input="Weather in Paris?", tools=TOOLS))
    assert _types(final.output) == ["tool_search_call", "tool_search_output", "function_call"], final.output
    call, found, weather = final.output
    assert call.execution == "server" and call.status == "completed"  # type: ignore[union-attr]
    assert call.arguments == {"query": "weather in a city"}  # type: ignore[union-attr]
    assert found.call_id == call.call_id and found.execution == "server"  # type: ignore[union-attr]
    assert [tool.name for tool in found.tools] == ["get_weather"]  # type: ignore[union-attr]
    assert weather.name == "get_weather" and json.loads(weather.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
    assert len(served.engine.requests) - before == 2
    assert WEATHER_MARK not in prompt_text(served, tokenizer, before) and WEATHER_MARK in prompt_text(served, tokenizer)
    served.play(script(tokenizer, "Sunny."))  # the chain: the loaded tool is there for the next turn
    served.post(previous_response_id=final.id, tools=TOOLS,
                input=[{"type": "function_call_output", "call_id": weather.call_id, "output": "sunny"}])  # type: ignore[union-attr]
    assert WEATHER_MARK in prompt_text(served, tokenizer) and ORDERS_MARK not in prompt_text(served, tokenizer)
    served.play(script(tokenizer, "Sunny."))  # stateless: the items sent back as the SDK types them
    items = [item.model_dump(exclude_none=True) for item in final.output]
    served.post(store=False, tools=TOOLS, input=[{"role": "user", "content": "Weather in Paris?"}, *items,
                                                 {"type": "function_call_output", "call_id": weather.call_id,  # type: ignore[union-attr]
                                                  "output": "sunny"}])
    assert WEATHER_MARK in prompt_text(served, tokenizer)


def test_a_namespace_search_loads_its_members_and_their_calls_name_it(served: Harness, tokenizer: Any) -> None:
    served.play(script(tokenizer, call_text("tool_search", {"query": "open orders of a customer"})),
                script(tokenizer, call_text("crm__list_open_orders", {ORDERS_MARK: "42"})))
    final = validate_events(served.raw_stream(input="Orders of customer 42?", tools=TOOLS))
    assert _types(final.output) == ["tool_search_call", "tool_search_output", "function_call"], final.output
    found = final.output[1].tools  # type: ignore[union-attr]
    assert [(tool.type, tool.name) for tool in found] == [("namespace", "crm")]
    assert "list_open_orders" in [member.name for member in found[0].tools]  # type: ignore[union-attr]
    call = final.output[2]
    assert (call.namespace, call.name) == ("crm", "list_open_orders")  # type: ignore[union-attr]


def test_a_client_search_is_the_clients_to_answer_and_what_it_sends_back_is_loaded(served: Harness,
                                                                                   tokenizer: Any) -> None:
    tools = [WEATHER, {"type": "tool_search", "execution": "client", "description": "Find tools by name.",
                       "parameters": {"type": "object", "properties": {"paths": {"type": "array",
                                                                                 "items": {"type": "string"}}}}}]
    served.play(script(tokenizer, call_text("tool_search", {"paths": ["get_weather"]})))
    final = validate_events(served.raw_stream(input="Weather?", tools=tools))
    assert final.status == "completed" and _types(final.output) == ["tool_search_call"], final.output
    call = final.output[0]
    assert call.execution == "client" and call.arguments == {"paths": ["get_weather"]}  # type: ignore[union-attr]
    served.play(script(tokenizer, "Loaded."))
    loaded = {key: value for key, value in WEATHER.items() if key != "defer_loading"}
    served.post(previous_response_id=final.id, tools=tools, input=[
        {"type": "tool_search_output", "call_id": call.call_id, "execution": "client", "tools": [loaded]}])  # type: ignore[union-attr]
    assert WEATHER_MARK in prompt_text(served, tokenizer)


def test_tool_choice_may_force_the_search(served: Harness, tokenizer: Any) -> None:
    served.play(script(tokenizer, call_text("tool_search", {"query": "weather"})), script(tokenizer, "Found it."))
    final = validate_events(served.raw_stream(input="Hi", tools=TOOLS, tool_choice={"type": "tool_search"}))
    assert _types(final.output)[:2] == ["tool_search_call", "tool_search_output"]
    tag = served.engine.requests[-2].sampling.structural_tag
    assert tag is not None and "tool_search" in tag and "get_time" not in tag


def test_the_search_ranks_by_name_and_description_and_selects_paths() -> None:
    catalog = _undeferred([WEATHER, CRM])
    assert [tool["name"] for tool in found_tools(catalog, {"query": "weather"})] == ["get_weather"]
    by_namespace = found_tools(catalog, {"paths": ["crm"]})
    assert [tool["name"] for tool in by_namespace[0]["tools"]] == ["list_open_orders", "refund_order"]
    refund = found_tools(catalog, {"query": "refund an order"})
    assert [(tool["name"], [member["name"] for member in tool["tools"]]) for tool in refund] == \
        [("crm", ["refund_order"])]
    assert found_tools(catalog, {"query": "zebra"}) == []
    nearest = found_tools(catalog, {"query": "x"}, similarity=[0.1, 0.5, 0.3])  # (weather, list, refund)
    assert [member["name"] for member in nearest[0]["tools"]] == ["list_open_orders", "refund_order"]


def test_a_search_over_the_websocket_loads_the_tool_for_the_next_turn(served: Harness, tokenizer: Any) -> None:
    from tests.test_websocket import _until_terminal

    served.play(script(tokenizer, call_text("tool_search", {"query": "weather"})), script(tokenizer, "Searched."),
                script(tokenizer, "Sunny."))
    with served.client.responses.connect() as conn:
        conn.response.create(model=MODEL, input="Weather?", tools=TOOLS, store=False)  # type: ignore[arg-type]
        first = validate_events([event.to_dict() for event in _until_terminal(conn)])
        conn.response.create(model=MODEL, input="And now?", tools=TOOLS, store=False,  # type: ignore[arg-type]
                             previous_response_id=first.id)
        validate_events([event.to_dict() for event in _until_terminal(conn)])
    assert _types(first.output) == ["tool_search_call", "tool_search_output", "message"]
    assert WEATHER_MARK in prompt_text(served, tokenizer)


def test_the_harmony_path_searches_and_calls_what_it_loaded(harmony: Harness) -> None:
    from server.paths.harmony import harmony_encoding
    from tests.scripted_engine import steps_from_tokens

    encoding = harmony_encoding()

    def said(text: str) -> list[Any]:
        tokens = encoding.encode(text, allowed_special="all")
        return steps_from_tokens(tokens, cuts=list(range(1, len(tokens), 2)))

    harmony.play(said('<|channel|>commentary to=functions.tool_search <|constrain|>json<|message|>'
                      '{"query": "weather"}<|call|>'),
                 said('<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>'
                      '{"city": "Paris"}<|call|>'))
    final = validate_events(harmony.raw_stream(input="Weather in Paris?", tools=TOOLS))
    assert _types(final.output) == ["tool_search_call", "tool_search_output", "function_call"], final.output
    first, second = (encoding.decode(request.prompt_token_ids) for request in harmony.engine.requests[-2:])
    assert "tool_search" in first and WEATHER_MARK not in first and WEATHER_MARK in second


def test_a_tool_search_output_holding_anything_is_read_without_failing(served: Harness, tokenizer: Any) -> None:
    """A client's `tool_search_output` is the client's: tools that are not tool definitions are passed over."""
    served.play(script(tokenizer, "Fine."))
    answer = served.post(tools=TOOLS, input=[
        {"type": "tool_search_call", "call_id": "c1", "execution": "client", "arguments": {"paths": ["x"]}},
        {"type": "tool_search_output", "call_id": "c1", "execution": "client",
         "tools": [1, "x", {"type": "namespace", "name": "n", "tools": 5}, {"type": "mcp", "allowed_tools": 7},
                   {"type": "namespace", "name": "crm", "tools": [{"name": "refund_order"}, 3]}]},
        {"role": "user", "content": "Go on."}])
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize(("search", "param"), [({"type": "tool_search", "execution": "elsewhere"}, "tools[1].execution"),
                                               ({"type": "tool_search", "execution": "client", "parameters": "x"},
                                                "tools[1].parameters")])
def test_a_tool_search_tool_that_cannot_be_is_a_400_naming_it(served: Harness, search: dict[str, Any],
                                                             param: str) -> None:
    answer = served.post(tools=[WEATHER, search], input="hi")
    assert answer.status_code == 400 and answer.json()["error"]["param"] == param, answer.text
