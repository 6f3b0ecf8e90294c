"""The deployment files, checked without a container engine or a cluster (neither runs here).

- docker-compose.yml: ``docker-compose config`` (Debian's docker-compose) validates it against the Compose schema;
- deploy/kuberay/rayservice.yaml: KubeRay's RayService v1 schema (tests/fixtures/kuberay) and Ray Serve's own
  config schema for its ``serveConfigV2``, whose ``import_path`` must build our application;
- the Dockerfile, Prometheus and Grafana files: they name what exists (extras, services, metrics).
Each check is also shown to fail on a broken copy, so it can fail.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.required_tools import is_required

REPO = Path(__file__).resolve().parents[1]
COMPOSE = shutil.which("docker-compose")
RAYSERVICE = REPO / "deploy" / "kuberay" / "rayservice.yaml"


def _compose_config(path: Path) -> subprocess.CompletedProcess[str]:
    if COMPOSE is None:
        message = "docker-compose is not on PATH; install it (apt-get install docker-compose)"
        if is_required("DOCKER_COMPOSE"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return subprocess.run(
        [COMPOSE, "-f", str(path), "config", "-q"], cwd=path.parent, capture_output=True, text=True, timeout=60
    )


def test_compose_file_is_valid_and_runs_the_four_services(tmp_path: Path) -> None:
    result = _compose_config(REPO / "docker-compose.yml")
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    assert set(services) == {"redis", "turbotts", "prometheus", "grafana"}
    assert "--backend" in services["turbotts"]["command"]
    for service in services.values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            assert not source.startswith("./") or (REPO / source).exists(), volume
    broken = tmp_path / "docker-compose.yml"
    broken.write_text((REPO / "docker-compose.yml").read_text().replace("shm_size:", "shm_sise:"))
    assert _compose_config(broken).returncode != 0


def _rayservice_schema() -> Any:
    return json.loads(gzip.decompress((REPO / "tests/fixtures/kuberay/rayservice-v1.schema.json.gz").read_bytes()))


def test_rayservice_manifest_matches_kuberays_schema() -> None:
    validator = jsonschema.Draft7Validator(_rayservice_schema())
    manifest = yaml.safe_load(RAYSERVICE.read_text())
    assert [error.message for error in validator.iter_errors(manifest)] == []
    manifest["spec"]["rayClusterConfig"]["headGroupSpec"].pop("template")
    assert any("template" in error.message for error in validator.iter_errors(manifest))


def test_rayservice_serve_config_is_valid_and_builds_our_application() -> None:
    pytest.importorskip("ray", reason="the ray extra is not installed: pip install 'turbotts[ray]'")
    from ray.serve import Application
    from ray.serve.schema import ServeDeploySchema

    from turbotts.scaleout import launch

    config = ServeDeploySchema(**yaml.safe_load(yaml.safe_load(RAYSERVICE.read_text())["spec"]["serveConfigV2"]))
    (application,) = config.applications
    module, _, name = application.import_path.partition(":")
    assert module == launch.__name__ and getattr(launch, name) is launch.app
    assert isinstance(launch.app(application.args or {}), Application)
    assert {d.name for d in application.deployments} <= {"TTSReplica", "Ingress"}
    with pytest.raises(ValueError):
        ServeDeploySchema(applications=[{"import_path": "no_colon_here", "deployments": [{"name": 3}]}])


def test_dockerfile_installs_extras_that_exist_and_defaults_to_cpu() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    pyproject = (REPO / "pyproject.toml").read_text()
    block = pyproject.split("[project.optional-dependencies]")[1].split("\n[")[0]
    extras = set(re.findall(r"^(\w+) = \[", block, re.MULTILINE))
    assert {"server", "dev", "ray"} <= extras
    (installed,) = re.findall(r'"turbotts\[([^\]]+)\]"', dockerfile.split("AS runtime")[1])
    assert set(installed.split(",")) <= extras and "ray" in installed
    assert "ARG VARIANT=cpu" in dockerfile and 'ENTRYPOINT ["turbotts"]' in dockerfile


def test_prometheus_scrapes_the_service_and_grafana_asks_for_metrics_we_export() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    prometheus = yaml.safe_load((REPO / "deploy/prometheus/prometheus.yml").read_text())
    (target,) = prometheus["scrape_configs"][0]["static_configs"][0]["targets"]
    assert target == f"turbotts:{compose['services']['turbotts']['ports'][0].split(':')[1]}"

    def family(name: str) -> str:
        return re.sub(r"_(bucket|total|count|sum)$", "", name)

    exported = {
        family(n) for n in re.findall(r'"(turbotts_\w+)"', (REPO / "turbotts/server/ops/metrics.py").read_text())
    }
    dashboard = json.loads((REPO / "deploy/grafana/dashboards/turbotts.json").read_text())
    for panel in dashboard["panels"]:
        for target_ in panel["targets"]:
            for metric in re.findall(r"turbotts_\w+", target_["expr"]):
                assert family(metric) in exported, metric
