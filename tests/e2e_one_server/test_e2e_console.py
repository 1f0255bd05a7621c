"""The console (/console) in a real browser against the package's server of the bundled model: a streamed answer
grows token by token, a tool call and an MCP approval from the page, a stored response item by item and its chain
walked back, live charts that move under load, usage with its CSV; on every page no console error, no request to
another host, and no serious accessibility violation in either theme. Screenshots: `make screenshots`."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from tests.browser import answered, chromium, console_page, growth_steps, screenshot, serious_violations, watch_growth
from tests.mcp_servers import RunningMcp
from tests.servers import MODEL, UNPENALIZED, RunningServer

pytestmark = pytest.mark.e2e
WAIT_MS = 240_000  # a generation on a busy 2-core machine: bounded by the contract, not by speed


@pytest.fixture(scope="module")
def chrome() -> Iterator[Any]:
    with chromium() as running:
        yield running


@pytest.fixture
def page(chrome: Any, server: RunningServer) -> Iterator[Any]:
    with console_page(chrome, origin(server)) as opened:
        yield opened


def origin(server: RunningServer) -> str:
    return server.base_url.removesuffix("/v1")


def send_and_wait(page: Any, turns: int) -> None:
    """Press Send and wait until the `turns`-th answer has ended (its Stop button disabled again)."""
    page.click("#pg-send")
    answered(page, turns, WAIT_MS)


def last_turn(page: Any) -> Any:
    return page.locator("#pg-output section.turn").last


def test_a_streamed_answer_grows_token_by_token_and_a_tool_call_renders(page: Any, server: RunningServer,
                                                                          tmp_path: Path) -> None:
    page.goto(f"{origin(server)}/console/#/playground")
    page.wait_for_selector("#pg-model option", state="attached")
    watch_growth(page, "#pg-output [data-growing]")
    page.fill("#pg-input", "Write the numbers from 1 to 30, one per line.")
    send_and_wait(page, 1)
    response_id = last_turn(page).page.locator("#pg-status a").inner_text()
    stored = server.client.responses.retrieve(response_id)
    steps = growth_steps(page)
    assert steps >= 5, f"the answer appeared in {steps} steps, not token by token"
    assert stored.status == "completed" and stored.output_text
    assert last_turn(page).locator("article[data-type=message] .text").first.inner_text().strip() == \
        stored.output_text.strip()
    assert page.locator("#pg-previous").input_value() == response_id, "the next turn continues this one"
    screenshot(page, "playground", tmp_path)

    page.click("text=Add function")
    page.fill("#pg-tool-choice", "required")
    page.fill("#pg-input", "What is the weather in Paris?")
    send_and_wait(page, 2)
    call = last_turn(page).locator("article[data-type=function_call]")
    assert call.count() == 1 and "get_weather" in (call.text_content() or "")
    called = server.client.responses.retrieve(page.locator("#pg-status a").inner_text())
    assert called.previous_response_id == response_id and called.output[0].type == "function_call"

    page.fill("#pg-tools", "")
    page.fill("#pg-tool-choice", "auto")
    page.fill("#pg-previous", "")
    page.select_option("#pg-transport", "websocket")
    page.fill("#pg-input", "Say hello.")
    send_and_wait(page, 3)
    assert page.locator("#pg-status .status-completed").count() == 1, page.locator("#pg-status").inner_text()
    over_socket = server.client.responses.retrieve(page.locator("#pg-status a").inner_text())
    assert last_turn(page).locator("article[data-type=message] .text").first.inner_text().strip() == \
        over_socket.output_text.strip()


def test_an_mcp_call_is_approved_from_the_page_and_runs(page: Any, server: RunningServer, mcp: RunningMcp) -> None:
    page.goto(f"{origin(server)}/console/#/playground")
    page.wait_for_selector("#pg-model option", state="attached")
    page.click("text=Add MCP registered")  # the operator's server (--mcp-server registered=...), with approvals
    page.fill("#pg-tool-choice", json.dumps({"type": "mcp", "server_label": "registered", "name": "add"}))
    page.fill("#pg-max-tokens", "48")
    page.fill("#pg-input", "Add 1 and 2.")
    send_and_wait(page, 1)
    asked = last_turn(page).locator("article[data-type=mcp_approval_request]")
    arguments = json.loads(asked.locator("pre").inner_text())
    calls_before = sum(headers.get("mcp-method") == "tools/call" for headers in mcp.recorder.headers)
    page.fill("#pg-tool-choice", "auto")  # as a user would: the call is chosen; now let the model answer
    page.click("text=Approve add")
    answered(page, 2, WAIT_MS)
    ran = last_turn(page).locator("article[data-type=mcp_call]").first
    assert ran.locator("pre").last.inner_text().strip() == str(arguments["a"] + arguments["b"])
    assert sum(headers.get("mcp-method") == "tools/call" for headers in mcp.recorder.headers) == calls_before + 1
    presets = page.locator("#pg-presets button").all_inner_texts()
    assert presets == ["Add function", "Add MCP registered", "Add web search", "Add code interpreter",
                       "Add file search", "Add tool search"], "the server's hosted tools (its browser and python " \
        "servers are set)"
    response_id = page.locator("#pg-status a").inner_text()  # the call's response: its timeline (issue 56)
    page.goto(f"{origin(server)}/console/#/responses/{response_id}")
    page.wait_for_selector("#timeline tr[data-phase=tool_call]", timeout=WAIT_MS)
    rows = page.locator("#timeline tbody tr").evaluate_all("rows => rows.map(row => row.dataset.phase)")
    assert rows[:2] == ["received", "prepared"] and rows[-1] == "ended" and "inference" in rows, rows
    assert "add" in page.locator("#timeline tr[data-phase=tool_call]").inner_text()
    assert page.locator("#timeline tr[data-phase=tool_call] .bar").is_visible()


def test_a_stored_response_opens_item_by_item_and_its_chain_is_walked(page: Any, server: RunningServer,
                                                                       tmp_path: Path) -> None:
    thought = "The user asks about France."
    first = server.client.responses.create(model=MODEL, max_output_tokens=24, input=[
        {"role": "user", "content": "What is the capital of France?"},
        {"type": "reasoning", "id": "rs_console", "summary": [{"type": "summary_text", "text": thought}]},
        {"role": "assistant", "content": "Paris."}, {"role": "user", "content": "Say it again."}])
    second = server.client.responses.create(model=MODEL, max_output_tokens=24, input="And Italy?",
                                            previous_response_id=first.id)
    page.goto(f"{origin(server)}/console/#/responses")
    page.wait_for_selector("#rl-rows tr")
    assert page.locator("#rl-rows tr").first.get_attribute("data-id") == second.id, "newest first"
    screenshot(page, "responses", tmp_path)
    page.click(f"a[href='#/responses/{second.id}']")
    page.wait_for_selector("#output-items .item")
    inputs = httpx.get(f"{server.base_url}/responses/{second.id}/input_items", params={"limit": 100}).json()["data"]
    assert page.locator("#input-items .item").count() == len(inputs)
    assert page.locator("#output-items .item").count() == len(second.output)
    assert second.output_text.strip() in page.locator("#output-items").inner_text()
    screenshot(page, "response", tmp_path)
    page.click("#chain-back")
    page.wait_for_selector(f"a[rel=next][href='#/responses/{second.id}']")
    assert page.evaluate("location.hash") == f"#/responses/{first.id}"
    assert page.locator("#input-items article[data-type=reasoning]").inner_text().count(thought) == 1
    assert page.locator("#input-items .item").count() == 4


def test_the_live_charts_move_while_a_load_runs(page: Any, server: RunningServer, tmp_path: Path) -> None:
    page.goto(f"{origin(server)}/console/#/live")
    page.wait_for_function("Number(document.querySelector('#live-tokens').dataset.samples) >= 1", timeout=WAIT_MS)
    moved = "['live-tokens', 'live-requests'].every(id => Number(document.getElementById(id).dataset.peak) > 0)"
    done = threading.Event()

    def load() -> None:  # streamed answers, one after another, until the charts have moved (at most 20)
        for _ in range(20):
            if done.is_set():
                return
            with server.client.responses.stream(model=MODEL, input="Tell me a long story about a dragon.",
                                                max_output_tokens=64, extra_body=UNPENALIZED) as stream:
                stream.until_done()

    runner = threading.Thread(target=load)
    runner.start()
    try:
        page.wait_for_function(moved, timeout=WAIT_MS)
    finally:
        done.set()
        runner.join()
    assert page.evaluate(moved)
    screenshot(page, "live", tmp_path)


def test_usage_shows_this_servers_tokens_and_exports_them(page: Any, server: RunningServer, tmp_path: Path) -> None:
    page.goto(f"{origin(server)}/console/#/usage")
    page.wait_for_selector("#usage-table tbody tr", timeout=WAIT_MS)
    assert MODEL in page.locator("#usage-table").inner_text()
    exported = page.evaluate("fetch(document.getElementById('usage-csv').href).then(answer => answer.text())")
    header, *rows = exported.strip().splitlines()
    assert header.startswith("start_time,end_time,project_id,model,num_model_requests")
    assert rows and all(len(row.split(",")) == len(header.split(",")) for row in rows)
    assert sum(int(row.split(",")[4]) for row in rows) >= 1
    screenshot(page, "usage", tmp_path)


def test_the_playgrounds_answer_is_in_view_after_send_in_a_laptop_window(chrome: Any, server: RunningServer) -> None:
    """In a 1400x860 window the Send button sits at the foot of a long form: the answer that appears after it is in
    view, not at the top of the other column, scrolled away (issue 56, as a new user tried it)."""
    with console_page(chrome, origin(server), viewport=(1400, 860)) as page:
        page.goto(f"{origin(server)}/console/#/playground")
        page.wait_for_selector("#pg-model option", state="attached")
        page.fill("#pg-input", "Say hello.")
        page.fill("#pg-max-tokens", "16")
        page.locator("#pg-send").scroll_into_view_if_needed()
        assert page.evaluate("window.scrollY") > 0, "the form is longer than the window: Send is below the fold"
        send_and_wait(page, 1)
        in_view = page.evaluate("""() => { const box = document.querySelector('#pg-output section.turn')
            .getBoundingClientRect(); return box.top >= 0 && box.top < window.innerHeight; }""")
        assert in_view, "the answer is out of view"


def test_a_prompt_is_made_versioned_and_tried_from_the_page(page: Any, server: RunningServer, tmp_path: Path) -> None:
    """The Prompts page (issue 55 item 4): a prompt saved with a variable, a second version saved, and the prompt
    tried with its variable filled: the answer is the model's, to the filled prompt, and in view."""
    page.goto(f"{origin(server)}/console/#/prompts")
    page.wait_for_selector("#pr-list :is(table, p)", timeout=WAIT_MS)
    page.fill("#pr-instructions", "You are a poet from {{city}}. Answer in one short line.")
    page.click("#pr-save")
    page.wait_for_selector("#pr-try:not([hidden]) #pr-var-city", timeout=WAIT_MS)
    prompt_id = page.evaluate("location.hash").rsplit("/", 1)[1]
    page.fill("#pr-instructions", "You are a terse poet from {{city}}. Answer in one short line.")
    page.click("#pr-save")
    page.wait_for_function("document.querySelectorAll('#pr-version option').length === 2", timeout=WAIT_MS)
    page.fill("#pr-var-city", "Lisbon")
    page.fill("#pr-message", "Describe the sea.")
    page.click("#pr-run")
    page.wait_for_selector("#pr-answer a", timeout=WAIT_MS)
    response = server.client.responses.retrieve(page.locator("#pr-answer a").inner_text())
    assert response.prompt is not None and (response.prompt.id, response.prompt.version) == (prompt_id, "2")
    assert isinstance(response.instructions, list)
    assert "terse poet from Lisbon" in json.dumps([item.model_dump() for item in response.instructions])
    assert page.locator("#pr-output").inner_text().strip() == response.output_text.strip()
    assert page.locator("#pr-output").is_visible() and page.evaluate(
        "document.querySelector('#pr-output').getBoundingClientRect().top < window.innerHeight"), "out of view"
    screenshot(page, "prompts", tmp_path)


def test_a_batchs_progress_and_answers_show_on_the_page(page: Any, server: RunningServer, tmp_path: Path) -> None:
    """The Batches page (issue 65 item 5): the project's batch listed with its progress, and opened: each line's
    answer as the output file holds it."""
    import io

    lines = "".join(json.dumps({"custom_id": f"ask-{n}", "method": "POST", "url": "/v1/responses",
                                "body": {"model": MODEL, "input": f"Name a color, {n}.", "max_output_tokens": 8}})
                    + "\n" for n in range(3))
    file_id = server.client.files.create(file=("asks.jsonl", io.BytesIO(lines.encode())), purpose="batch").id
    batch = server.client.batches.create(input_file_id=file_id, endpoint="/v1/responses", completion_window="24h")
    page.goto(f"{origin(server)}/console/#/batches")
    page.wait_for_selector(f"#bt-list tr[data-id='{batch.id}'] progress", timeout=WAIT_MS)
    page.click(f"a[href='#/batches/{batch.id}']")
    page.wait_for_selector("#bt-output tr[data-custom-id]", timeout=WAIT_MS)
    done = server.client.batches.retrieve(batch.id)
    assert done.status == "completed" and "3 / 3" in page.locator("#bt-summary").inner_text()
    output = [json.loads(line) for line in server.client.files.content(done.output_file_id or "").text.splitlines()]
    for line in output:
        body = line["response"]["body"]
        text = "".join(part["text"] for item in body["output"] if item["type"] == "message" for part in item["content"])
        shown = page.locator(f"#bt-output tr[data-custom-id='{line['custom_id']}'] .answer").inner_text()
        assert " ".join(text.split())[:50] in " ".join(shown.split()) and body["id"] in shown
    saved = page.evaluate("fetch(document.getElementById('bt-output-file').href).then(answer => answer.text())")
    assert saved.splitlines() == server.client.files.content(done.output_file_id or "").text.splitlines()
    screenshot(page, "batches", tmp_path)


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_every_page_passes_the_accessibility_check(chrome: Any, server: RunningServer, dark: bool) -> None:
    pages = {"playground": "#pg-model option", "responses": "#rl-rows tr", "live": "#live-state",
             "usage": "#usage-table tbody tr", "prompts": "#pr-list :is(table, p)", "batches": "#bt-list :is(table, p)"}
    with console_page(chrome, origin(server), dark=dark) as page:
        for name, ready in pages.items():
            page.goto(f"{origin(server)}/console/#/{name}")
            page.wait_for_selector(ready, state="attached", timeout=WAIT_MS)
            assert serious_violations(page) == [], name
        if not dark:  # the API reference renders from the server's own files (its theme is Swagger's own)
            page.goto(f"{origin(server)}/docs")
            page.wait_for_selector(".swagger-ui .opblock", timeout=WAIT_MS)
