"""Slurm transport: one job step for the whole sweep vs one job per host, on loopback slurmd nodes.

    python bench/slurm_step.py --nodes 16 32 64 --rounds 2 --probes system

For each node count a real slurmctld and N ``slurmd -N`` (tests/slurmd.py; needs root, slurm, munge)
start once; then ``healthcheck run --transport slurm`` runs with ``--slurm-mode step`` and
``--slurm-mode per-host``, alternating, ``--rounds`` times each. Printed per run: wall seconds, the
jobs the controller created (``_slurm_rpc_allocate_resources`` lines in slurmctld.log) and the hosts
graded. All slurmd run on this one machine, so the per-node work competes for the same cores: the
numbers show controller and orchestrator cost, not a real cluster's. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.slurmd import SlurmdCluster, missing_tools  # noqa: E402

ALLOC = "_slurm_rpc_allocate_resources JobId="


def one_run(cluster: SlurmdCluster, base: Path, mode: str, tag: str, probes: str) -> dict[str, object]:
    log = cluster.base / "log" / "slurmctld.log"
    before = log.read_text().count(ALLOC)
    run_dir = base / f"run-{tag}"
    env = {**os.environ, **cluster.env, "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "healthcheck", "run", "--hosts", cluster.nodes, "--transport",
                           "slurm", "--slurm-mode", mode, "--probes", probes, "--run-dir", str(run_dir),
                           "--forks", "64", "--timeout", "60"], capture_output=True, text=True, timeout=1800, env=env)
    wall = time.monotonic() - started
    results = json.loads((run_dir / "results.json").read_text()) if (run_dir / "results.json").is_file() else {}
    verdicts: dict[str, int] = {}
    for host in results.get("hosts", {}).values():
        verdicts[host["verdict"]] = verdicts.get(host["verdict"], 0) + 1
    return {"mode": mode, "wall_s": round(wall, 1), "jobs": log.read_text().count(ALLOC) - before,
            "hosts": len(results.get("hosts", {})), "verdicts": verdicts, "rc": proc.returncode}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--probes", default="system")
    args = parser.parse_args()
    if missing_tools():
        sys.exit(f"needs: {missing_tools()}")
    for count in args.nodes:
        with tempfile.TemporaryDirectory(prefix=f"hc-bench-slurm{count}-") as tmp:
            base = Path(tmp)
            names = tuple(f"n{i:03d}" for i in range(1, count + 1))
            started = time.monotonic()
            with SlurmdCluster.start(base / "slurm", names=names, cpus=1) as cluster:
                cluster.nodes = f"n[001-{count:03d}]"
                print(f"# {count} slurmd up in {time.monotonic() - started:.1f}s; load {os.getloadavg()[0]:.1f}",
                      flush=True)
                for r in range(args.rounds):
                    for mode in ("step", "per-host") if r % 2 == 0 else ("per-host", "step"):
                        row = one_run(cluster, base, mode, f"{mode}-{r}", args.probes)
                        print(json.dumps({"nodes": count, "round": r, **row,
                                          "load": round(os.getloadavg()[0], 1)}), flush=True)


if __name__ == "__main__":
    main()
