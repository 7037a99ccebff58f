"""Self-drain under concurrency (issue 29.5): 40 faulty nodes run ``healthcheck node --slurm-self`` at once.

A real slurmctld with 40 real ``slurmd -N nodeNN`` (``tests/slurmd.py``). Each node's run gets our faulty
H100 fixture from an ``nvidia-smi`` shim. A ``sinfo`` shim makes the race certain instead of likely: the
first ``sinfo`` of each node (the breaker's first look) runs the real ``sinfo`` and then waits until all
40 nodes have read theirs before it prints; so every node reads the cluster before any node drains, the
worst interleaving.
Later ``sinfo`` calls (the second look) pass straight through. With ``--max-drain-fraction 0.10`` of 40
nodes (limit 4), exactly 4 nodes stay drained with our reason and the other 36 resume themselves.
Every wait is bounded.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT
from tests.slurmctld import START_TIMEOUT_S
from tests.slurmd import SlurmdCluster, missing_tools

pytestmark = [pytest.mark.slurm, pytest.mark.skipif(bool(missing_tools()),
                                                    reason=f"slurmd cluster needs: {missing_tools()}")]

NODES = tuple(f"node{i:02d}" for i in range(1, 41))
RUN_TIMEOUT_S = 300.0   # 40 node runs on a 2-core machine, with the barrier


def _shims(base: Path) -> Path:
    shims = base / "bin"
    shims.mkdir()
    smi = shims / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nexec cat {shlex.quote(str(FIXTURES / 'nvidia-smi-xml' / 'h100-8x-faulty.xml'))}\n")
    gate = shlex.quote(str(base / "gate"))
    sinfo = shims / "sinfo"
    sinfo.write_text(  # test shim: every node's first look is read before any of them returns (bounded)
        "#!/bin/sh\n"
        f'mark={gate}/"$SLURMD_NODENAME"\n'
        f'[ -e "$mark" ] && exec {shlex.quote(_real("sinfo"))} "$@"\n'
        f'out=$({shlex.quote(_real("sinfo"))} "$@"); rc=$?\n'
        ': >"$mark"; i=0\n'
        f'while [ "$(ls {gate} | wc -l)" -lt {len(NODES)} ] && [ $i -lt 2400 ]; do sleep 0.1; i=$((i+1)); done\n'
        'printf "%s\\n" "$out"; exit $rc\n')
    for shim in (smi, sinfo):
        shim.chmod(0o755)
    (base / "gate").mkdir()
    return shims


def _real(tool: str) -> str:
    found = shutil.which(tool)
    assert found, tool
    return found


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("race")
    with SlurmdCluster.start(base, names=NODES, cpus=1) as started:
        yield started


def test_forty_concurrent_self_drains_hold_the_limit(cluster: SlurmdCluster) -> None:
    base = cluster.base
    shims = _shims(base)
    env = {**os.environ, **cluster.env, "PATH": f"{shims}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    procs = {}
    for name in NODES:
        argv = [sys.executable, "-m", "healthcheck", "node", "--out", str(base / "spool"), "--probes", "gpu",
                "--profile", "h100-sxm5-8x", "--slurm-self", "--max-drain-fraction", "0.10"]
        procs[name] = subprocess.Popen(argv, env={**env, "SLURMD_NODENAME": name}, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE, text=True)
    errors = {}
    try:
        for name, proc in procs.items():
            errors[name] = proc.communicate(timeout=RUN_TIMEOUT_S + START_TIMEOUT_S)[1]
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    assert len(os.listdir(base / "gate")) == len(NODES)   # every node took its first look before any drain
    states = cluster.tool("sinfo", "-h", "-N", "-o", "%N|%T|%E").stdout.splitlines()
    drained = sorted(line.split("|")[0] for line in states if line.split("|")[2].startswith("healthcheck: "))
    assert len(drained) == 4, (drained, errors)
    kept = [n for n, err in errors.items() if "healthcheck: slurm drain: drain (" in err]
    undone = [n for n, err in errors.items() if "healthcheck: slurm refused: circuit breaker (second look)" in err]
    assert sorted(kept) == drained and len(undone) == 36, errors
    assert all(procs[n].returncode == 1 for n in NODES)   # every node is faulty: NHC's exit 1
    idle = [line for line in states if line.split("|")[0] not in drained]
    assert all(line.split("|")[2] == "none" for line in idle), idle
