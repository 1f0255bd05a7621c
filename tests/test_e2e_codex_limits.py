"""End to end: Codex (the real CLI) in a project at its requests-per-minute limit: the refused request is waited for
and retried, and the session completes (on replayed engine output: what is tested is the refusal and the retry)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_codex
from tests.servers import RunningServer
from tests.test_e2e_codex import ANSWER, FIRST, SECOND, write_recordings

pytestmark = pytest.mark.e2e


def test_codex_at_its_projects_limit_waits_and_completes(codex: Path, tmp_path: Path) -> None:
    from tests.test_harmony import CALL, completion

    recordings = write_recordings(tmp_path / "harmony.jsonl", [
        completion(("analysis", None, FIRST), ("commentary", "functions.exec_command", '{"cmd": "ls"}'), end=CALL),
        completion(("analysis", None, SECOND), ("commentary", "functions.exec_command", '{"cmd": "ls | wc -l"}'),
                   end=CALL),
        completion(("analysis", None, "Done."), ("final", None, ANSWER)),
    ])
    projects = tmp_path / "projects.toml"
    projects.write_text('[[projects]]\nname = "default"\nrequests_per_minute = 2\n')  # Codex's turn needs 3
    server = RunningServer(["--harmony", "--replay-engine-output", str(recordings), "--api-key", "x",
                            "--projects-file", str(projects)], tmp_path / "server.log")
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "notes.txt").write_text("hello\n")
    try:
        run = run_codex(codex, server.base_url, "gpt-oss", tmp_path, "How many files are here?",
                        "--dangerously-bypass-approvals-and-sandbox")
    finally:
        server.stop()
    log = (tmp_path / "server.log").read_text()
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert "429" in log, log[-3000:]  # the limit was reached
    assert run.returncode == 0 and any(e["type"] == "turn.completed" for e in events), run.stdout[-3000:] + log[-2000:]
    assert [e["item"]["text"] for e in events if e["type"] == "item.completed"
            and e["item"]["type"] == "agent_message"] == [ANSWER]
