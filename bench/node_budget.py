"""Node-local run time per ``--budget`` level, on shims that replay the shipped sample's tools.

    python bench/node_budget.py --rounds 3

Shims first on PATH answer ``nvidia-smi``, ``ibstat``, ``dcgmi``, ``ofed_info``, ``systemctl`` and
``journalctl`` with the sample bundle's outputs of h100-node01 (inventories/samples/h100-4node) at
once; everything else (``cat /proc/...``, sysfs) runs for real. A budget level picks probes from
probes/costs.yaml; the wall time measured is then healthcheck's own cost on the node (interpreter
start, script, parse, grade, bundle swap), the floor under the tools' real run time. ``--delays``
makes each shim sleep its probe's declared cost instead, to see a level's worst case.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "inventories" / "samples" / "h100-4node" / "raw" / "h100-node01"

# tool -> {argv ("$*"): sample command id}; "*" answers any other argv
TOOLS = {
    "nvidia-smi": {"-q -x": "nvidia-smi-q-x", "topo -m": "nvidia-smi-topo", "nvlink -s": "nvidia-smi-nvlink-s",
                   "nvlink -e": "nvidia-smi-nvlink-e"},
    "ibstat": {"*": "ibstat"},
    "dcgmi": {"discovery -l": "dcgmi-discovery", "health -c -j": "dcgmi-health", "*": "dcgmi-diag"},
    "ofed_info": {"*": "ofed-info"},
    "systemctl": {"is-active nvidia-fabricmanager": "fabricmanager-status", "*": "systemd-units"},
    "journalctl": {"*": "kernel-log"},
}
LEVELS = ("3", "10", "30", "none")


def write_shims(folder: Path, delay_s: float) -> None:
    folder.mkdir()
    for tool, cases in TOOLS.items():
        lines = ["#!/bin/sh", f"sleep {delay_s:g}" if delay_s else ":", 'case "$*" in']
        for argv, cid in cases.items():
            out = SAMPLE / f"{cid}.out"
            if out.is_file():
                lines.append(f"  {'*' if argv == '*' else shlex.quote(argv)}) exec cat {shlex.quote(str(out))};;")
        lines += ['  *) echo "shim: unsupported $*" >&2; exit 2;;', "esac", ""]
        (folder / tool).write_text("\n".join(lines))
        (folder / tool).chmod(0o755)


def one(level: str, spool: Path, env: dict[str, str]) -> dict[str, object]:
    argv = [sys.executable, "-m", "healthcheck", "node", "--out", str(spool), "--host", "bench01",
            "--profile", "h100-sxm5-8x"] + ([] if level == "none" else ["--budget", level])
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env)
    wall = time.monotonic() - started
    results = json.loads((spool / "bench01" / "results.json").read_text())
    return {"budget": level, "wall_s": round(wall, 2), "probes": results["run"]["probes"], "rc": proc.returncode}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--delays", type=float, default=0.0, help="seconds each shim sleeps")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hc-bench-node-") as tmp:
        base = Path(tmp)
        write_shims(base / "bin", args.delays)
        env = {**os.environ, "PATH": f"{base / 'bin'}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
        for r in range(args.rounds):
            for level in LEVELS if r % 2 == 0 else tuple(reversed(LEVELS)):
                row = one(level, base / "spool", env)
                print(json.dumps({"round": r, **row, "load": round(os.getloadavg()[0], 1)}), flush=True)


if __name__ == "__main__":
    main()
