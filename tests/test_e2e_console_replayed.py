"""The console on replayed gpt-oss output (the harmony path; the server's projects file gives two projects' keys):
reasoning streams into the playground as an item of its own beside the answer; with alpha's key the list holds
alpha's responses alone, while beta's response, named in the address, is exactly a missing one; and (a server of
its own, whose MCP call waits at a gate) a running background response is followed live."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from tests.browser import answered, chromium, console_page, growth_steps, watch_growth
from tests.servers import RunningServer
from tests.test_e2e_codex import write_recordings
from tests.mcp_servers import serve_gate
from tests.test_harmony import CALL, completion

pytestmark = pytest.mark.e2e
KEYS = {"alpha": "alpha-console-key-0123456789", "beta": "beta-console-key-0123456789"}
THOUGHT = "The user wants the capital of France. It is Paris, so say so in one short sentence."
ANSWER = "The capital of France is Paris."


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    folder = tmp_path_factory.mktemp("replayed")
    recordings = write_recordings(folder / "answer.jsonl", [completion(("analysis", None, THOUGHT),
                                                                       ("final", None, ANSWER))])
    projects = folder / "projects.toml"
    projects.write_text("".join(f'[[keys]]\nname = "{name}"\nproject = "{name}"\n'
                                f'sha256 = "{hashlib.sha256(key.encode()).hexdigest()}"\n'
                                for name, key in KEYS.items()))
    running = RunningServer(["--harmony", "--replay-engine-output", str(recordings), "--projects-file",
                             str(projects)], folder / "server.log")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def chrome() -> Iterator[Any]:
    with chromium() as running:
        yield running


def origin(server: RunningServer) -> str:
    return server.base_url.removesuffix("/v1")


def model(server: RunningServer) -> str:
    answer = httpx.get(f"{server.base_url}/models", headers={"Authorization": f"Bearer {KEYS['alpha']}"})
    return str(answer.json()["data"][0]["id"])


def use_key(page: Any, key: str) -> None:
    page.click("#key-button")
    page.fill("#key-input", key)
    page.click("#key-dialog button[value=save]")


def test_reasoning_streams_into_the_playground_as_its_own_item(chrome: Any, server: RunningServer) -> None:
    with console_page(chrome, origin(server), refusals=True) as page:
        page.goto(f"{origin(server)}/console/#/playground")
        use_key(page, KEYS["alpha"])
        page.wait_for_selector("#pg-model option", state="attached")
        watch_growth(page, "#pg-output [data-type=reasoning] [data-growing]")
        page.fill("#pg-input", "What is the capital of France?")
        page.click("#pg-send")
        answered(page, 1, 120_000)
        turn = page.locator("#pg-output section.turn").last
        assert [item.get_attribute("data-type") for item in turn.locator("article.item").all()] == \
            ["reasoning", "message"]
        assert turn.locator("article[data-type=reasoning] .text").first.inner_text().strip() == THOUGHT
        assert turn.locator("article[data-type=message] .text").first.inner_text().strip() == ANSWER
        assert growth_steps(page) >= 3, "the reasoning grew delta by delta"
        page.click("text=Copy as curl")
        curl = page.locator("#pg-snippet").inner_text()
        sent = json.loads(curl.split("-d '", 1)[1].rsplit("'", 1)[0])
        assert sent["input"] == "What is the capital of France?" and sent["previous_response_id"].startswith("resp_")
        page.click("text=Copy as Python")
        python = page.locator("#pg-snippet").inner_text()
        compile(python, "snippet", "exec")  # valid Python, which names the same request
        assert "client.responses.stream(" in python and sent["previous_response_id"] in python


def test_another_projects_responses_never_appear(chrome: Any, server: RunningServer) -> None:
    """With more than a page of alpha's: "Older responses" pages on by cursor, and beta's never appear."""
    made = {name: [httpx.post(f"{server.base_url}/responses", timeout=60, headers={
        "Authorization": f"Bearer {key}"}, json={"model": model(server), "input": f"{name} {turn}"}).json()["id"]
        for turn in range(turns)] for (name, key), turns in zip(KEYS.items(), (23, 2))}
    with console_page(chrome, origin(server), refusals=True) as page:
        page.goto(f"{origin(server)}/console/#/responses")
        page.wait_for_selector("#main .error", state="attached")  # no key yet: the list asks for one
        use_key(page, KEYS["alpha"])
        page.wait_for_selector("#rl-rows tr", state="attached")
        assert page.locator("#rl-rows tr").count() == 20
        page.click("#rl-more")
        page.wait_for_function("document.querySelectorAll('#rl-rows tr').length > 20")
        listed = [row.get_attribute("data-id") for row in page.locator("#rl-rows tr").all()]
        assert listed[:23] == made["alpha"][::-1] and len(set(listed)) == len(listed)
        assert not set(made["beta"]) & set(listed)
        shown = {}
        for response_id in (made["beta"][0], f"resp_{'0' * 48}"):  # beta's, and one that never was
            page.goto(f"{origin(server)}/console/#/responses/{response_id}")
            page.wait_for_function(f"document.querySelector('#main .error')?.textContent.includes('{response_id}')")
            shown[response_id] = page.locator("#main").inner_text().replace(response_id, "ID")
        assert shown[made["beta"][0]] == shown[f"resp_{'0' * 48}"] and "not found" in shown[made["beta"][0]]


def test_a_running_background_response_is_followed_live(chrome: Any, tmp_path: Path) -> None:
    """A background response whose MCP call waits at a gate: its page shows it running, with the call, and draws the
    rest as it arrives once the gate opens, ending as the stored response."""
    gate = threading.Event()
    recordings = write_recordings(tmp_path / "held.jsonl", [
        completion(("commentary", "gate.hold", "{}"), end=CALL), completion(("final", None, ANSWER))])
    with serve_gate(gate) as held:
        server = RunningServer(["--harmony", "--replay-engine-output", str(recordings), "--mcp-server",
                                f"gate={held.url}"], tmp_path / "server.log")
        try:
            started = httpx.post(f"{server.base_url}/responses", timeout=60, json={
                "model": httpx.get(f"{server.base_url}/models").json()["data"][0]["id"], "input": "Go.",
                "background": True, "tools": [{"type": "mcp", "server_label": "gate", "require_approval": "never"}]})
            response_id = started.json()["id"]
            with console_page(chrome, origin(server)) as page:
                page.goto(f"{origin(server)}/console/#/responses/{response_id}")
                page.wait_for_selector("#output-items article[data-type=mcp_call]", timeout=120_000)
                assert page.locator(".facts .status-in_progress").count() == 1, "shown while it runs"
                assert page.locator("#output-items article[data-type=message]").count() == 0
                gate.set()
                page.wait_for_selector(".facts .status-completed", timeout=120_000)
                stored = httpx.get(f"{server.base_url}/responses/{response_id}").json()
                shown = [item.get_attribute("data-type") for item in page.locator("#output-items .item").all()]
                assert shown == [item["type"] for item in stored["output"]] and shown[-1] == "message"
                assert page.locator("#output-items article[data-type=message]").inner_text().strip().endswith(ANSWER)
        finally:
            gate.set()
            server.stop()
