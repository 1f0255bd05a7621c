"""The image and the compose file, checked without a Docker daemon: hadolint passes the Dockerfile, the image's
entrypoint flags parse with vLLM's parallelism flags passed straight through, and compose runs two replicas on one
PostgreSQL behind nginx set up for SSE."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from server.cli import build_parser
from server.engine.vllm_engine import engine_args
from server.launch import advertise_url

ROOT = Path(__file__).resolve().parents[1]
PARALLEL = ["--tensor-parallel-size", "2", "--pipeline-parallel-size", "2", "--data-parallel-size", "2"]


def entrypoint() -> list[str]:
    line = next(line for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith("ENTRYPOINT"))
    return json.loads(line[len("ENTRYPOINT"):])


def test_hadolint_passes_the_dockerfile() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    result = subprocess.run([str(hadolint), str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_entrypoint_and_vllm_parallel_flags_parse() -> None:
    program, *flags = entrypoint()
    assert program == "responses-server"
    args = build_parser().parse_args([*flags, "--model", "Qwen/Qwen3-8B", *PARALLEL])
    assert (args.host, args.port) == ("0.0.0.0", 8000)
    engine = engine_args(args)
    assert (engine.tensor_parallel_size, engine.pipeline_parallel_size, engine.data_parallel_size) == (2, 2, 2)


def test_compose_runs_two_replicas_on_postgresql_behind_nginx_for_sse() -> None:
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    services = compose["services"]
    replicas = [name for name, service in services.items() if "build" in service]
    assert len(replicas) == 2 and {"postgres", "nginx"} <= set(services)
    ids = set()
    for name in replicas:
        service = services[name]
        command = re.sub(r"\$\{(\w+):-([^}]*)\}", r"\2", service["command"])  # compose's defaults
        command = command.replace("--max-model-len 32768", f"--max-model-len 32768 {' '.join(PARALLEL)}")
        args = build_parser().parse_args([*entrypoint()[1:], *shlex.split(command)])
        assert args.store.startswith("postgresql://") and "@postgres:" in args.store
        assert engine_args(args).tensor_parallel_size == 2
        ids.add(service["environment"]["RESPONSES_SERVER_REPLICA_ID"])
        os.environ["RESPONSES_SERVER_ADVERTISE_URL"] = service["environment"]["RESPONSES_SERVER_ADVERTISE_URL"]
        try:  # forwarding on, to the address the other replica reaches this one at
            advertised = build_parser().parse_args([*entrypoint()[1:], *shlex.split(command)])
        finally:
            del os.environ["RESPONSES_SERVER_ADVERTISE_URL"]
        assert advertised.forwarding and advertise_url(advertised.advertise_url) == f"http://{name}:8000"
        assert "RESPONSES_SERVER_REASONING_KEY" in service["environment"]  # replicas open each other's reasoning
        assert service["stop_grace_period"]  # time for the graceful drain
    assert len(ids) == 2
    nginx = (ROOT / "docker" / "nginx.conf").read_text() + (ROOT / "docker" / "proxy.conf").read_text()
    for name in replicas:
        assert f"server {name}:8000" in nginx
    for directive in ("proxy_buffering off;", "proxy_http_version 1.1;", "proxy_read_timeout 3600s;"):
        assert directive in nginx


def test_the_replica_id_comes_from_the_environment() -> None:
    os.environ["RESPONSES_SERVER_REPLICA_ID"] = "replica-from-env"
    try:
        assert build_parser().parse_args([]).replica_id == "replica-from-env"
    finally:
        del os.environ["RESPONSES_SERVER_REPLICA_ID"]


def test_fleet_compose_runs_two_gateways_on_postgresql_over_two_scale_out_workers(tmp_path: Path) -> None:
    from server.models.fleet_file import read_fleet_file

    compose = yaml.safe_load((ROOT / "docker" / "fleet-compose.yaml").read_text())
    services = compose["services"]
    gateways = [name for name, service in services.items() if "build" in service]
    workers = [name for name, service in services.items() if "vllm-openai" in service.get("image", "")]
    assert len(gateways) == len(workers) == 2 and {"postgres", "nginx"} <= set(services)
    for name in workers:
        assert "--enable-scale-out" in services[name]["command"]
    for name in gateways:
        service = services[name]
        args = build_parser().parse_args([*entrypoint()[1:], *shlex.split(service["command"])])
        assert args.store.startswith("postgresql://") and "@postgres:" in args.store
        mounted = next(volume.split(":")[0] for volume in service["volumes"] if volume.endswith(f"{args.fleet}:ro"))
        fleet = read_fleet_file(ROOT / "docker" / mounted)
        assert [url.split("//")[1].split(":")[0] for url in fleet.models[0].engines] == workers
        assert "RESPONSES_SERVER_REASONING_KEY" in service["environment"]  # the same key: the same cache salts
    nginx = (ROOT / "docker" / "nginx.conf").read_text()
    assert all(f"server {name}:8000" in nginx for name in gateways)
