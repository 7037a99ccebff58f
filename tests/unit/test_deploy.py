"""The shipped deployment examples (inventories/deploy/), validated offline.

- systemd units: ``systemd-analyze verify`` (the real parser of unit files), with ExecStart pointed at
  an executable that exists here (verify refuses a missing binary);
- Kubernetes manifests: every field checked against the models of the official ``kubernetes`` Python
  client (generated from the Kubernetes OpenAPI spec): unknown fields, wrong types, missing required
  fields; plus the cross-references the API server would only catch at runtime (volume names, selector
  vs labels, PVC, service account). No API server runs here: nothing was applied to a cluster;
- shell scripts (the Slurm wrapper, the containers' loops): ``sh -n``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from healthcheck.cli.node import deploy_files
from tests.conftest import ROOT

FILES = deploy_files()


def test_the_deploy_files_ship_and_print_exactly() -> None:
    assert sorted(FILES) == ["healthcheck-node.service", "healthcheck-node.timer", "kubernetes-cronjob.yaml",
                             "kubernetes-daemonset.yaml", "kubernetes-gate.yaml", "slurm-gate.sh",
                             "slurm-healthcheck.sh"]
    out = subprocess.run([sys.executable, "-m", "healthcheck", "deploy", "show", "healthcheck-node.timer"],
                         capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout == (ROOT / "inventories" / "deploy" / "healthcheck-node.timer").read_text()


# -- systemd ------------------------------------------------------------------------------------------
def _verify(folder: Path, names: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["systemd-analyze", "verify", "--man=no", *(str(folder / n) for n in names)],
                          capture_output=True, text=True, timeout=60)


def _units(tmp_path: Path, service_text: str) -> Path:
    stub = tmp_path / "healthcheck"
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    (tmp_path / "healthcheck-node.service").write_text(service_text.replace("/usr/local/bin/healthcheck", str(stub)))
    (tmp_path / "healthcheck-node.timer").write_text(FILES["healthcheck-node.timer"])
    return tmp_path


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_units_verify(tmp_path: Path) -> None:
    proc = _verify(_units(tmp_path, FILES["healthcheck-node.service"]),
                   ["healthcheck-node.service", "healthcheck-node.timer"])
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    service = FILES["healthcheck-node.service"]
    assert "SuccessExitStatus=1\n" in service and "Type=oneshot\n" in service
    assert "Environment=HEALTHCHECK_NODE_PROM=/var/lib/node_exporter/textfile_collector/healthcheck.prom" in service


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_verify_catches_a_bad_unit(tmp_path: Path) -> None:
    proc = _verify(_units(tmp_path, FILES["healthcheck-node.service"].replace("Type=oneshot", "Type=oneshoot")),
                   ["healthcheck-node.service"])
    assert "Failed to parse service type, ignoring: oneshoot" in proc.stderr


# -- shell ----------------------------------------------------------------------------------------------
def _container_scripts() -> list[str]:
    scripts = []
    for name in ("kubernetes-daemonset.yaml", "kubernetes-cronjob.yaml"):
        for doc in yaml.safe_load_all(FILES[name]):
            spec = doc.get("spec", {})
            pod = spec.get("jobTemplate", {}).get("spec", spec).get("template", {}).get("spec", {})
            scripts += [c["args"][0] for c in pod.get("containers", [])]
    return scripts


@pytest.mark.parametrize("script", [FILES["slurm-healthcheck.sh"], FILES["slurm-gate.sh"], *_container_scripts()])
def test_shell_scripts_parse(script: str) -> None:
    proc = subprocess.run(["sh", "-n"], input=script, capture_output=True, text=True, timeout=30)
    assert (proc.returncode, proc.stderr) == (0, "")


# -- Kubernetes -----------------------------------------------------------------------------------------
def schema_errors(obj: Any, type_name: str, path: str = "") -> list[str]:
    """Unknown fields and wrong types against the kubernetes client's generated models."""
    from kubernetes import client

    if type_name.startswith("list["):
        if not isinstance(obj, list):
            return [f"{path}: expected a list"]
        return [e for i, item in enumerate(obj) for e in schema_errors(item, type_name[5:-1], f"{path}[{i}]")]
    if type_name.startswith("dict("):
        inner = type_name[type_name.index(",") + 1:-1].strip()
        if not isinstance(obj, dict):
            return [f"{path}: expected a mapping"]
        return [e for k, v in obj.items() for e in schema_errors(v, inner, f"{path}.{k}")]
    scalars = {"str": str, "bool": bool, "int": int, "float": (int, float), "datetime": str, "date": str}
    if type_name in scalars:
        ok = isinstance(obj, scalars[type_name]) and not (type_name in ("int", "float") and isinstance(obj, bool))
        return [] if ok else [f"{path}: expected {type_name}, got {type(obj).__name__} {obj!r}"]
    if type_name == "object":
        return []
    model = getattr(client, type_name)
    if not isinstance(obj, dict):
        return [f"{path}: expected a {type_name} mapping"]
    by_json = {json_key: py for py, json_key in model.attribute_map.items()}
    errors = []
    for key, value in obj.items():
        if key not in by_json:
            errors.append(f"{path}.{key}: unknown field of {type_name}")
        else:
            errors += schema_errors(value, model.openapi_types[by_json[key]], f"{path}.{key}")
    return errors


def validate_manifest(text: str) -> list[str]:
    """Schema errors plus required fields (the client raises on a missing one while deserializing)."""
    from kubernetes import client

    errors = []
    for doc in yaml.safe_load_all(text):
        model = "V1" + doc["kind"]
        errors += schema_errors(doc, model, doc["kind"])

        class Response:
            data = json.dumps(doc)

        try:
            client.ApiClient().deserialize(Response(), model)
        except ValueError as exc:
            errors.append(f"{doc['kind']}: {exc}")
    return errors


def _docs(name: str) -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(FILES[name])}


@pytest.mark.parametrize("name", ["kubernetes-daemonset.yaml", "kubernetes-cronjob.yaml", "kubernetes-gate.yaml"])
def test_manifests_match_the_kubernetes_api_models(name: str) -> None:
    pytest.importorskip("kubernetes")
    assert validate_manifest(FILES[name]) == []


def test_the_validator_catches_typos_types_and_missing_fields() -> None:
    pytest.importorskip("kubernetes")
    broken = (FILES["kubernetes-daemonset.yaml"].replace("          volumeMounts:", "          volumeMount:")
              .replace("privileged: true", "privileged: yes-please")
              .replace("        - name: healthcheck\n          image:", "        - image:"))
    errors = validate_manifest(broken)
    assert ".spec.template.spec.containers[0].volumeMount: unknown field of V1Container" in " ".join(errors)
    assert any("privileged: expected bool, got str 'yes-please'" in e for e in errors)
    assert any("Invalid value for `name`, must not be `None`" in e for e in errors)


def test_daemonset_runs_privileged_with_host_dev_sys_journal_and_shared_spool() -> None:
    docs = _docs("kubernetes-daemonset.yaml")
    pod = docs["DaemonSet"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert set(mounts.values()) <= set(volumes)  # every mount names a declared volume
    assert {p: volumes[mounts[p]].get("hostPath", {}).get("path") for p in ("/dev", "/sys", "/var/log/journal")} \
        == {"/dev": "/dev", "/sys": "/sys", "/var/log/journal": "/var/log/journal"}
    assert container["securityContext"] == {"privileged": True} and pod["hostNetwork"] is True
    assert volumes[mounts["/spool"]]["persistentVolumeClaim"]["claimName"] == docs["PersistentVolumeClaim"][
        "metadata"]["name"]
    assert docs["DaemonSet"]["spec"]["selector"]["matchLabels"].items() <= \
        docs["DaemonSet"]["spec"]["template"]["metadata"]["labels"].items()
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HEALTHCHECK_NODE_OUT"] == "/spool" and env["HEALTHCHECK_NODE_BUDGET"] == "30"
    assert pod["tolerations"] == [{"operator": "Exists"}]


def test_cronjob_merges_the_same_spool_and_may_drain_with_its_service_account() -> None:
    docs = _docs("kubernetes-cronjob.yaml")
    pod = docs["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == docs["ServiceAccount"]["metadata"]["name"]
    assert docs["ClusterRoleBinding"]["subjects"][0]["name"] == pod["serviceAccountName"]
    assert docs["ClusterRole"]["rules"] == [{"apiGroups": [""], "resources": ["nodes"],
                                             "verbs": ["get", "list", "patch", "update"]}]
    claim = next(v for v in pod["volumes"] if v["name"] == "spool")["persistentVolumeClaim"]["claimName"]
    assert claim == "healthcheck-spool"
    script = pod["containers"][0]["args"][0]
    assert "healthcheck merge /spool --run-dir \"$run\" -i /config/inventory.yaml" in script
    assert "healthcheck drain \"$run\" --scheduler kubernetes" in script
    yaml.safe_load(docs["ConfigMap"]["data"]["inventory.yaml"])


def test_gate_init_container_measures_the_jobs_gpus_and_may_only_read_and_patch_nodes() -> None:
    docs = _docs("kubernetes-gate.yaml")
    pod = docs["Job"]["spec"]["template"]["spec"]
    (gate,) = pod["initContainers"]
    (train,) = pod["containers"]
    assert gate["command"] == ["healthcheck", "gate", "--kubernetes-self"]
    assert gate["args"] == ["--host", "$(NODE_NAME)", "--kube-node", "$(NODE_NAME)"]
    env = {e["name"]: e for e in gate["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["HEALTHCHECK_GATE_ON_ERROR"]["value"] == "open" and env["HEALTHCHECK_GATE_BUDGET"]["value"] == "60"
    assert gate["resources"]["limits"]["nvidia.com/gpu"] == train["resources"]["limits"]["nvidia.com/gpu"]
    assert pod["restartPolicy"] == "Never" and pod["serviceAccountName"] == docs["ServiceAccount"]["metadata"]["name"]
    assert docs["ClusterRole"]["rules"] == [{"apiGroups": [""], "resources": ["nodes"],
                                             "verbs": ["get", "list", "patch"]}]
    assert docs["ClusterRoleBinding"]["subjects"][0]["name"] == pod["serviceAccountName"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    (mount,) = gate["volumeMounts"]
    assert mount["mountPath"] == env["HEALTHCHECK_GATE_OUT"]["value"] == "/spool"
    assert volumes[mount["name"]]["hostPath"]["path"] == "/var/spool/healthcheck-gate"  # the cache outlives the pod


def test_gate_options_the_manifest_and_wrapper_set_exist_on_the_command() -> None:
    from healthcheck.cli.gate import gate

    names = {p.name for p in gate.params}
    for env in ("HEALTHCHECK_GATE_OUT", "HEALTHCHECK_GATE_BUDGET", "HEALTHCHECK_GATE_ON_ERROR",
                "HEALTHCHECK_GATE_PROFILE"):
        assert env.removeprefix("HEALTHCHECK_GATE_").lower() in names
    wrapper = FILES["slurm-gate.sh"]
    assert "healthcheck gate --slurm-self" in wrapper and "nohold_on_prolog_fail" in wrapper
