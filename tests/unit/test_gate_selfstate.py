"""The gate's scheduler outcome: the Kubernetes taint/label (through a kubectl shim that keeps a core/v1 NodeList
in a file and applies taint/label/annotate as kubectl does), and the Slurm rule that a run resumes only a drain it
re-checked (a passive run never resumes a node the gate drained for a slow GEMM)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from healthcheck.core.model import Finding, Status
from healthcheck.ops.gate.kubeself import GATE_KEY, REASON_KEY, kube_self
from healthcheck.ops.selfdrain import SelfDrainPolicy, _unchecked_category, reason_check

KUBECTL = r'''#!PYTHON
"""kubectl shim: get nodes [NAME] -o json | taint/label/annotate nodes NAME ... on a JSON NodeList file."""
import json, os, sys
state = os.environ["KUBE_STATE"]
doc = json.load(open(state))
args = sys.argv[1:]
open(state + ".calls", "a").write(" ".join(args) + "\n")
nodes = {n["metadata"]["name"]: n for n in doc["items"]}
if args[:2] == ["get", "nodes"]:
    names = [a for a in args[2:] if not a.startswith("-") and a != "json"]
    if names:
        if names[0] not in nodes:
            sys.exit('Error from server (NotFound): nodes "%s" not found' % names[0])
        print(json.dumps(nodes[names[0]]))
    else:
        print(json.dumps(doc))
    sys.exit(0)
verb, node = args[0], nodes[args[2]]
meta, spec = node["metadata"], node.setdefault("spec", {})
for item in [a for a in args[3:] if a != "--overwrite"]:
    if verb == "taint":
        key = item.split("=")[0].split(":")[0]
        spec["taints"] = [t for t in spec.get("taints", []) if t["key"] != key]
        if not item.endswith("-"):
            value, effect = item.split("=", 1)[1].split(":")
            spec["taints"].append({"key": key, "value": value, "effect": effect})
    else:
        field = meta.setdefault("labels" if verb == "label" else "annotations", {})
        if item.endswith("-"):
            field.pop(item[:-1], None)
        else:
            k, v = item.split("=", 1)
            field[k] = v
json.dump(doc, open(state, "w"))
'''

FAIL = Finding(host="gpu-node-7", check="gpuperf.gemm.siblings", component="gpu3", status=Status.FAIL,
               message="gpu3 (0000:5d:00.0): bf16 GEMM 480.6 TFLOPS = 69% of the median of its 7 siblings")
ERROR = Finding(host="gpu-node-7", check="nccl.all_reduce.job", status=Status.ERROR, message="job hung")
OK = Finding(host="gpu-node-7", check="gpuperf.gemm", component="gpu0", status=Status.PASS, message="fine")


def _node(name: str, **spec: object) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"zone": "a"}}, "spec": spec}


@pytest.fixture
def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "nodes.json"
    items = [_node("gpu-node-7", taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])]
    items += [_node(f"gpu-node-{i}") for i in range(1, 7)]
    state.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    (tmp_path / "bin").mkdir()
    shim = tmp_path / "bin" / "kubectl"
    shim.write_text(KUBECTL.replace("PYTHON", sys.executable))
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("KUBE_STATE", str(state))
    return state


def node(state: Path, name: str = "gpu-node-7") -> dict:
    return next(n for n in json.loads(state.read_text())["items"] if n["metadata"]["name"] == name)


def test_a_failing_gate_taints_labels_and_explains_then_a_clean_one_clears_only_ours(kube: Path):
    out = kube_self([OK, FAIL], "gpu-node-7", SelfDrainPolicy())
    assert out.action == "taint" and out.reason.startswith("healthcheck: gpuperf.gemm.siblings gpu3:")
    n = node(kube)
    assert {(t["key"], t["effect"]) for t in n["spec"]["taints"]} == {("nvidia.com/gpu", "NoSchedule"),
                                                                       (GATE_KEY, "NoSchedule")}
    assert n["metadata"]["labels"] == {"zone": "a", GATE_KEY: "fail"}
    assert n["metadata"]["annotations"][REASON_KEY] == out.reason
    assert kube_self([OK, FAIL], "gpu-node-7", SelfDrainPolicy()).action == "none"   # same reason: nothing sent
    clear = kube_self([OK], "gpu-node-7", SelfDrainPolicy())
    assert clear.action == "clear"
    n = node(kube)
    assert n["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert n["metadata"]["labels"] == {"zone": "a", GATE_KEY: "pass"} and not n["metadata"].get("annotations")


def test_errors_taint_only_when_the_site_fails_closed(kube: Path):
    assert kube_self([OK, ERROR], "gpu-node-7", SelfDrainPolicy()).action == "none"
    assert GATE_KEY not in node(kube)["metadata"]["labels"]
    assert kube_self([OK, ERROR], "gpu-node-7", SelfDrainPolicy(drain_on_error=True)).action == "taint"


def test_the_breaker_refuses_when_the_gate_already_holds_too_many_nodes(kube: Path):
    for i in (1, 2):
        assert kube_self([FAIL], f"gpu-node-{i}", SelfDrainPolicy(max_fraction=0.3)).action == "taint"
    refused = kube_self([FAIL], "gpu-node-7", SelfDrainPolicy(max_fraction=0.3))
    assert refused.action == "refused" and "already tainted 2 of 7 nodes" in refused.note
    assert GATE_KEY not in node(kube)["metadata"]["labels"]


def test_an_unknown_node_or_no_kubectl_changes_nothing(kube: Path, monkeypatch: pytest.MonkeyPatch):
    assert kube_self([FAIL], "nowhere", SelfDrainPolicy()).action == "refused"
    monkeypatch.setenv("PATH", "/nonexistent")
    out = kube_self([FAIL], "gpu-node-7", SelfDrainPolicy())
    assert out.action == "refused" and "kubectl: command not found" in out.note


@pytest.mark.parametrize("reason,check", [
    ("healthcheck: gpuperf.gemm.siblings gpu3: gpu3 ...", "gpuperf.gemm.siblings"),
    ("healthcheck: FAIL gpu.ecc.dbe gpu3=2; WARN xid.79 node (+3 more) run=ID", "gpu.ecc.dbe"),
    ("healthcheck: gate.error: ValueError: bad", "gate.error"),
    ("bios update ticket 4711", None),
])
def test_the_check_our_reason_names(reason, check):
    assert reason_check(reason) == check


def test_a_passive_run_leaves_a_gate_drain_alone_a_gate_run_may_resume_it():
    passive = [Finding(host="n", check="gpu.count", status=Status.PASS, message="8 GPUs")]
    gate_reason = "healthcheck: gpuperf.gemm.siblings gpu3: gpu3 slow"
    assert _unchecked_category(gate_reason, passive) == "gpuperf.gemm.siblings"
    assert _unchecked_category(gate_reason, [OK]) is None
    assert _unchecked_category("healthcheck: gpu.pcie.width gpu5: x8", passive) is None
