"""The fleet file (`--fleet`, server/models/fleet_file.py): what it declares, and each mistake refused naming its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.models.fleet_file import FleetFileError, read_fleet_file

GOOD = """\
health_seconds = 1.5

[[models]]
name = "small"
path = "/models/small"
engines = ["http://w1:8000", "http://w2:8000/"]
tool_call_parser = "hermes"
sampling_defaults = { frequency_penalty = 0.5 }

[[models]]
name = "gpt-oss"
path = "/models/gpt-oss"
engines = ["http://router:9000"]
max_model_len = 32768
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleet.toml"
    path.write_text(text)
    return path


def test_a_fleet_file_declares_each_model_with_its_own_settings(tmp_path: Path) -> None:
    fleet = read_fleet_file(_write(tmp_path, GOOD))
    small, oss = fleet.models
    assert (small.settings.name, small.path, small.engines) == ("small", "/models/small",
                                                                  ("http://w1:8000", "http://w2:8000"))
    assert small.settings.tool_call_parser == "hermes" and small.settings.sampling_defaults == {"frequency_penalty": 0.5}
    assert (oss.settings.name, oss.engines, oss.max_model_len) == ("gpt-oss", ("http://router:9000",), 32768)
    assert oss.settings.tool_call_parser is None and fleet.health_seconds == 1.5


MISTAKES = [
    ("unknown key in a model", GOOD.replace('tool_call_parser = "hermes"', 'tool_parser = "hermes"'), 7,
     "unknown key `tool_parser`"),
    ("unknown key at the top", "healthz = 1\n" + GOOD, 1, "unknown key `healthz`"),
    ("missing path", GOOD.replace('path = "/models/gpt-oss"\n', ""), 10, "`path` is missing"),
    ("no engines", GOOD.replace('engines = ["http://router:9000"]', "engines = []"), 13, "`engines` is missing or empty"),
    ("engines left out", GOOD.replace('engines = ["http://router:9000"]\n', ""), 10, "`engines` is missing"),
    ("duplicate name", GOOD.replace('name = "gpt-oss"', 'name = "small"'), 11, "`small` is declared twice"),
    ("engine not a URL", GOOD.replace("http://router:9000", "router:9000"), 13, "not an http:// or https:// URL"),
    ("window not a number", GOOD.replace("32768", '"big"'), 14, "`max_model_len` must be a whole number"),
    ("sampling key unknown", GOOD.replace("frequency_penalty", "frequency"), 8, "`sampling_defaults.frequency`"),
]


@pytest.mark.parametrize("text, line, problem", [case[1:] for case in MISTAKES], ids=[case[0] for case in MISTAKES])
def test_a_mistake_is_refused_naming_its_line(tmp_path: Path, text: str, line: int, problem: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(FleetFileError) as refused:
        read_fleet_file(path)
    message = str(refused.value)
    assert f"--fleet {path}, line {line}" in message and problem in message, message


def test_a_fleet_with_no_model_or_not_toml_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FleetFileError, match="no \\[\\[models\\]\\]"):
        read_fleet_file(_write(tmp_path, "health_seconds = 2\n"))
    with pytest.raises(FleetFileError, match="line 2"):  # tomllib's own position
        read_fleet_file(_write(tmp_path, "[[models]]\nname = \n"))


def test_the_server_refuses_to_start_on_a_bad_fleet_file_naming_the_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = _write(tmp_path, GOOD.replace('path = "/models/gpt-oss"\n', ""))
    done = subprocess.run([sys.executable, "-m", "server", "--fleet", str(path)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2 and f"--fleet {path}, line 10 (models[1]): `path` is missing" in done.stderr
