"""Per-GPU outcomes and their folding: each outcome becomes its Finding, or is folded with its like."""

from __future__ import annotations

import dataclasses

import pytest

from healthcheck.core.model import Finding, Host, Status
from healthcheck.core.profiles import load_profile
from healthcheck.core.spec import EvalContext
from healthcheck.probes.gpu import parse_nvidia_smi_output
from healthcheck.probes.gpu_eval import evaluate_gpu
from healthcheck.probes.gpu_findings import GpuScope, collapse, gpu_finding, graded
from tests.conftest import fixture_text

H100 = load_profile("h100-sxm5-8x")
OBS = parse_nvidia_smi_output("nvidia-smi-q-x", fixture_text("nvidia-smi-xml/h100-8x-healthy.xml"), 0)


def _scope(index: int = 3, bus_id: str | None = "00000000:9B:00.0") -> GpuScope:
    gpu = dataclasses.replace(OBS.gpus[0], index=index, bus_id=bus_id)
    return GpuScope(EvalContext(host=Host("gpu001"), profile=H100), OBS, gpu)


def test_scope_names_the_gpu_with_and_without_bus_id():
    at = _scope()
    assert (at.host, at.source, at.component, at.label) == ("gpu001", "nvidia-smi-q-x", "gpu3",
                                                            "gpu3 (00000000:9B:00.0)")
    assert _scope(bus_id=None).label == "gpu3"


def test_outcomes_become_their_findings():
    at = _scope()
    passing = graded(at, "gpu.ecc.dram_uncorrectable", 0, "remedy", detail="volatile 0, aggregate 0")
    skipped = gpu_finding(at, "gpu.pcie.gen", Status.SKIP, 5, "== 5 under load", message="idle", remedy="r")
    failing = gpu_finding(at, "gpu.pcie.gen", Status.FAIL, 4, "== 5 under load", message="Gen4", remedy="r")
    assert passing.finding("gpu001", at.source) == Finding(
        host="gpu001", check="gpu.ecc.dram_uncorrectable", status=Status.PASS, component="gpu3", value=0,
        expected="<= 20000000 errors", unit="errors", source="nvidia-smi-q-x",
        message="gpu3 (00000000:9B:00.0): gpu ecc dram uncorrectable 0 errors, within <= 20000000 errors "
                "(volatile 0, aggregate 0)")
    assert skipped.finding("gpu001", at.source) == Finding(
        host="gpu001", check="gpu.pcie.gen", status=Status.SKIP, component="gpu3", value=5,
        expected="== 5 under load", message="gpu3 (00000000:9B:00.0): idle", source="nvidia-smi-q-x")
    f = failing.finding("gpu001", at.source)
    assert f.remedy == "r" and f.message == "gpu3 (00000000:9B:00.0): Gen4"


def test_collapse_keeps_bad_gpus_folds_the_rest_and_leaves_a_lone_gpu_whole():
    scopes = [_scope(i, f"bus{i}") for i in range(4)]
    results = [gpu_finding(at, "gpu.pcie.gen", Status.FAIL if at.gpu.index == 2 else Status.SKIP, 5, "== 5",
                           message="m", remedy="r") for at in scopes]
    results += [graded(at, "gpu.memory_mib", 81559 + at.gpu.index, "remedy") for at in scopes[:1]]
    results += [None, graded(scopes[0], "gpu.no_such_check", 1, "remedy"), graded(scopes[1], "gpu.no_such_check", 1,
                                                                                  "remedy")]
    out = collapse(results, 4, "gpu001", "nvidia-smi-q-x")
    assert [(f.check, f.component, f.status.value, f.message) for f in out] == [
        ("gpu.pcie.gen", "gpu2", "FAIL", "gpu2 (bus2): m"),
        ("gpu.pcie.gen", "node", "SKIP", "gpu0,gpu1,gpu3: m"),
        ("gpu.memory_mib", "gpu0", "PASS", "gpu0 (bus0): gpu memory mib 81559 MiB, within >= 81559 MiB"),
        ("gpu.no_such_check", "node", "SKIP", "no expectation for gpu.no_such_check in profile h100-sxm5-8x")]


def test_a_gpu_alone_with_a_skip_keeps_its_full_finding():
    obs = dataclasses.replace(OBS, gpus=OBS.gpus[:1], count=1)
    [gen] = [f for f in evaluate_gpu(obs, EvalContext(host=Host("gpu001"), profile=H100)) if f.check == "gpu.pcie.gen"]
    assert (gen.status, gen.component, gen.remedy) == (Status.SKIP, "gpu0", None)
    assert gen.message.startswith("gpu0 (00000000:19:00.0): PCIe Gen5 of Gen5 at idle")


@pytest.mark.parametrize("bus_id", ["00000000:19:00.0", "gpu pcie replays"])
def test_a_lone_gpus_replay_growth_is_worded_as_growth(bus_id):
    """The measurement is worded "PCIe replay growth"; the GPU's label stays as the node printed it."""
    gpu = dataclasses.replace(OBS.gpus[0], bus_id=bus_id, pcie_replays=50)
    ctx = EvalContext(host=Host("gpu001"), profile=H100,
                      previous={"gpu": {"gpus": [{"bus_id": bus_id, "index": 0, "pcie_replays": 40}]}})
    findings = evaluate_gpu(dataclasses.replace(OBS, gpus=(gpu,), count=1), ctx)
    [f] = [f for f in findings if f.check == "gpu.pcie.replays"]
    assert (f.status, f.component, f.value) == (Status.PASS, "gpu0", 10)
    assert f.message == (f"gpu0 ({bus_id}): PCIe replay growth 10 replays, within <= 80 replays "
                         "(40 -> 50 since the previous run)")
