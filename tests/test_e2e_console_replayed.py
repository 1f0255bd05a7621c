"""The console with two projects' keys (a server with a projects file; the chat model replayed, nothing here needs
its words): with alpha's key, the list shows alpha's responses only, and beta's response, named in the address,
is exactly a missing one."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
import pytest

from server.engine.recording import Recording
from tests.browser import chromium, console_page
from tests.servers import MODEL, RunningServer

pytestmark = pytest.mark.e2e
KEYS = {"alpha": "alpha-console-key-0123456789", "beta": "beta-console-key-0123456789"}


def test_another_projects_responses_never_appear(tmp_path: Path) -> None:
    recording = tmp_path / "answer.jsonl"
    recording.write_text(Recording([], [[2]], "stop").to_json() + "\n")
    projects = tmp_path / "projects.toml"
    projects.write_text("".join(f'[[keys]]\nname = "{name}"\nproject = "{name}"\n'
                                f'sha256 = "{hashlib.sha256(key.encode()).hexdigest()}"\n'
                                for name, key in KEYS.items()))
    server = RunningServer(["--replay-engine-output", str(recording), "--projects-file", str(projects)],
                           tmp_path / "server.log")
    try:
        made = {name: [httpx.post(f"{server.base_url}/responses", timeout=60, headers={
            "Authorization": f"Bearer {key}"}, json={"model": MODEL, "input": f"{name} {turn}"}).json()["id"]
            for turn in range(2)] for name, key in KEYS.items()}
        origin = server.base_url.removesuffix("/v1")
        with chromium() as browser, console_page(browser, origin, refusals=True) as page:
            page.goto(f"{origin}/console/#/responses")
            page.wait_for_selector("#main .error", state="attached")  # no key yet: the list asks for one
            page.click("#key-button")
            page.fill("#key-input", KEYS["alpha"])
            page.click("#key-dialog button[value=save]")
            page.wait_for_selector("#rl-rows tr", state="attached")
            listed = [row.get_attribute("data-id") for row in page.locator("#rl-rows tr").all()]
            assert listed == made["alpha"][::-1]
            shown = {}
            for response_id in (made["beta"][0], f"resp_{'0' * 48}"):  # beta's, and one that never was
                page.goto(f"{origin}/console/#/responses/{response_id}")
                page.wait_for_function(f"document.querySelector('#main .error')?.textContent.includes('{response_id}')")
                shown[response_id] = page.locator("#main").inner_text().replace(response_id, "ID")
            assert shown[made["beta"][0]] == shown[f"resp_{'0' * 48}"] and "not found" in shown[made["beta"][0]]
    finally:
        server.stop()
