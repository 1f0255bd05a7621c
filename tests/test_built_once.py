"""A model directory built on first use: built once, whole, when several processes (the suite's workers) ask at once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ASK = """
import sys, time
from pathlib import Path
from server.bundled_model import built_once

target, started, builds = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
started.touch()

def build(work):
    with builds.open("a") as log:
        log.write("built\\n")
    deadline = time.monotonic() + 30
    while len(list(started.parent.glob("started-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)  # the other process is asking too
    time.sleep(0.5)
    (work / "weights").write_text("the model")

print(built_once(target, "1", build))
"""


def test_two_processes_asking_at_once_get_one_build(tmp_path: Path) -> None:
    target, builds = tmp_path / "models" / "tiny", tmp_path / "builds.txt"
    asking = [subprocess.Popen([sys.executable, "-c", ASK, str(target), str(tmp_path / f"started-{n}"), str(builds)],
                               stdout=subprocess.PIPE, text=True) for n in range(2)]
    outputs = [process.communicate(timeout=120)[0].strip() for process in asking]
    assert [process.returncode for process in asking] == [0, 0]
    assert outputs == [str(target)] * 2
    assert builds.read_text().splitlines() == ["built"]
    assert (target / "weights").read_text() == "the model"
    assert not [path for path in target.parent.iterdir() if path.name.startswith(".building-")]
