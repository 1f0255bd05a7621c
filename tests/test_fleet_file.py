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
    ("credentials in a URL", GOOD.replace("http://router:9000", "http://gw:s3cret@router:9000"), 13,
     "engine 1 carries credentials in its URL: name the key with `api_key_env`"),
    ("a key's variable unset", GOOD.replace("max_model_len = 32768", 'api_key_env = "NO_SUCH_FLEET_KEY"'), 14,
     "the environment variable NO_SUCH_FLEET_KEY is not set"),
    ("a key file missing", GOOD.replace("max_model_len = 32768", 'api_key_file = "/no/such/key"'), 14,
     "`api_key_file`: /no/such/key cannot be read"),
    ("an idle timeout of 0", GOOD.replace("max_model_len = 32768", "idle_seconds = 0"), 14,
     "`idle_seconds` must be a number of seconds above 0"),
    ("a share above 1", "max_ejected_share = 2\n" + GOOD, 1, "`max_ejected_share` must be a share from 0 to 1"),
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


def test_the_fleets_fault_settings_and_a_models_own_timeouts_and_key(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_TEST_KEY", "s3cret")
    fleet = read_fleet_file(_write(tmp_path, "idle_seconds = 20\nfailures_to_eject = 5\nretry_budget = 0.1\n"
                                             "load_slack = 4\nmax_running_per_worker = 6\n" + GOOD
                                   .replace("max_model_len = 32768", 'max_model_len = 32768\nidle_seconds = 90\n'
                                            'first_token_seconds = 900\napi_key_env = "FLEET_TEST_KEY"')))
    small, oss = fleet.models
    assert (small.limits.first_token_seconds, small.limits.idle_seconds) == (300.0, 20.0)  # the file's default
    assert (oss.limits.first_token_seconds, oss.limits.idle_seconds) == (900.0, 90.0)
    assert fleet.outliers.failures_to_eject == 5 and fleet.retry_budget == 0.1 and fleet.min_retries == 3
    assert (fleet.load.load_slack, fleet.load.max_running, fleet.load.load_bound) == (4, 6, 1.25)
    assert oss.access.headers() == {"Authorization": "Bearer s3cret"} and small.access.headers() == {}
    assert "s3cret" not in repr(fleet)  # never in a log line
