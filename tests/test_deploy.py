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


def test_the_gateways_run_the_fleet_file_they_mount_with_probes_a_budget_and_an_autoscaler(tmp_path: Path) -> None:
    gateway = _kind("Deployment", "responses-server")
    container = gateway["spec"]["template"]["spec"]["containers"][0]
    args = build_parser().parse_args(container["args"])
    mount = next(m for m in container["volumeMounts"] if args.fleet.is_relative_to(m["mountPath"]))
    volume = next(v for v in gateway["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
    config_map = _kind("ConfigMap", volume["configMap"]["name"])
    fleet_toml = tmp_path / args.fleet.name
    fleet_toml.write_text(config_map["data"][args.fleet.name])
    fleet = read_fleet_file(fleet_toml)
    services = {document["metadata"]["name"] for document in _documents() if document["kind"] == "Service"}
    for model in fleet.models:  # each engine URL is a Service of these manifests
        assert all(url.split("//")[1].split(":")[0] in services for url in model.engines)
    assert container["readinessProbe"]["httpGet"]["path"] == container["livenessProbe"]["httpGet"]["path"] == "/health"
    assert _kind("PodDisruptionBudget")["spec"]["selector"] == gateway["spec"]["selector"]
    assert _kind("HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]["name"] == gateway["metadata"]["name"]


def test_the_workers_serve_vllms_scale_out_api() -> None:
    workers = _kind("Deployment", "qwen3-8b-workers")
    args = workers["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--enable-scale-out" in args and "--enable-prompt-tokens-details" in args
