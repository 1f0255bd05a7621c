"""The Kubernetes manifests (deploy/kubernetes/), checked against Kubernetes' own schemas with kubernetes-validate
(no cluster needed), and against this server: the gateways' flags parse, the fleet file they read is valid, and the
workers run vLLM's scale-out API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from server.cli import build_parser
from server.models.fleet_file import read_fleet_file

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = ROOT / "deploy" / "kubernetes"
KUBERNETES = "1.33.0"  # a release current clusters run; the schemas ship inside kubernetes-validate


def _documents() -> list[dict[str, Any]]:
    listed = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(path.name for path in MANIFESTS.glob("*.yaml") if path.name != "kustomization.yaml")
    return [document for name in listed for document in yaml.safe_load_all((MANIFESTS / name).read_text()) if document]


def _kind(kind: str, name: str | None = None) -> dict[str, Any]:
    return next(document for document in _documents()
                if document["kind"] == kind and (name is None or document["metadata"]["name"] == name))


@pytest.mark.parametrize("document", _documents(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_every_manifest_validates_against_kubernetes_schemas(document: dict[str, Any]) -> None:
    kubernetes_validate.validate(document, KUBERNETES, strict=True)  # raises naming the field at fault


def test_a_manifest_with_a_mistake_is_caught() -> None:
    gateway = _kind("Deployment", "responses-server")
    broken = yaml.safe_load(yaml.safe_dump(gateway))
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["prot"] = 8000
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES, strict=True)


def _pod(kind: str, name: str) -> dict[str, Any]:
    return _kind(kind, name)["spec"]["template"]["spec"]


def test_the_gateways_run_the_fleet_file_they_mount_and_find_each_worker_pod_through_its_headless_service(
        tmp_path: Path) -> None:
    gateway = _kind("Deployment", "responses-server")
    container = gateway["spec"]["template"]["spec"]["containers"][0]
    args = build_parser().parse_args(container["args"])
    mount = next(m for m in container["volumeMounts"] if args.fleet.is_relative_to(m["mountPath"]))
    volume = next(v for v in gateway["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
    config_map = _kind("ConfigMap", volume["configMap"]["name"])
    fleet_toml = tmp_path / args.fleet.name
    fleet_toml.write_text(config_map["data"][args.fleet.name])
    fleet = read_fleet_file(fleet_toml)
    headless = {document["metadata"]["name"] for document in _documents()
                if document["kind"] == "Service" and document["spec"].get("clusterIP") == "None"}
    for model in fleet.models:  # each engine URL is a headless Service: its name resolves to every pod (discovery)
        assert all(url.split("//")[1].split(":")[0] in headless for url in model.engines)
    workers = _kind("StatefulSet", "qwen3-8b-workers")
    assert workers["spec"]["serviceName"] in headless  # each pod a stable DNS name of its own
    assert _kind("PodDisruptionBudget", "qwen3-8b-workers")["spec"]["selector"] == workers["spec"]["selector"]
    assert _kind("PodDisruptionBudget", "responses-server")["spec"]["selector"] == gateway["spec"]["selector"]


def test_pods_start_slowly_drain_on_shutdown_and_run_unprivileged_with_pinned_images() -> None:
    for kind, name, drain in (("Deployment", "responses-server", "--shutdown-timeout"),
                              ("StatefulSet", "qwen3-8b-workers", "--shutdown-timeout")):
        pod = _pod(kind, name)
        (container,) = pod["containers"]
        timeout = int(container["args"][container["args"].index(drain) + 1])
        pause = container["lifecycle"]["preStop"]["sleep"]["seconds"]
        assert pod["terminationGracePeriodSeconds"] > pause + timeout, name  # the drain fits in the grace period
        startup = container["startupProbe"]
        assert startup["periodSeconds"] * startup["failureThreshold"] >= 300, name  # a model download fits
        assert pod["securityContext"]["runAsNonRoot"] and container["securityContext"]["readOnlyRootFilesystem"]
        assert not container["securityContext"]["allowPrivilegeEscalation"]
        image = container["image"]
        assert ":" in image and not image.endswith(":latest"), image
        assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    workers = _pod("StatefulSet", "qwen3-8b-workers")
    shm = next(volume for volume in workers["volumes"] if volume["name"] == "dshm")
    assert shm["emptyDir"]["medium"] == "Memory"
    assert {mount["mountPath"] for mount in workers["containers"][0]["volumeMounts"]} >= {"/dev/shm"}


def test_secrets_come_from_the_environment_never_the_command_line() -> None:
    (container,) = _pod("Deployment", "responses-server")["containers"]
    assert not any("$(" in arg for arg in container["args"])  # an expanded secret would be in the process list
    from_secrets = {env["name"] for env in container["env"] if "secretKeyRef" in env.get("valueFrom", {})}
    assert from_secrets == {"RESPONSES_SERVER_STORE", "RESPONSES_SERVER_REASONING_KEY"}
    parser = build_parser()
    import os

    os.environ["RESPONSES_SERVER_STORE"] = "postgresql://gw:secret@db/responses"
    try:
        assert build_parser().parse_args([]).store == "postgresql://gw:secret@db/responses"
    finally:
        del os.environ["RESPONSES_SERVER_STORE"]
    assert parser.parse_args([]).store is None


def test_only_the_gateways_and_prometheus_reach_the_workers() -> None:
    policy = _kind("NetworkPolicy", "qwen3-8b-workers")
    workers = _kind("StatefulSet", "qwen3-8b-workers")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= workers.items()
    (rule,) = policy["spec"]["ingress"]
    gateways = _kind("Deployment", "responses-server")["spec"]["template"]["metadata"]["labels"]
    sources = rule["from"]
    assert any(source.get("podSelector", {}).get("matchLabels", {}).items() <= gateways.items()
               and "namespaceSelector" not in source for source in sources)
    assert all("podSelector" in source for source in sources)  # never a whole namespace
    for document in _documents():
        if document["kind"] != "Namespace":
            assert document["metadata"]["namespace"] == "responses-server", document["metadata"]["name"]


def test_the_gateways_scale_on_their_own_open_streams() -> None:
    hpa = _kind("HorizontalPodAutoscaler", "responses-server")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "responses-server"
    pods = [metric["pods"]["metric"]["name"] for metric in hpa["spec"]["metrics"] if metric["type"] == "Pods"]
    from server.metrics import ACTIVE_STREAMS

    assert pods == [ACTIVE_STREAMS._name]  # a series the gateways export


def test_checkov_passes_with_every_skip_justified_in_place() -> None:
    """The scanner platform teams run, with its own check set (from setup's tool venv, no network)."""
    import json
    import subprocess

    checkov = ROOT / ".venv-tools" / "bin" / "checkov"
    done = subprocess.run([str(checkov), "-d", str(MANIFESTS), "--framework", "kubernetes", "--skip-download",
                           "--output", "json"], capture_output=True, text=True, timeout=600)
    report = json.loads(done.stdout)
    summary = report["summary"]
    failed = [(check["check_id"], check["resource"]) for check in report["results"]["failed_checks"]]
    assert summary["failed"] == 0 and not failed, failed
    assert summary["passed"] >= 150
    skipped = report["results"]["skipped_checks"]
    assert skipped and all(len((check.get("check_result") or {}).get("suppress_comment") or "") > 20
                           for check in skipped), skipped


def test_the_workers_serve_vllms_scale_out_api() -> None:
    workers = _kind("StatefulSet", "qwen3-8b-workers")
    args = workers["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--enable-scale-out" in args and "--enable-prompt-tokens-details" in args
