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
from pathlib import Path

import pytest

from benchmarks.run import execute_benchmarks, load_outcomes, replay_benchmarks
from healthcheck.model import Host, Status
from healthcheck.profiles import load_profile
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


def test_nccl_jobs_through_real_srun(slurm: SlurmdCluster, tmp_path: Path) -> None:
    from healthcheck.transport import open_transport

    bindir = _install_shim(tmp_path / "bin")
    profile = load_profile("h100-sxm5-8x")
    hosts = [Host(name=n, profile=profile.name) for n in ("node01", "node02")]
    options = {"benchmarks": ["nccl"], "plan": "acceptance", "nccl.shapes": ["node", "pair"],
               "nccl.binary_dir": str(bindir), "nccl.min_bytes": "8G", "nccl.max_bytes": "16G",
               "nccl.env": {"NCCL_IB_HCA": HCA}, "nccl.timeout_s": 30, "telemetry": False,
               "launcher_host": "local",
               "launcher": {"kind": "srun", "host_field": "name", "env": slurm.env, "grace_s": 15}}
    run_dir = tmp_path / "run"
    findings, _ = execute_benchmarks(run_dir, hosts, {profile.name: profile}, open_transport("local"), options)

    by = {}
    for f in findings:
        by.setdefault((f.host, f.check), []).append(f)
    # node01's NVLink job and the pair job parsed and graded from the real srun's stdout
    node01 = by[("node01", "nccl.all_reduce.node.busbw")]
    assert [(f.status, f.value) for f in node01] == [(Status.PASS, pytest.approx(476.0, abs=1.0))], node01
    for h in ("node01", "node02"):
        pair = by[(h, "nccl.all_reduce.pair.busbw")]
        assert [(f.status, f.component) for f in pair] == [(Status.PASS, "pair node01-node02")], pair
        assert float(pair[0].value) == pytest.approx(388.0, abs=1.0)
    # node02's single-node job failed on a rank: srun's own error line names the node and task
    failed = [f for f in findings if f.host == "node02" and f.status in (Status.FAIL, Status.ERROR)]
    assert failed and all("node02" in f.message for f in failed), failed
    assert any("srun: error: node02: task 3" in f.message or "task 3" in f.message for f in failed), failed
    assert not [f for f in findings if f.host == "node01" and f.status in (Status.FAIL, Status.ERROR)]

    # Slurm placed 8 tasks on each node with the profile's NCCL env intact (commas and all)
    tasks = [line.split(" ", 4) for line in (bindir / "tasks.log").read_text().splitlines()]
    pair_tasks = [t for t in tasks if t[2] == "16"]
    assert sorted((t[0], int(t[1])) for t in pair_tasks) == \
        [("node01", r) for r in range(8)] + [("node02", r) for r in range(8, 16)]
    assert {t[3] for t in tasks} == {HCA}
    assert {t[4] for t in tasks} == {"-b 8G -e 16G -f 2 -g 1 -c 1 -n 20 -w 5"}

    outcomes = {o.job.job_id: o for o in load_outcomes(run_dir)}
    assert set(outcomes) == {"nccl-all_reduce_perf-node-node01", "nccl-all_reduce_perf-node-node02",
                             "nccl-all_reduce_perf-pair-node01-node02"}
    assert outcomes["nccl-all_reduce_perf-node-node02"].rc != 0
    assert "srun" in outcomes["nccl-all_reduce_perf-pair-node01-node02"].command
    replayed, _ = replay_benchmarks(run_dir, hosts, {profile.name: profile}, {})
    assert sorted((f.host, f.check, f.status) for f in replayed) == \
        sorted((f.host, f.check, f.status) for f in findings)
