"""The shipped dashboard and alert rules (issue 56 item 5, `deploy/`): promtool accepts the rules and every
dashboard query; every series they name is one the server exports; and a real Prometheus (Debian's package)
scrapes two replicas with the rules loaded, its query API answering our series from both."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from server.config import ServerConfig
from server.http.app import create_app
from server.runs.context import ServingContext
from tests.conftest import free_port, serve_in_thread
from tests.scripted_engine import ScriptedEngine
from tests.test_server import MODEL, Harness
from tests.test_store import say

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
RULES = DEPLOY / "prometheus" / "alerts.yml"
DASHBOARD = DEPLOY / "grafana" / "responses-server.json"
SERIES = re.compile(r"\b(responses_server_[a-z_]+|up)\b")
SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created")


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is missing: run scripts/setup.sh (it installs Debian's prometheus)"
    return found


def dashboard_queries() -> list[str]:
    return [target["expr"] for panel in json.loads(DASHBOARD.read_text())["panels"] for target in panel["targets"]]


def rule_queries() -> list[str]:
    return [rule["expr"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_promtool_accepts_the_rules_and_every_dashboard_query(tmp_path: Path) -> None:
    checked = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    recorded = {"groups": [{"name": "dashboard", "rules": [{"record": f"dashboard:query_{n}", "expr": expr}
                                                           for n, expr in enumerate(dashboard_queries())]}]}
    (tmp_path / "dashboard.yml").write_text(yaml.safe_dump(recorded))
    queries = subprocess.run([promtool(), "check", "rules", str(tmp_path / "dashboard.yml")], capture_output=True,
                             text=True, timeout=60)
    assert queries.returncode == 0, queries.stdout + queries.stderr
    config = subprocess.run([promtool(), "check", "config", str(DEPLOY / "prometheus" / "prometheus.yml")],
                            capture_output=True, text=True, timeout=60)
    assert config.returncode == 0, config.stdout + config.stderr


def test_every_series_the_dashboard_and_rules_name_is_exported() -> None:
    from server.metrics import metrics_registry

    exported = {metric.name for metric in metrics_registry().collect()}
    named = {name for query in dashboard_queries() + rule_queries() for name in SERIES.findall(query)} - {"up"}
    unknown = {name for name in named if not any(name.removesuffix(suffix) in exported for suffix in SUFFIXES)}
    assert not unknown, f"series no metric of the server exports: {sorted(unknown)}"
    alerts = {rule["alert"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]}
    for needed in ("ReplicaDown", "FailingResponses", "SlowFirstToken", "Saturated", "EngineWorkerDown",
                   "StoreNotAnswering", "WebhooksFailing"):
        assert f"ResponsesServer{needed}" in alerts, needed


@pytest.fixture
def replicas(tokenizer: Any) -> Any:
    from contextlib import ExitStack

    with ExitStack() as stack:
        harnesses = []
        for _ in range(2):
            engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
            context = ServingContext(config=ServerConfig(served_model_name=MODEL), engine_factory=lambda e=engine: e)
            harnesses.append(Harness(engine, stack.enter_context(serve_in_thread(create_app(context)))))
        yield harnesses


def test_a_real_prometheus_scrapes_two_replicas_with_the_rules_loaded(replicas: list[Harness], tokenizer: Any,
                                                                        tmp_path: Path) -> None:
    prometheus = shutil.which("prometheus")
    assert prometheus, "prometheus is missing: run scripts/setup.sh (it installs Debian's prometheus)"
    targets = [harness.base_url.removesuffix("/v1").removeprefix("http://") for harness in replicas]
    for harness in replicas:
        harness.play(say(tokenizer, "Scraped."))
        assert harness.post(input="Hello?").status_code == 200
    shutil.copy(RULES, tmp_path / "alerts.yml")
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "rule_files": ["alerts.yml"],
        "scrape_configs": [{"job_name": "responses-server", "static_configs": [{"targets": targets}]}]}))
    port = free_port()
    process = subprocess.Popen([prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
                                f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                               stdout=subprocess.DEVNULL, stderr=(tmp_path / "prometheus.log").open("w"))
    try:
        api = f"http://127.0.0.1:{port}/api/v1"
        deadline = time.monotonic() + 120
        while True:
            answered = _query(api, 'responses_server_responses_total{status="completed"}')
            if {series["metric"]["instance"] for series in answered} == set(targets):
                break
            assert time.monotonic() < deadline, (tmp_path / "prometheus.log").read_text()[-2000:]
            time.sleep(0.5)
        assert all(float(series["value"][1]) >= 1 for series in answered)
        assert {series["metric"]["instance"] for series in _query(api, 'up{job="responses-server"} == 1')} == \
            set(targets)
        loaded = httpx.get(f"{api}/rules", timeout=10).json()["data"]["groups"]
        assert {rule["name"] for group in loaded for rule in group["rules"]} >= {"ResponsesServerReplicaDown",
                                                                                  "ResponsesServerFailingResponses"}
    finally:
        process.terminate()
        process.wait(30)


def _query(api: str, query: str) -> list[dict[str, Any]]:
    try:
        answer = httpx.get(f"{api}/query", params={"query": query}, timeout=10)
    except httpx.TransportError:  # not listening yet
        return []
    if answer.status_code != 200:  # starting up
        return []
    return list(answer.json()["data"]["result"])
