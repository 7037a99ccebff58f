"""``healthcheck gate`` as Slurm's Prolog and Epilog, on a real slurmctld and two real slurmd (loopback).

slurm.conf runs the shipped wrapper (inventories/deploy/slurm-gate.sh) as Prolog and Epilog, with
``SchedulerParameters=nohold_on_prolog_fail`` and node01 weighted before node02 (the scheduler tries node01
first). The wrapper reads its site defaults from ``base/defaults`` instead of /etc/default/healthcheck: PATH with
the GPU tool shims (tests/gateshims.py, per-node faults through SLURMD_NODENAME), this checkout, the test profile
(small test costs) and a 30 s budget. Asserted: a job on a healthy node runs; a job that lands on a node with a
slow GPU is requeued and runs on the other node, which the gate drained with our reason; a hung test is killed
inside the budget and, fail-open, the job still runs. Every wait is bounded.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.gateshims import PROFILE, GateShims
from tests.slurmd import SlurmdCluster, missing_tools

pytestmark = [pytest.mark.slurm, pytest.mark.skipif(bool(missing_tools()),
                                                    reason=f"slurmd cluster needs: {missing_tools()}")]

BUDGET_S = 30
WAIT_S = 360.0  # a requeued batch job becomes eligible again 120 s later (Slurm 22.05: EligibleTime)


def _wrapper(base: Path, shims: GateShims) -> Path:
    _exec(shims.bin / "healthcheck", f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m healthcheck "$@"\n')
    (base / "defaults").write_text("\n".join([
        f"PATH={shlex.quote(str(shims.bin))}:$PATH", f"PYTHONPATH={shlex.quote(str(ROOT))}",
        f"SLURM_CONF={shlex.quote(str(base / 'slurm.conf'))}",
        f"HEALTHCHECK_PROFILES_DIR={shlex.quote(str(shims.profiles))}",
        f"HEALTHCHECK_GATE_OUT={shlex.quote(str(base / 'spool'))}", f"HEALTHCHECK_GATE_PROFILE={PROFILE}",
        "HEALTHCHECK_GATE_PROBES=gpu", f"HEALTHCHECK_GATE_BUDGET={BUDGET_S}",
        f"HEALTHCHECK_GATE_EPILOG_BUDGET={BUDGET_S}",
        f'HEALTHCHECK_GATE_LOG={shlex.quote(str(base))}/gate-"$SLURMD_NODENAME".log', ""]))
    shipped = (ROOT / "inventories" / "deploy" / "slurm-gate.sh").read_text()
    assert shipped.count("/etc/default/healthcheck") == 2
    return _exec(base / "slurm-gate.sh", shipped.replace("/etc/default/healthcheck", str(base / "defaults")))


def _exec(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


class GateCluster(SlurmdCluster):
    hook_lines = ""

    def _conf_text(self, munge_socket: Path) -> str:
        text = super()._conf_text(munge_socket)
        text = text.replace("NodeName=node01 ", "NodeName=node01 Weight=1 ").replace("NodeName=node02 ",
                                                                                   "NodeName=node02 Weight=2 ")
        text = text.replace("SchedulerType=sched/builtin\n",
                            "SchedulerType=sched/builtin\nSchedulerParameters=nohold_on_prolog_fail\n")
        return text + self.hook_lines


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("gate")
    shims = GateShims.make(base / "shims", timeout_s=600.0)   # tests are cut by the budget, not their timeout
    wrapper = _wrapper(base, shims)
    lines = f"Prolog={wrapper}\nEpilog={wrapper}\nPrologEpilogTimeout={BUDGET_S + 60}\n"
    cls = type("Cluster", (GateCluster,), {"hook_lines": lines})
    with cls.start(base, names=("node01", "node02"), cpus=1) as started:
        started.shims = shims  # type: ignore[attr-defined]
        yield started


def _node(cluster: SlurmdCluster, name: str) -> tuple[str, str]:
    out = cluster.tool("sinfo", "-h", "-N", "-n", name, "-o", "%T|%E", check=False).stdout.strip()
    state, _, reason = out.partition("|")
    return state, reason


def _wait(predicate, what: str, timeout_s: float = WAIT_S) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(1.0)
    raise AssertionError(f"not within {timeout_s:g}s: {what}")


def _submit(cluster: SlurmdCluster, name: str) -> tuple[str, Path]:
    out = cluster.base / f"{name}.out"
    script = _exec(cluster.base / f"{name}.sh", '#!/bin/sh\necho "ran on $SLURMD_NODENAME"\n')
    proc = cluster.tool("sbatch", "--parsable", "-J", name, "-o", str(out), str(script), check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";")[0], out


def _done(cluster: SlurmdCluster, job: str) -> bool:
    return not cluster.tool("squeue", "-h", "-j", job, check=False).stdout.strip()


def _gate(cluster: SlurmdCluster, node: str) -> dict:
    return json.loads((cluster.base / "spool" / node / "gate.json").read_text())


def _clear_cache(cluster: SlurmdCluster) -> None:
    for path in (cluster.base / "spool" / ".gate-cache").glob("*.json"):
        path.unlink()


def test_a_job_on_a_healthy_node_starts_after_the_gate(cluster):
    job, out = _submit(cluster, "healthy")
    _wait(lambda: _done(cluster, job) and out.is_file() and "ran on" in out.read_text(), "the job ran")
    assert out.read_text().strip().splitlines()[-1] == "ran on node01"
    assert _node(cluster, "node01") == ("idle", "none")
    record = _gate(cluster, "node01")
    assert {t["name"]: t["state"] for t in record["tests"]}.keys() == {"gpuperf", "copy", "dcgm_diag", "nccl", "sdc"}
    results = json.loads((cluster.base / "spool" / "node01" / "results.json").read_text())
    assert results["hosts"]["node01"]["verdict"] == "PASS"
    log = (cluster.base / "gate-node01.log").read_text()
    assert "prolog_slurmd job" in log and "epilog_slurmd job" in log   # the Epilog ran the gate too


def test_the_next_job_on_that_node_reuses_the_passing_tests(cluster):
    log = cluster.base / "gate-node01.log"
    before = log.read_text()
    job, out = _submit(cluster, "cached")
    _wait(lambda: _done(cluster, job) and out.is_file() and "ran on" in out.read_text(), "the second job ran")
    prolog = log.read_text()[len(before):].split("epilog_slurmd job")[0]
    assert "prolog_slurmd job" in prolog
    for test in ("gpuperf", "copy", "dcgm_diag", "nccl", "sdc"):
        assert f"# test {test}: cached: passed" in prolog


def test_a_job_that_lands_on_a_faulty_node_is_requeued_elsewhere_and_the_node_drained(cluster):
    shims: GateShims = cluster.shims
    shims.set("gpuperf", "gpuperf/h100-8gpu-torch-gpu3-gemm-32pct-slow.txt", node="node01")
    _clear_cache(cluster)
    try:
        job, out = _submit(cluster, "requeued")
        _wait(lambda: _node(cluster, "node01")[0] in ("drained", "draining"), "node01 drained by its Prolog")
        reason = _node(cluster, "node01")[1]
        assert reason.startswith("healthcheck: gpuperf.gemm.siblings gpu3: gpu3 (0000:5d:00.0): bf16 GEMM "), reason
        _wait(lambda: _done(cluster, job) and out.is_file() and "ran on" in out.read_text(),
              "the requeued job ran on the healthy node")
        assert out.read_text().strip().splitlines()[-1] == "ran on node02"
        restarts = cluster.tool("scontrol", "show", "job", job, check=False).stdout
        assert "Restarts=1" in restarts or not restarts.strip()   # requeued once (the record may be purged)
        assert _node(cluster, "node02") == ("idle", "none")
        assert "healthcheck: slurm drain" in (cluster.base / "gate-node01.log").read_text()
    finally:
        shims.clear("gpuperf", node="node01")
        cluster.scontrol("update", "NodeName=node01", "State=RESUME", check=False)


def test_a_hung_test_is_cut_at_the_budget_and_the_job_still_runs(cluster):
    shims: GateShims = cluster.shims
    cluster.scontrol("update", "NodeName=node01", "State=DRAIN", "Reason=test: keep jobs on node02", check=False)
    shims.set("nccl", "hang", node="node02")
    _clear_cache(cluster)
    try:
        job, out = _submit(cluster, "hang")
        _wait(lambda: _done(cluster, job) and out.is_file() and "ran on" in out.read_text(),
              "the job ran after a gate whose NCCL test hung")
        assert out.read_text().strip().splitlines()[-1] == "ran on node02"
        nccl = next(t for t in _gate(cluster, "node02")["tests"] if t["name"] == "nccl")
        assert nccl["timed_out"] and nccl["timeout_s"] < BUDGET_S          # cut by the budget, not its 600 s
        pid = shims.pid("nccl")
        assert pid is not None and not Path(f"/proc/{pid}").exists()
        assert _node(cluster, "node02") == ("idle", "none")                 # fail-open: our error never drains
    finally:
        shims.clear("nccl", node="node02")
        cluster.scontrol("update", "NodeName=node01", "State=RESUME", check=False)
