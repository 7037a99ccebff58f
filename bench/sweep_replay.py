"""Measure ``healthcheck run --replay`` of a large synthetic bundle: wall, CPU, peak RSS, output sizes.

    python bench/sweep_replay.py --hosts 1000
    python bench/sweep_replay.py --hosts 10000 --bundle /tmp/b10k --keep /tmp/r10k --browser

The bundle is built from the built-in sample capture (inventories/samples/h100-4node): every host
folder hard-links one sample host's files as a node's run directory writes them (no ``.rc`` for exit
code 0, no empty ``.err``; node01/node02 healthy, node04 a kernel-log WARN, node03
faulty: hosts ``i % 97 == 5`` are faulty, ``i % 31 == 7`` warn), with its own ``hostname.out`` and its
own ``nvidia-smi-q-x.out`` (the sample's with a per-host timestamp: the gpu probe caches parses by text,
and real nodes never return identical XML, so hard-linked XML would hide the parse cost); the
manifest gives every host the h100-sxm5-8x profile. With ``--vary`` each host's report also has its own
GPU serials and UUIDs, temperatures and power draws (as a real fleet's differ: messages and leaf texts
are then no longer alike across hosts; the bundle's verdicts stay the same). The replay runs as a separate process (the
installed CLI, this checkout first on PYTHONPATH); peak RSS is sampled over its whole process tree
(the grading workers included) every 100 ms. With ``--browser`` the report is opened in headless
Chromium (``bench/report_10k.py`` has the timing function). Nothing here is asserted in tests.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "inventories" / "samples" / "h100-4node" / "raw"
sys.path.insert(0, str(ROOT))
OWN = ("hostname.out", "nvidia-smi-q-x.out")  # written per host; the other files are hard links
TIMESTAMP = re.compile(r"<timestamp>[^<]*</timestamp>")


def sample_host(i: int) -> str:
    if i % 97 == 5:
        return "h100-node03"
    if i % 31 == 7:
        return "h100-node04"
    return "h100-node01" if i % 2 else "h100-node02"


def _unwritten(path: Path) -> bool:
    """A file a node's run directory does not write (``store.rundir``): an exit code of 0, an empty stderr."""
    if path.suffix == ".err":
        return path.stat().st_size == 0
    return path.suffix == ".rc" and path.read_text().strip() == "0"


_VARIED = re.compile(r"<(serial|uuid|gpu_temp|memory_temp|power_draw)>([^<]*)</")


def varied(xml: str, host: int) -> str:
    """The report with host ``host``'s own serials, UUIDs, temperatures (27-40 C) and power draws (65-80 W),
    each GPU's its own; N/A values stay N/A."""
    seen = itertools.count()

    def value(match: re.Match[str]) -> str:
        tag, text, k = match.group(1), match.group(2), next(seen)
        if text.strip() in ("", "N/A"):
            return match.group(0)
        new = {"serial": f"{1700000000000 + host * 64 + k}",
               "uuid": f"GPU-{host:08x}-5c4e-4b9a-9e21-{k:012x}",
               "gpu_temp": f"{27 + (host * 7 + k * 3) % 14} C", "memory_temp": f"{30 + (host * 5 + k) % 12} C",
               "power_draw": f"{65 + (host * 13 + k * 7) % 1500 / 100:.2f} W"}[tag]
        return f"<{tag}>{new}</"
    return _VARIED.sub(value, xml)


def build_bundle(target: Path, hosts: int, vary: bool = False) -> None:
    """``hosts`` host folders of hard links to the sample's files (fast, no extra disk); ``vary``: see the
    module docstring."""
    listed = []
    for i in range(hosts):
        name = f"gpu{i + 1:05d}"
        folder = target / "raw" / name
        folder.mkdir(parents=True)
        source = SAMPLE / sample_host(i)
        for f in source.iterdir():
            if f.name not in OWN and not _unwritten(f):
                os.link(f, folder / f.name)
        (folder / "hostname.out").write_text(name + "\n")
        xml = (source / "nvidia-smi-q-x.out").read_text()
        stamp = f"<timestamp>Tue Nov 18 {i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d} 2026</timestamp>"
        xml = TIMESTAMP.sub(stamp, xml, count=1)
        (folder / "nvidia-smi-q-x.out").write_text(varied(xml, i) if vary else xml)
        listed.append({"name": name, "profile": "h100-sxm5-8x", "group": f"rack{i // 32:03d}", "address": None,
                       "user": None, "port": None, "transport": "ssh", "vars": {}})
    (target / "manifest.json").write_text(json.dumps({"hosts": listed}))


def tree_rss_kib(pid: int, field: str = "VmRSS:", source: str = "status") -> int:
    """Resident memory of ``pid`` and all its descendants, KiB (Linux /proc). RSS counts a page shared by
    forked processes once in each; ``tree_pss_kib`` divides it among them (the physical memory used)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/{source}") as fh:
                total += next((int(line.split()[1]) for line in fh if line.startswith(field)), 0)
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
        except (OSError, ValueError):
            continue
    return total


def tree_pss_kib(pid: int) -> int:
    return tree_rss_kib(pid, "Pss:", "smaps_rollup")


def measure(argv: list[str]) -> dict[str, float]:
    """Run ``argv``; wall, user+sys CPU of the whole tree, peak tree RSS and the main process's peak."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak, done = [0, 0], threading.Event()

    def sample() -> None:  # never polls the child: os.wait4 below must be the one that reaps it
        while not done.wait(0.1):
            peak[0] = max(peak[0], tree_rss_kib(proc.pid))
            peak[1] = max(peak[1], tree_pss_kib(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    done.set()
    proc.returncode = os.waitstatus_to_exitcode(status)
    sampler.join(timeout=1)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {err[-2000:]}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "tree_rss_mb": peak[0] / 1024,
            "tree_pss_mb": peak[1] / 1024,
            "max_process_rss_mb": usage.ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--bundle", type=Path, help="build (or reuse) the bundle here")
    parser.add_argument("--keep", type=Path, help="write the run directory here (must not exist)")
    parser.add_argument("--workers", type=int, help="grading processes [default: one per core]")
    parser.add_argument("--browser", action="store_true", help="open report.html in headless Chromium")
    parser.add_argument("--vary", action="store_true", help="per-host GPU serials, temperatures, power draws")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="replay-bench-"))
    bundle = args.bundle or tmp / "bundle"
    if not (bundle / "manifest.json").is_file():
        start = time.perf_counter()
        build_bundle(bundle, args.hosts, args.vary)
        print(f"bundle of {args.hosts} hosts built in {time.perf_counter() - start:.1f}s: {bundle}")
    run_dir = args.keep or tmp / "run"
    argv = [sys.executable, "-m", "healthcheck", "run", "--replay", str(bundle), "--run-dir", str(run_dir)]
    if args.workers:  # the same call the CLI makes, with RunOptions.grade_workers set
        argv = [sys.executable, "-c", "import sys; from pathlib import Path; "
                "from healthcheck.run.execute import execute_run; from healthcheck.run.options import RunOptions; "
                "execute_run(RunOptions.build(replay=Path(sys.argv[1]), run_dir=Path(sys.argv[2]), "
                "grade_workers=int(sys.argv[3])))", str(bundle), str(run_dir), str(args.workers)]
    load = os.getloadavg()[0]
    replay = measure(argv)
    summary = json.loads((run_dir / "results.json").read_text())["summary"]
    print(f"replay of {args.hosts} hosts (load {load:.1f} on {os.cpu_count()} CPUs): wall {replay['wall_s']:.1f}s, "
          f"CPU {replay['cpu_s']:.1f}s, peak RSS {replay['tree_rss_mb']:.0f} MB (process tree; PSS "
          f"{replay['tree_pss_mb']:.0f} MB), "
          f"{replay['max_process_rss_mb']:.0f} MB (largest process); verdicts {summary['by_verdict']}")
    report = measure([sys.executable, "-m", "healthcheck", "report", str(run_dir)])
    print(f"healthcheck report RUN: wall {report['wall_s']:.1f}s, CPU {report['cpu_s']:.1f}s, "
          f"peak RSS {report['tree_rss_mb']:.0f} MB")
    for f in sorted(p for p in run_dir.iterdir() if p.is_file()):
        print(f"  {f.name:26s} {f.stat().st_size / 1e6:9.2f} MB")
    print(f"  raw/ entries: {len(os.listdir(run_dir / 'raw'))} (the bundle's outputs are referenced)")
    if args.browser:
        from bench.report_10k import open_in_chromium

        print(open_in_chromium(run_dir / "report.html"))
    print(f"run directory: {run_dir}")


if __name__ == "__main__":
    main()
