"""The gate's own cost on this machine: wall and CPU seconds of ``healthcheck gate`` around tools that answer at once.

    python bench/gate_cost.py --rounds 3

Passive tools (``nvidia-smi``, ``ibstat``, ``dcgmi``, ``journalctl`` ...) are bench/node_budget.py's shims, which
print the shipped sample's outputs of h100-node01; the active tests' tools (the node programs' Python,
``nvbandwidth``, ``all_reduce_perf``, ``dcgmi diag``) are tests/gateshims.py's, which print our fixtures. So the
time measured is healthcheck's part of a gate (interpreter start, passive probes' parse and grade, launching
and grading five tests, the bundle, the cache), the floor under the GPU tools' real run time, which only a GPU
node can measure (bench/device-check.sh records it in gate.json). Modes: ``passive`` (every active test skipped),
``active`` (cache off: every test launched), ``cached`` (the second of two runs: every test served from the
cache). CPU is the children's user+sys time (the gate's process and what it starts). The passive probes are the
ones the default 10 s passive budget selects, less ``pci`` (see ``PASSIVE``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.node_budget import write_shims  # noqa: E402
from tests.gateshims import PROFILE, GateShims  # noqa: E402

# The passive probes the default 10 s passive budget selects, less ``pci``: it reads this machine's real PCI bus
# (no GPU, no HCA here), which would fail the node and skip the active tests.
PASSIVE = "system,gpu,topology,nvlink,fabric,xid"
MODES = {"passive": ["--skip-tests", "gpuperf,copy,dcgm_diag,nccl,sdc"], "active": ["--cache-minutes", "0"],
         "cached": []}


def one(mode: str, spool: Path, env: dict[str, str]) -> dict[str, object]:
    argv = [sys.executable, "-m", "healthcheck", "gate", "--out", str(spool), "--host", "bench01",
            "--profile", PROFILE, "--probes", PASSIVE, *MODES[mode]]
    if mode == "cached":  # the first run fills the cache; the second is measured
        subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    record = json.loads((spool / "bench01" / "gate.json").read_text())
    return {"mode": mode, "wall_s": round(wall, 2),
            "cpu_s": round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 2),
            "gate_elapsed_s": record["elapsed_s"], "rc": proc.returncode,
            "tests": {t["name"]: t["state"] for t in record["tests"]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hc-bench-gate-") as tmp:
        base = Path(tmp)
        write_shims(base / "passive", 0.0)
        shims = GateShims.make(base / "active")
        (shims.bin / "nvidia-smi").unlink()          # the sample's nvidia-smi answers every passive probe
        (shims.bin / "dcgmi").unlink()
        diag = ROOT / "tests" / "fixtures" / "dcgmi" / "diag-r1-j-dcgm4.2-8x-h100-pass.json"
        shim = base / "passive" / "dcgmi"
        answer = f'  "diag -r 1 -j") exec cat {diag};;\n  *) exec cat'
        shim.write_text(shim.read_text().replace("  *) exec cat", answer, 1))
        env = {**os.environ, "PATH": f"{base / 'passive'}:{shims.bin}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
               "HEALTHCHECK_PROFILES_DIR": str(shims.profiles)}
        for r in range(args.rounds):
            for mode in MODES if r % 2 == 0 else tuple(reversed(MODES)):
                row = one(mode, base / f"spool-{mode}", env)
                print(json.dumps({"round": r, **row, "load": round(os.getloadavg()[0], 1)}), flush=True)


if __name__ == "__main__":
    main()
