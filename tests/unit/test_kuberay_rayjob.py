"""configs/kuberay-rayjob.yaml, the RayJob docs/cluster.md gives KubeRay users: well formed,
credentials from a Secret, no literal secret anywhere. (The job on a real cluster is
tests/integration/test_cluster_submit.py.)"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from jobs.engine.ray_runtime import RAY_ENV
from tests.support.paths import REPO

RAYJOB = REPO / "configs" / "kuberay-rayjob.yaml"
SECRET_NAMES = ("OPENAI_API_KEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def _rayjob() -> dict[str, Any]:
    document = yaml.safe_load(RAYJOB.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


def _containers(rayjob: dict[str, Any]) -> list[dict[str, Any]]:
    cluster = rayjob["spec"]["rayClusterSpec"]
    groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    return [c for group in groups for c in group["template"]["spec"]["containers"]]


def test_rayjob_is_a_well_formed_kuberay_rayjob() -> None:
    rayjob = _rayjob()
    assert rayjob["apiVersion"] == "ray.io/v1"
    assert rayjob["kind"] == "RayJob"
    spec = rayjob["spec"]
    assert "python -m jobs.context_precision" in spec["entrypoint"]
    assert "configs/nightly.yaml" in spec["entrypoint"]
    assert "--set run.id=" in spec["entrypoint"]
    assert spec["shutdownAfterJobFinishes"] is True
    assert isinstance(spec["ttlSecondsAfterFinished"], int)
    runtime_env = yaml.safe_load(spec["runtimeEnvYAML"])
    assert runtime_env["working_dir"].endswith(".zip")
    # The nodes' environment carries these (the RayJob's containers): the job's runtime_env
    # need not repeat them.
    assert not set(runtime_env.get("env_vars", {})) & set(RAY_ENV)
    assert all(re.search(r"==\d", dep) for dep in runtime_env["pip"]), runtime_env["pip"]
    cluster = spec["rayClusterSpec"]
    assert cluster["headGroupSpec"]["template"]["spec"]["containers"]
    assert len(cluster["workerGroupSpecs"]) >= 1
    for container in _containers(rayjob):
        requests = container["resources"]["requests"]
        assert requests["cpu"] and requests["memory"], container["name"]
        env = {item["name"]: item.get("value") for item in container.get("env", [])}
        assert env.get("LITELLM_LOCAL_MODEL_COST_MAP") == "True", container["name"]


def test_rayjob_takes_credentials_from_a_secret_and_holds_no_literal_secret() -> None:
    rayjob = _rayjob()
    for container in _containers(rayjob):
        env = {item["name"]: item for item in container.get("env", [])}
        for name in SECRET_NAMES:
            assert name in env, f"{container['name']} lacks {name}"
            assert "value" not in env[name], f"{name} must not be a literal in the manifest"
            ref = env[name]["valueFrom"]["secretKeyRef"]
            assert ref["name"] and ref["key"]

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if (
                    isinstance(value, str)
                    and re.search(r"key|secret|token|password", str(key), re.I)
                    and key not in {"secretKeyRef", "key"}
                ):
                    pytest.fail(f"{path}.{key} holds a literal value")
                walk(value, f"{path}.{key}")
        elif isinstance(node, list):
            for n, item in enumerate(node):
                walk(item, f"{path}[{n}]")
        if isinstance(node, dict) and node.get("name") in SECRET_NAMES:
            assert "value" not in node, f"{path}: {node['name']} is a literal"

    walk(rayjob, "")
    walk(yaml.safe_load(rayjob["spec"]["runtimeEnvYAML"]), "runtimeEnvYAML")
    text = RAYJOB.read_text(encoding="utf-8")
    assert not re.search(r"sk-[A-Za-z0-9_-]{16,}|AKIA[0-9A-Z]{16}|ASIA[0-9A-Z]{16}", text)
