"""MCP servers run by the server, through the real app, with a scripted engine and REAL MCP servers (the `mcp`
package on free ports): listing, calls, approvals, failures, secrets, chains."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from conformance.contract import validate_events
from server.config import ServerConfig
from server.http.app import create_app
from server.runs.context import ServingContext
from server.tools.function_view import NOT_APPROVED
from server.tools.mcp_servers import McpSettings
from streaming.ids import counting_ids
from tests.conftest import free_port, serve_in_thread
from tests.mcp_servers import CANCELLED_WAITS, RunningMcp, browser, mcp  # noqa: F401  (fixtures)
from tests.scripted_engine import ScriptedEngine, steps_from_tokens
from tests.test_server import MODEL, Harness
from tests.test_store import open_url

SECRET = "sk-mcp-secret-4f9a1c"  # must reach the MCP server, and nowhere else


def call_text(name: str, arguments: dict[str, Any]) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hosted") / "responses.db"


@pytest.fixture(scope="module")
def served(tokenizer: Any, mcp: RunningMcp, browser: RunningMcp, database: Path) -> Iterator[Harness]:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    settings = McpSettings(servers={"calc": mcp.url}, allowed_domains=("127.0.0.1",), connect_seconds=5,
                           call_seconds=10, tool_servers={"browser": browser.url, "python": mcp.url})
    config = ServerConfig(served_model_name=MODEL, tool_call_parser="hermes", mcp=settings)
    context = ServingContext(config=config, engine_factory=lambda: engine, ids=counting_ids(),
                             records=open_url(f"sqlite:///{database}"))
    with serve_in_thread(create_app(context)) as base_url:
        yield Harness(engine, base_url)


def script(tokenizer: Any, text: str) -> list[Any]:
    ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
    return steps_from_tokens(ids, cuts=list(range(1, len(ids), 3)))


def mcp_tool(url: str | None = None, **fields: Any) -> dict[str, Any]:
    where = {"server_url": url} if url else {}
    return {"type": "mcp", "server_label": "calc", "require_approval": "never", **where, **fields}


def prompt_text(harness: Harness, tokenizer: Any, request: int = -1) -> str:
    return tokenizer.decode(harness.engine.requests[request].prompt_token_ids)


def test_a_call_lists_once_runs_on_the_mcp_server_and_the_model_answers(served: Harness, tokenizer: Any,
                                                                       mcp: RunningMcp) -> None:
    served.play(script(tokenizer, call_text("calc__add", {"a": 2, "b": 3})), script(tokenizer, "The sum is 5."))
    before = len(served.engine.requests)
    events = served.raw_stream(input="What is 2+3?", tools=[mcp_tool(mcp.url)])
    final = validate_events(events)
    assert [item.type for item in final.output] == ["mcp_list_tools", "mcp_call", "message"], final.error
    listing, call, answer = final.output
    assert {tool.name for tool in listing.tools} == {"add", "explode", "search", "wait", "python"}  # type: ignore[union-attr]
    assert (call.server_label, call.name, call.output, call.error) == ("calc", "add", "5", None)  # type: ignore[union-attr]
    assert json.loads(call.arguments) == {"a": 2, "b": 3}  # type: ignore[union-attr]
    assert final.output_text == "The sum is 5."
    assert len(served.engine.requests) - before == 2, "one pass to call, one to answer"
    assert "5" in prompt_text(served, tokenizer).split("What is 2+3?")[1], "the answer's pass reads the output"
    kinds = [event["type"] for event in events]
    for expected in ("response.mcp_list_tools.in_progress", "response.mcp_list_tools.completed",
                     "response.mcp_call.in_progress", "response.mcp_call_arguments.delta",
                     "response.mcp_call_arguments.done", "response.mcp_call.completed"):
        assert expected in kinds
    assert kinds.index("response.mcp_call_arguments.done") < kinds.index("response.mcp_call.completed")
    assert final.usage is not None
    both = [len(request.prompt_token_ids) for request in served.engine.requests[before:]]
    assert final.usage.input_tokens == sum(both), "every pass is counted in usage"
    stored = served.client.responses.retrieve(final.id)
    assert stored.output == final.output


def test_the_sdk_accumulates_a_hosted_call_stream(served: Harness, tokenizer: Any, mcp: RunningMcp) -> None:
    served.play(script(tokenizer, call_text("calc__add", {"a": 1, "b": 1})), script(tokenizer, "2"))
    with served.client.responses.stream(model=MODEL, input="1+1?", tools=[mcp_tool(mcp.url)]) as stream:  # type: ignore[list-item]
        for _ in stream:
            pass
        final = stream.get_final_response()
    assert [item.type for item in final.output] == ["mcp_list_tools", "mcp_call", "message"]
    json_body = served.post(input="1+1?", tools=[mcp_tool(mcp.url)])  # the same, not streamed
    assert json_body.status_code == 200, json_body.text


def test_a_registered_server_is_named_by_its_label_alone(served: Harness, tokenizer: Any) -> None:
    served.play(script(tokenizer, call_text("calc__search", {"query": "paris"})), script(tokenizer, "Found."))
    response = served.post(input="Search for paris", tools=[mcp_tool()])
    assert response.status_code == 200, response.text
    call = response.json()["output"][1]
    assert call["type"] == "mcp_call" and "capital of France" in call["output"]


def test_a_failing_tool_gives_an_error_and_the_model_goes_on(served: Harness, tokenizer: Any) -> None:
    served.play(script(tokenizer, call_text("calc__explode", {"reason": "test"})), script(tokenizer, "It failed."))
    events = served.raw_stream(input="Explode", tools=[mcp_tool()])
    final = validate_events(events)
    call = final.output[1]
    assert call.type == "mcp_call" and call.status == "failed" and call.output is None  # type: ignore[union-attr]
    assert call.error is not None and call.error.type == "mcp_tool_execution_error"  # type: ignore[union-attr]
    assert "response.mcp_call.failed" in {event["type"] for event in events}
    assert final.status == "completed" and final.output_text == "It failed."


def test_a_chained_turn_does_not_list_again(served: Harness, tokenizer: Any) -> None:
    served.play(script(tokenizer, call_text("calc__add", {"a": 2, "b": 2})), script(tokenizer, "4"),
                script(tokenizer, call_text("calc__add", {"a": 4, "b": 4})), script(tokenizer, "8"))
    first = served.post(input="2+2?", tools=[mcp_tool()]).json()
    second = served.post(input="and 4+4?", tools=[mcp_tool()], previous_response_id=first["id"])
    assert second.status_code == 200, second.text
    assert [item["type"] for item in second.json()["output"]] == ["mcp_call", "message"]
    stateless = served.post(input=[*first["output"], {"role": "user", "content": "and 4+4?"}], tools=[mcp_tool()],
                            store=False)
    assert [item["type"] for item in stateless.json()["output"]] == ["mcp_call", "message"]


def test_an_mcp_server_is_listed_once_per_response_however_many_calls_and_never_on_a_chained_turn(
        served: Harness, tokenizer: Any, mcp: RunningMcp) -> None:
    """Counted on the MCP server's side: the mcp SDK's `call_tool` listed the tools again in each call's session
    (to check its output schema), so a response with three calls listed four times."""
    calls = [script(tokenizer, call_text("calc__add", {"a": n, "b": n})) for n in (1, 2, 3)]
    served.play(*calls, script(tokenizer, "Done."))
    before = mcp.listings()
    first = served.post(input="Add three times.", tools=[mcp_tool(mcp.url)]).json()
    assert [item["type"] for item in first["output"]] == ["mcp_list_tools", *["mcp_call"] * 3, "message"]
    assert [call["output"] for call in first["output"][1:4]] == ["2", "4", "6"]
    assert mcp.listings() - before == 1
    served.play(script(tokenizer, call_text("calc__add", {"a": 4, "b": 4})), script(tokenizer, "8"))
    second = served.post(input="and 4+4?", tools=[mcp_tool(mcp.url)], previous_response_id=first["id"]).json()
    assert [item["type"] for item in second["output"]] == ["mcp_call", "message"]
    assert second["output"][0]["output"] == "8"
    assert mcp.listings() - before == 1, "a chained turn lists nothing"


def test_approval_then_approve_runs_the_call_with_its_request_id(served: Harness, tokenizer: Any) -> None:
    served.play(script(tokenizer, call_text("calc__add", {"a": 20, "b": 22})), script(tokenizer, "It is 42."))
    tool = mcp_tool(require_approval="always")
    asked = served.post(input="20+22?", tools=[tool]).json()
    assert [item["type"] for item in asked["output"]] == ["mcp_list_tools", "mcp_approval_request"]
    assert len(served.engine.requests) and asked["status"] == "completed"
    request = asked["output"][1]
    served.play(script(tokenizer, "It is 42."))
    answer = served.post(previous_response_id=asked["id"], tools=[tool], input=[
        {"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": True}])
    assert answer.status_code == 200, answer.text
    call, message = answer.json()["output"]
    assert (call["type"], call["approval_request_id"], call["output"]) == ("mcp_call", request["id"], "42")
    assert message["content"][0]["text"] == "It is 42."
    items = served.client.responses.input_items.list(answer.json()["id"]).data
    assert items[0].type == "mcp_approval_response" and items[0].id, "a stored approval response has an id"


def test_a_refused_call_is_never_run(served: Harness, tokenizer: Any, mcp: RunningMcp) -> None:
    served.play(script(tokenizer, call_text("calc__python", {"code": "print(1)"})))
    tool = mcp_tool(require_approval={"always": {"tool_names": ["python"]}, "never": {"tool_names": ["add"]}})
    asked = served.post(input="run it", tools=[tool]).json()
    request = asked["output"][-1]
    assert request["type"] == "mcp_approval_request" and request["name"] == "python"
    calls_before = len(mcp.recorder.headers)
    served.play(script(tokenizer, "I did not run it."))
    answer = served.post(previous_response_id=asked["id"], tools=[tool], input=[
        {"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": False}]).json()
    assert [item["type"] for item in answer["output"]] == ["message"]
    assert len(mcp.recorder.headers) == calls_before, "nothing reached the MCP server"
    assert NOT_APPROVED in prompt_text(served, tokenizer), "the model reads that the call was refused"


def test_a_url_whose_host_is_not_allowed_is_a_400_and_never_contacted(served: Harness, mcp: RunningMcp) -> None:
    before = len(mcp.recorder.headers)
    elsewhere = mcp.url.replace("127.0.0.1", "localhost")  # the same server, under a host the operator did not allow
    response = served.post(input="x", tools=[{"type": "function", "name": "f"}, mcp_tool(elsewhere)])
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "tools[1].server_url"
    assert len(mcp.recorder.headers) == before, "the server was not contacted"


def test_a_cancel_stops_a_background_call_in_flight(served: Harness, tokenizer: Any, mcp: RunningMcp) -> None:
    served.play(script(tokenizer, call_text("calc__wait", {"seconds": 9})), script(tokenizer, "Waited."))
    calls = sum(headers.get("mcp-method") == "tools/call" for headers in mcp.recorder.headers)
    started = served.client.responses.create(model=MODEL, input="wait", tools=[mcp_tool()],  # type: ignore[list-item]
                                             background=True)
    deadline = time.monotonic() + 8
    while sum(headers.get("mcp-method") == "tools/call" for headers in mcp.recorder.headers) == calls:
        assert time.monotonic() < deadline, "the call never reached the MCP server"
        time.sleep(0.05)
    cancelled = served.client.responses.cancel(started.id)
    assert cancelled.status == "cancelled", "cancelled while the call ran, not after it answered"
    assert [item.type for item in cancelled.output] == ["mcp_list_tools", "mcp_call"]
    assert cancelled.output[1].status == "incomplete"  # type: ignore[union-attr]
    while 9 not in CANCELLED_WAITS:
        assert time.monotonic() < deadline + 9, "the MCP server's call was not cut short"
        time.sleep(0.05)


def test_an_unreachable_server_is_a_424_or_a_failed_stream(served: Harness) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    response = served.post(input="x", tools=[mcp_tool(url)])
    assert response.status_code == 424, response.text
    assert "Error retrieving tool list from MCP server: 'calc'" in response.json()["error"]["message"]
    events = served.raw_stream(input="x", tools=[mcp_tool(url)])
    final = validate_events(events)
    kinds = [event["type"] for event in events]
    assert "response.mcp_list_tools.failed" in kinds and kinds[-1] == "response.failed"
    assert final.output[0].type == "mcp_list_tools" and final.output[0].error  # type: ignore[union-attr]


def test_the_authorization_reaches_the_server_and_nothing_else(served: Harness, tokenizer: Any,
                                                               mcp: RunningMcp, database: Path) -> None:
    served.play(script(tokenizer, call_text("calc__add", {"a": 1, "b": 2})), script(tokenizer, "3"))
    tool = mcp_tool(mcp.url, authorization=SECRET, headers={"X-Team": "blue"})
    with httpx.stream("POST", f"{served.base_url}/responses", timeout=30,
                      json={"model": MODEL, "input": "1+2?", "tools": [tool], "stream": True}) as streamed:
        body = streamed.read().decode()
    assert f"Bearer {SECRET}" in mcp.authorizations()
    assert any(headers.get("x-team") == "blue" for headers in mcp.recorder.headers)
    response_id = json.loads(body.split("data: ", 2)[1].split("\n")[0])["response"]["id"]
    stored = httpx.get(f"{served.base_url}/responses/{response_id}", timeout=30).text
    items = httpx.get(f"{served.base_url}/responses/{response_id}/input_items", timeout=30).text
    for text in (body, stored, items):
        assert SECRET not in text and "X-Team" not in text
    for path in database.parent.iterdir():  # the store's every byte (the database and its journal)
        assert SECRET.encode() not in path.read_bytes()


def test_max_tool_calls_bounds_the_loop(served: Harness, tokenizer: Any) -> None:
    served.play(script(tokenizer, call_text("calc__add", {"a": 1, "b": 1})), script(tokenizer, "Done."))
    response = served.post(input="add forever", tools=[mcp_tool()], max_tool_calls=1).json()
    assert [item["type"] for item in response["output"]] == ["mcp_list_tools", "mcp_call", "message"]
    assert "tools" not in prompt_text(served, tokenizer).split("add forever")[1], "the last pass offers no tool"


def test_max_output_tokens_bounds_all_the_passes_together(served: Harness, tokenizer: Any) -> None:
    first = script(tokenizer, call_text("calc__add", {"a": 5, "b": 6}))
    served.play(first, script(tokenizer, "Eleven."))
    response = served.post(input="5+6", tools=[mcp_tool()], max_output_tokens=100).json()
    first_pass = sum(len(step.token_ids) for step in first)
    assert served.engine.requests[-1].sampling.max_tokens == 100 - first_pass
    assert response["usage"]["output_tokens"] == first_pass + len(tokenizer.encode("Eleven.")) + 1


def test_tool_choice_mcp_forces_a_call_of_that_server(served: Harness, tokenizer: Any) -> None:
    served.play(script(tokenizer, call_text("calc__add", {"a": 3, "b": 4})), script(tokenizer, "7"))
    response = served.post(input="3+4", tools=[mcp_tool()],
                           tool_choice={"type": "mcp", "server_label": "calc", "name": "add"})
    assert response.status_code == 200, response.text
    assert served.engine.requests[-2].sampling.structural_tag is not None, "the first pass is held to the call"
    assert served.engine.requests[-1].sampling.structural_tag is None, "later passes are free"
    wrong = served.post(input="x", tools=[mcp_tool()], tool_choice={"type": "mcp", "server_label": "calc",
                                                                    "name": "nope"})
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "tool_choice.name"


@pytest.fixture(scope="module")
def gpt_oss(mcp: RunningMcp, browser: RunningMcp) -> Iterator[Harness]:
    engine = ScriptedEngine(tokenizer=None, scripts=[[]], max_model_len=131072)
    config = ServerConfig(served_model_name=MODEL, harmony=True, mcp=McpSettings(
        servers={"calc": mcp.url}, tool_servers={"browser": browser.url}))
    context = ServingContext(config=config, engine_factory=lambda: engine, ids=counting_ids())
    with serve_in_thread(create_app(context)) as base_url:
        yield Harness(engine, base_url)


def test_a_replayed_gpt_oss_turn_calls_the_mcp_server_then_answers(gpt_oss: Harness) -> None:
    from server.paths.harmony import harmony_encoding
    from tests.test_harmony import CALL, completion

    call = completion(("analysis", None, "I should search the corpus."),
                      ("commentary", "calc.search", '{"query": "harmony"}'), end=CALL)
    answer = completion(("final", None, "Harmony is the chat format of gpt-oss."))
    gpt_oss.play(steps_from_tokens(call, cuts=list(range(1, len(call), 2))),
                 steps_from_tokens(answer, cuts=list(range(1, len(answer), 2))))
    events = gpt_oss.raw_stream(input="What is harmony?", tools=[mcp_tool()])
    final = validate_events(events)
    assert [item.type for item in final.output] == ["mcp_list_tools", "reasoning", "mcp_call", "message"]
    assert "chat format gpt-oss models were trained on" in final.output[2].output  # type: ignore[union-attr]
    prompt = harmony_encoding().decode(gpt_oss.engine.requests[-1].prompt_token_ids)
    assert "to=calc.search" in prompt and "namespace calc" in prompt and "chat format gpt-oss models were trained on" in prompt
    assert prompt.rstrip().endswith("<|start|>assistant"), "the answer's pass continues after the tool's output"


def test_shell_calls_round_trip_through_chains_and_stateless_input(served: Harness, tokenizer: Any) -> None:
    served.play(script(tokenizer, call_text("shell", {"commands": ["ls -la", "cat README.md"]})),
                script(tokenizer, "Two files."))
    events = served.raw_stream(input="List the files", tools=[{"type": "shell"}], tool_choice={"type": "shell"})
    final = validate_events(events)
    call = final.output[0]
    assert call.type == "shell_call" and call.action.commands == ["ls -la", "cat README.md"]  # type: ignore[union-attr]
    done = [event["command"] for event in events if event["type"] == "response.shell_call_command.done"]
    assert done == ["ls -la", "cat README.md"]
    assert served.engine.requests[-1].sampling.structural_tag is not None, "tool_choice shell holds the call"
    output = {"type": "shell_call_output", "call_id": call.call_id,  # type: ignore[union-attr]
              "output": [{"stdout": "README.md\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}},
                         {"stdout": "# Hello\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]}
    chained = served.post(previous_response_id=final.id, input=[output], tools=[{"type": "shell"}])
    assert chained.status_code == 200, chained.text
    assert "# Hello" in prompt_text(served, tokenizer) and "exit code 0" in prompt_text(served, tokenizer)
    stateless = served.post(input=[{"role": "user", "content": "List the files"},
                                   call.model_dump(mode="json", exclude_none=True), output],
                            tools=[{"type": "shell"}], store=False)
    assert stateless.status_code == 200, stateless.text
    items = served.client.responses.input_items.list(chained.json()["id"]).data
    assert items[0].type == "shell_call_output"


def test_apply_patch_calls_round_trip(served: Harness, tokenizer: Any) -> None:
    patch = {"type": "update_file", "path": "app.py", "diff": "@@\n-print(1)\n+print(2)\n"}
    served.play(script(tokenizer, call_text("apply_patch", patch)), script(tokenizer, "Patched."))
    final = validate_events(served.raw_stream(input="Fix app.py", tools=[{"type": "apply_patch"}]))
    call = final.output[0]
    assert call.type == "apply_patch_call" and call.operation.model_dump() == patch  # type: ignore[union-attr]
    served.play(script(tokenizer, call_text("apply_patch", patch)))
    with served.client.responses.stream(model=MODEL, input="x", tools=[{"type": "apply_patch"}]) as stream:  # type: ignore[list-item]
        assert stream.get_final_response().output[0].type == "apply_patch_call"
    answer = served.post(previous_response_id=final.id, tools=[{"type": "apply_patch"}], input=[
        {"type": "apply_patch_call_output", "call_id": call.call_id, "status": "failed",  # type: ignore[union-attr]
         "output": "hunk 1 did not apply"}])
    assert answer.status_code == 200, answer.text
    assert "hunk 1 did not apply" in prompt_text(served, tokenizer)


def test_web_search_runs_on_the_browser_tool_server(served: Harness, tokenizer: Any) -> None:
    served.play(script(tokenizer, call_text("browser__search", {"query": "vllm"})), script(tokenizer, "Found it."))
    events = served.raw_stream(input="What is vLLM?", tools=[{"type": "web_search"}])
    final = validate_events(events)
    assert [item.type for item in final.output] == ["web_search_call", "message"]
    search = final.output[0]
    assert search.action.type == "search" and search.action.query == "vllm" and search.status == "completed"  # type: ignore[union-attr]
    assert "paged attention" in prompt_text(served, tokenizer), "the answer's pass reads the results"
    kinds = [event["type"] for event in events]
    assert kinds.index("response.web_search_call.searching") < kinds.index("response.web_search_call.completed")
    served.play(script(tokenizer, "It is an engine."))
    chained = served.post(previous_response_id=final.id, input="And again?", tools=[{"type": "web_search"}])
    assert chained.status_code == 200, chained.text


def test_code_interpreter_runs_python_on_its_tool_server(served: Harness, tokenizer: Any) -> None:
    served.play(script(tokenizer, call_text("python", {"code": "print(6 * 7)"})), script(tokenizer, "42."))
    events = served.raw_stream(input="6 times 7?", tools=[{"type": "code_interpreter", "container": {"type": "auto"}}])
    final = validate_events(events)
    call = final.output[0]
    assert call.type == "code_interpreter_call" and call.code == "print(6 * 7)"  # type: ignore[union-attr]
    assert call.outputs and call.outputs[0].logs.strip() == "42"  # type: ignore[union-attr]
    assert "response.code_interpreter_call_code.done" in {event["type"] for event in events}
    stateless = served.post(input=[{"role": "user", "content": "6 times 7?"},
                                   *[item.model_dump(mode="json") for item in final.output]],
                            tools=[{"type": "code_interpreter", "container": {"type": "auto"}}], store=False)
    assert stateless.status_code == 200, stateless.text


def test_a_code_interpreter_with_no_server_behind_it_is_a_400_naming_it(gpt_oss: Harness) -> None:
    response = gpt_oss.post(input="x", tools=[{"type": "web_search"}, {"type": "code_interpreter",
                                                                       "container": {"type": "auto"}}])
    assert response.status_code == 400 and response.json()["error"]["param"] == "tools[1]"
    assert "--tool-server python=URL" in response.json()["error"]["message"]


def test_gpt_oss_searches_with_its_browser_then_answers(gpt_oss: Harness) -> None:
    from server.paths.harmony import harmony_encoding
    from tests.test_harmony import CALL, completion

    search = completion(("analysis", "browser.search", '{"query": "harmony"}'), end=CALL)
    open_page = completion(("analysis", "browser.open", '{"id": "https://docs.example/harmony"}'), end=CALL)
    answer = completion(("final", None, "Harmony has three channels."))
    gpt_oss.play(*(steps_from_tokens(tokens, cuts=list(range(1, len(tokens), 3))) for tokens in (search, open_page,
                                                                                                  answer)))
    final = validate_events(gpt_oss.raw_stream(input="What is harmony?", tools=[{"type": "web_search"}]))
    assert [(item.type, getattr(item, "action", None) and item.action.type) for item in final.output] == [
        ("web_search_call", "search"), ("web_search_call", "open_page"), ("message", None)]
    prompt = harmony_encoding().decode(gpt_oss.engine.requests[-1].prompt_token_ids)
    assert "namespace browser" in prompt.split("<|start|>developer")[0], "the browser is in the system message"
    assert "to=browser.open" in prompt and "analysis, commentary and final" in prompt


def test_a_compacted_response_goes_on_from_its_compaction_after_a_call(served: Harness, tokenizer: Any) -> None:
    from tests.test_compaction import LONG_HISTORY

    served.play(script(tokenizer, "Sixty facts about parity were listed."),
                script(tokenizer, call_text("calc__add", {"a": 4, "b": 4})), script(tokenizer, "8, even."))
    events = served.raw_stream(input=[*LONG_HISTORY, {"role": "user", "content": "Is 4+4 even?"}],
                               tools=[mcp_tool()], context_management=[{"type": "compaction", "compact_threshold": 1000}])
    final = validate_events(events)
    assert [item.type for item in final.output] == ["compaction", "mcp_list_tools", "mcp_call", "message"]
    answer_prompt = prompt_text(served, tokenizer)
    assert "Sixty facts about parity were listed." in answer_prompt and "Fact 57" not in answer_prompt
    assert "Is 4+4 even?" in answer_prompt and "8" in answer_prompt.split("Is 4+4 even?")[1]


def test_a_steer_during_a_hosted_call_waits_for_its_result(served: Harness, tokenizer: Any) -> None:
    from tests.test_websocket import Socket, checked

    served.play(script(tokenizer, call_text("calc__wait", {"seconds": 1.5})), script(tokenizer, "In French: oui."))
    socket = Socket(served.base_url)
    socket.send({"type": "response.create", "model": MODEL, "input": "Wait a moment.", "tools": [mcp_tool()],
                 "store": False})
    events = [socket.recv()]
    while events[-1]["type"] != "response.mcp_call_arguments.done":  # the call is running on the MCP server now
        events.append(socket.recv())
    target = events[0]["response"]["id"]
    socket.send({"type": "response.steer", "previous_response_id": target, "input": "Answer in French."})
    while events[-1]["type"] != "response.completed":
        events.append(socket.recv())
    kinds = [event["type"] for event in events]
    steered_end = kinds.index("response.incomplete")
    assert kinds.index("response.mcp_call.completed") < steered_end, "the call was not cut"
    steered = validate_events(checked([e for e in events[:steered_end + 1] if e["type"] != "response.steer.accepted"]))
    assert steered.incomplete_details is not None and steered.incomplete_details.reason == "steered"
    assert steered.output[-1].type == "mcp_call" and steered.output[-1].output == "waited 1.5 s"  # type: ignore[union-attr]
    successor = validate_events(checked(events[kinds.index("response.created", steered_end):]))
    assert successor.output_text == "In French: oui."
    prompt = prompt_text(served, tokenizer)
    assert "waited 1.5 s" in prompt and prompt.index("waited 1.5 s") < prompt.index("Answer in French.")


def test_another_projects_approval_request_is_a_missing_one(tokenizer: Any, mcp: RunningMcp, tmp_path: Path) -> None:
    """Beta approving alpha's pending MCP call, by its approval request's id (with or without alpha's response as
    `previous_response_id`), gets what a random id gets, and the call is never run."""
    import hashlib
    import re

    from server.tenancy.keys import ApiKey
    from server.tenancy.projects_file import ProjectsFile

    keys = {"alpha": "alpha-secret-key-0123456789abcdef", "beta": "beta-secret-key-0123456789abcdef"}
    declared = tuple(ApiKey(id=f"file_{name}", name=name, project=name, hash=hashlib.sha256(key.encode()).hexdigest())
                     for name, key in keys.items())
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[script(tokenizer, call_text("calc__add", {"a": 1, "b": 2}))])
    settings = McpSettings(servers={"calc": mcp.url}, allowed_domains=("127.0.0.1",), connect_seconds=5,
                           call_seconds=10)
    config = ServerConfig(served_model_name=MODEL, tool_call_parser="hermes", mcp=settings,
                          projects=ProjectsFile(declared))
    context = ServingContext(config=config, engine_factory=lambda: engine, ids=counting_ids(),
                             records=open_url(f"sqlite:///{tmp_path / 'responses.db'}"))
    tool = mcp_tool(require_approval="always")
    with serve_in_thread(create_app(context)) as base_url:
        def post(project: str, **body: Any) -> httpx.Response:
            return httpx.post(f"{base_url}/responses", json={"model": MODEL, "tools": [tool], **body},
                              headers={"Authorization": f"Bearer {keys[project]}"}, timeout=30)

        asked = post("alpha", input="1+2?").json()
        request = asked["output"][-1]
        assert request["type"] == "mcp_approval_request"
        methods_before = len(mcp.recorder.methods)
        engine.scripts, engine.first = [script(tokenizer, "Done.")], len(engine.requests)

        def approving(approval_id: str, response_id: str | None) -> tuple[int, str]:
            chained = {"previous_response_id": response_id} if response_id else {}
            answer = post("beta", input=[{"type": "mcp_approval_response", "approval_request_id": approval_id,
                                          "approve": True}], **chained)
            return answer.status_code, re.sub(r"\b(resp|mcpr)_[0-9A-Za-z]+", "ID", answer.text)

        for response_id in (asked["id"], None):
            theirs = approving(request["id"], response_id)
            missing = approving("mcpr_" + "0" * (len(request["id"]) - 5),
                                "resp_" + "0" * (len(asked["id"]) - 5) if response_id else None)
            assert theirs == missing and theirs[0] in (400, 404), (response_id, theirs)
        assert "tools/call" not in mcp.recorder.methods[methods_before:], "alpha's call was never run"


def test_allowed_tools_read_only_shows_the_model_only_the_tools_annotated_read_only(served: Harness,
                                                                                    tokenizer: Any) -> None:
    served.play(script(tokenizer, "Four."))
    final = served.client.responses.create(model=MODEL, input="Sum?", tools=[mcp_tool(allowed_tools={
        "read_only": True})])
    listed = {tool.name for tool in final.output[0].tools}  # type: ignore[union-attr]
    assert listed == {"add", "search"}, listed
    prompt = prompt_text(served, tokenizer)
    assert "calc__add" in prompt and "calc__explode" not in prompt
    refused = served.post(input="Sum?", tools=[mcp_tool(allowed_tools={"read_only": "yes"})])
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "tools[0].allowed_tools.read_only"


def test_an_mcp_servers_deferred_tools_are_searched_then_called(served: Harness, tokenizer: Any) -> None:
    """`defer_loading` on an MCP tool: its tools are listed (the listing item as before) but not offered until a
    tool search finds them; the search's output names the server and the tools it loaded."""
    served.play(script(tokenizer, call_text("tool_search", {"query": "add two integers"})),
                script(tokenizer, call_text("calc__add", {"a": 2, "b": 3})), script(tokenizer, "5"))
    before = len(served.engine.requests)
    final = validate_events(served.raw_stream(input="2+3?", tools=[mcp_tool(defer_loading=True),
                                                                   {"type": "tool_search"}]))
    assert [item.type for item in final.output] == ["mcp_list_tools", "tool_search_call", "tool_search_output",
                                                    "mcp_call", "message"], final.output
    found = final.output[2].tools  # type: ignore[union-attr]
    assert [(tool.type, tool.server_label, tool.allowed_tools) for tool in found] == [("mcp", "calc", ["add"])]
    assert final.output[3].output == "5"  # type: ignore[union-attr]
    first, second = prompt_text(served, tokenizer, before), prompt_text(served, tokenizer, before + 1)
    assert "calc" in first and "Add two integers" not in first, "a server is offered by its name alone"
    assert "Add two integers" in second
