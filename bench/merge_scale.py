"""``healthcheck merge`` of N node-local bundles: merge + grade + fleet checks + reports, wall time and peak RSS.

    python bench/merge_scale.py --hosts 1000 10000 --keep /tmp/hc-merge

Builds a spool as ``healthcheck node --budget 10`` leaves it on a shared directory: ``<spool>/<host>/``
with ``manifest.json``, ``results.json`` (the probes run) and ``raw/<host>/`` holding the outputs of
the system, gpu, topology, nvlink, fabric and xid probes, taken round-robin from the shipped sample's
four hosts (h100-node03 faulty: one host in four FAILs; hostname.out says the host's own name). Files
are hard links to the sample (cheap to build; merge copies them). Then runs ``healthcheck merge SPOOL
--run-dir RUN -i INVENTORY`` with an inventory that also names 1% of hosts that have no bundle ("no
result from node"), under ``/usr/bin/time -v`` for the peak RSS and the CPU seconds (user + system) of the whole
process tree (grading workers included). Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "inventories" / "samples" / "h100-4node"
PROBES = ["system", "gpu", "topology", "nvlink", "fabric", "xid"]
IDS = ("hostname", "uname-r", "os-release", "uptime", "proc-mounts", "mount-probe", "nvidia-smi-q-x",
       "nvidia-smi-topo", "nvidia-smi-nvlink-s", "nvidia-smi-nvlink-e", "fabricmanager-status", "kernel-log")


def build_spool(spool: Path, hosts: int) -> list[str]:
    sources = sorted(p for p in (SAMPLE / "raw").iterdir() if p.is_dir())
    names = []
    for i in range(hosts):
        name = f"gpu{i + 1:05d}"
        names.append(name)
        src = sources[i % len(sources)]
        folder = spool / name / "raw" / name
        folder.mkdir(parents=True)
        (folder / "hostname.out").write_text(f"{name}\n")
        for cid in IDS:
            for ext in (".out", ".rc"):
                if cid == "hostname" and ext == ".out":
                    continue
                if (src / f"{cid}{ext}").is_file():
                    os.link(src / f"{cid}{ext}", folder / f"{cid}{ext}")
        meta = json.loads((src / "_host.json").read_text())
        meta["collected_at"] = f"2026-11-23T02:{(i // 60) % 60:02d}:{i % 60:02d}+00:00"
        (folder / "_host.json").write_text(json.dumps(meta))
        (spool / name / "manifest.json").write_text(json.dumps({"hosts": [{"name": name, "profile": "h100-sxm5-8x"}]}))
        (spool / name / "results.json").write_text(json.dumps({"run": {"probes": PROBES}}))
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--keep", type=Path, help="Keep spools and runs under this folder.")
    args = parser.parse_args()
    timer = ["/usr/bin/time", "-v"] if Path("/usr/bin/time").exists() else []
    for count in args.hosts:
        base = Path(tempfile.mkdtemp(prefix=f"hc-merge{count}-", dir=args.keep))
        started = time.monotonic()
        names = build_spool(base / "spool", count)
        absent = [f"gpu{count + i + 1:05d}" for i in range(max(1, count // 100))]
        (base / "inv.yaml").write_text("defaults: {profile: h100-sxm5-8x}\nhosts:\n" +
                                       "".join(f"  {n}: {{}}\n" for n in names + absent))
        built = time.monotonic() - started
        started = time.monotonic()
        proc = subprocess.run([*timer, sys.executable, "-m", "healthcheck", "merge", str(base / "spool"),
                               "--run-dir", str(base / "run"), "-i", str(base / "inv.yaml")],
                              capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        wall = time.monotonic() - started
        rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
        user, system = (float(m) for m in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", proc.stderr)
                        or (0, 0))
        summary = next((line for line in proc.stdout.splitlines() if line.startswith("verdict")), proc.stderr[-300:])
        sizes = {p.name: round(p.stat().st_size / 1e6, 1) for p in (base / "run").glob("*.*") if p.is_file()}
        print(json.dumps({"hosts": count, "absent": len(absent), "spool_build_s": round(built, 1),
                          "merge_wall_s": round(wall, 1), "merge_cpu_s": round(user + system, 1) if timer else None,
                          "user_s": round(user, 1), "sys_s": round(system, 1),
                          "peak_rss_mb": int(rss.group(1)) // 1024 if rss else None,
                          "rc": proc.returncode, "summary": summary, "sizes_mb": sizes,
                          "load": round(os.getloadavg()[0], 1)}), flush=True)
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
