"""The benchmark launcher's srun path for real: nccl-tests jobs planned, launched by a real ``srun`` on
a real Slurm cluster (munged + slurmctld + two ``slurmd -N`` nodes on loopback, ``tests/slurmd.py``),
graded, and re-graded from ``raw/_jobs`` by replay.

Only ``all_reduce_perf`` is a shim: every task logs what Slurm gave it (node, rank, task count, the
NCCL env), rank 0 replays our own nccl-tests fixture for the job's node count with the placeholder
host names replaced by the job's nodes, and on node02 the single-node job's task 3 fails, so srun's
own ``srun: error: node02: task 3: ...`` line reaches the grader.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from healthcheck.core.model import Host
from healthcheck.core.profiles import load_profile
from healthcheck.run.benchmarks import load_outcomes, replay_benchmarks
from healthcheck.store.findings_table import read_table
from tests.conftest import fixture_text
from tests.slurmd import SlurmdCluster, missing_tools

pytestmark = [pytest.mark.slurm, pytest.mark.skipif(bool(missing_tools()),
                                                    reason=f"slurmd cluster needs: {missing_tools()}")]

NODE_OK = "nccl-tests/all_reduce-h100-1node-8gpu-healthy-476GBs-8G-16G.txt"
PAIR_OK = "nccl-tests/all_reduce-h100-2node-16gpu-healthy-388GBs-8G-16G.txt"
HCA = "=mlx5_0:1,mlx5_1:1"  # commas: the reason srun gets --export=ALL, not --export=K=V

_SHIM = r"""#!/bin/sh
# test shim for nccl-tests all_reduce_perf under srun: log the task, rank 0 replays a fixture
printf '%s %s %s %s %s\n' "$SLURMD_NODENAME" "$SLURM_PROCID" "$SLURM_NTASKS" "$NCCL_IB_HCA" "$*" >> @LOG@
if [ "$SLURM_NNODES" = 1 ] && [ "$SLURMD_NODENAME" = node02 ] && [ "$SLURM_LOCALID" = 3 ]; then
  echo "shim: simulated rank failure" >&2; exit 3
fi
[ "$SLURM_PROCID" = 0 ] || exit 0
case "$SLURM_NNODES" in 1) f=@NODE@;; 2) f=@PAIR@;; *) echo "shim: no fixture" >&2; exit 2;; esac
i=0
set --
for n in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do
  i=$((i + 1)); set -- "$@" -e "s/gpu-h100-0$i /$n /g"
done
sed "$@" "$f"
"""


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    with SlurmdCluster.start(tmp_path_factory.mktemp("slurmd"), names=("node01", "node02"), cpus=8) as cluster:
        yield cluster


def _install_shim(folder: Path) -> Path:
    folder.mkdir()
    paths = {}
    for key, name in (("@NODE@", NODE_OK), ("@PAIR@", PAIR_OK)):
        paths[key] = folder / Path(name).name
        paths[key].write_text(fixture_text(name).split("\n", 1)[1])  # line 1 says it is our fixture
    text = _SHIM.replace("@LOG@", shlex.quote(str(folder / "tasks.log")))
    for key, path in paths.items():
        text = text.replace(key, shlex.quote(str(path)))
    shim = folder / "all_reduce_perf"
    shim.write_text(text)
    shim.chmod(0o755)
    return folder


def test_bench_with_srun_on_real_slurmd_nodes(slurm: SlurmdCluster, tmp_path: Path) -> None:
    bindir = _install_shim(tmp_path / "bin")
    # the stock profile launches with mpirun and args [--bind-to, none]; --launcher srun must drop them
    profile = load_profile("h100-sxm5-8x")
    assert profile.setting("benchmarks.launcher", {})["args"] == ["--bind-to", "none"]
    bench_vars = {"nccl": {"binary_dir": str(bindir), "env": {"NCCL_IB_HCA": HCA}, "timeout_s": 30},
                  "launcher": {"host_field": "name", "env": slurm.env, "grace_s": 15}}
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"defaults": {"profile": profile.name, "transport": "local",
                                                "benchmarks": bench_vars},
                                   "hosts": {"node01": {}, "node02": {}}}))
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "healthcheck", "bench", "-i", str(inv), "--run-dir", str(run_dir),
                           "--launcher", "srun", "--launcher-host", "local", "--plan", "acceptance"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]  # node02's job ERROR

    findings = [f.to_json() for host in read_table(run_dir).values() for f in host]
    nccl = {(f["host"], f["check"], f["component"]): f for f in findings if f["check"].startswith("nccl.")}
    # every job's stdout came back through the real srun, parsed and graded per host
    for h in ("node01", "node02"):
        assert nccl[(h, "nccl.all_reduce.node.busbw", "node")]["status"] == "PASS"
        assert nccl[(h, "nccl.all_reduce.node.busbw", "node")]["value"] == pytest.approx(476.03)
        for component, check in (("pair node01-node02", "pair"), ("cluster (2 nodes)", "cluster")):
            graded = nccl[(h, f"nccl.all_reduce.{check}.busbw", component)]
            assert (graded["status"], graded["value"]) == ("PASS", pytest.approx(388.77)), graded
            assert nccl[(h, "nccl.all_reduce.data", component)]["status"] == "PASS"
        assert nccl[(h, "nccl.all_reduce.pairs.node", "node")]["status"] == "PASS"
    # node02's single-node job lost a rank: srun's own error line names the node and the task
    bad = [f for f in findings if f["status"] in ("FAIL", "ERROR")]
    assert [(f["host"], f["check"], f["source"], f["message"]) for f in bad] == [
        ("node02", "nccl.all_reduce.job", "nccl-all_reduce_perf-node-node02",
         "the launcher exited with rc 3 although the output looked complete: "
         "srun: node02 task 3: Exited with exit code 3")]

    # Slurm placed 8 tasks per node, each with the NCCL env intact (commas and all) and the program's args
    tasks = [line.split(" ", 4) for line in (bindir / "tasks.log").read_text().splitlines()]
    pair_tasks = [t for t in tasks if t[2] == "16"]
    assert sorted((t[0], int(t[1])) for t in pair_tasks) == \
        sorted(([("node01", r) for r in range(8)] + [("node02", r) for r in range(8, 16)]) * 2)  # pair, cluster
    assert {t[3] for t in tasks} == {HCA}
    assert {t[4] for t in tasks} == {"-b 8G -e 16G -f 2 -g 1 -c 1 -n 20 -w 5"}

    outcomes = {o.job.job_id: o for o in load_outcomes(run_dir)}
    assert set(outcomes) == {"nccl-all_reduce_perf-node-node01", "nccl-all_reduce_perf-node-node02",
                             "nccl-all_reduce_perf-pair-node01-node02", "nccl-all_reduce_perf-cluster-2nodes-node01"}
    failed = outcomes["nccl-all_reduce_perf-node-node02"]
    assert failed.rc == 3 and "srun: error: node02: task 3: Exited with exit code 3" in failed.stderr
    for outcome in outcomes.values():
        assert "--bind-to" not in outcome.command and outcome.launcher == "local"
        assert f"--nodelist={','.join(outcome.job.hosts)}" in outcome.command
    hosts = [Host(name=n, profile=profile.name) for n in ("node01", "node02")]
    replayed, _ = replay_benchmarks(run_dir, hosts, {profile.name: profile}, {})
    assert sorted((f.host, f.check, f.component, f.status.value) for f in replayed if f.check.startswith("nccl.")) \
        == sorted((f["host"], f["check"], f["component"], f["status"]) for f in findings
                  if f["check"].startswith("nccl."))
