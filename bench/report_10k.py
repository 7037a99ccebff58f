"""Time the reports on a synthetic 10,000-host run: results.json generation, each format, file sizes,
and how long headless Chromium takes to open report.html.

    python bench/report_10k.py                 # 10,000 hosts in a temporary directory
    python bench/report_10k.py --hosts 2000 --keep /tmp/run10k --browser

The synthetic fleet is deterministic (seeded): 8 GPUs per host with full GPU observations,
~3% of hosts failing (a pending row remap, an inactive NVLink, slow NCCL), ~5% warning
(temperature), 1% unreachable, one host on another driver, per-node nccl curves and HPL.
It is generated in the version-1 shape (everything inline); its observations go to the observation
store first (in a run the grading workers encode them) and ``write_results`` writes results.json
version 2 and the findings table, as at the end of a run. ``--browser`` times the page with
``bench/page_timing.py`` (DevTools; start-up excluded) when ``websocket-client`` is installed.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from healthcheck import reports  # noqa: E402
from healthcheck.store.observation_store import STORE, ObservationStore, encode_observations, key_observations  # noqa: E402
from healthcheck.store.results import SCHEMAS, RunResults, write_results  # noqa: E402

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-extensions", "--disable-background-networking")

SIZES = [8 << i for i in range(0, 31, 3)]


def finding(host: str, check: str, status: str, message: str, **kw: Any) -> dict[str, Any]:
    return {"host": host, "check": check, "status": status, "message": message, "component": "node",
            "value": None, "expected": None, "unit": None, "remedy": None, "source": "nvidia-smi-q-x", **kw}


def gpus(rng: random.Random, pending: int | None) -> list[dict[str, Any]]:
    return [{"index": i, "name": "NVIDIA H100 80GB HBM3", "bus_id": f"00000000:{0x18 + i:02X}:00.0",
             "memory_total_mib": 81559, "temp_c": round(rng.uniform(30, 45), 1), "slowdown_c": 87.0,
             "power_draw_w": round(rng.uniform(65, 120), 1), "power_limit_w": 700.0,
             "pcie_gen_current": 5, "pcie_gen_max": 5, "pcie_width_current": 16, "pcie_width_max": 16,
             "vbios": "96.00.74.00.0C",
             "ecc_aggregate": {"sram_correctable": 0, "sram_uncorrectable": 0,
                               "dram_correctable": rng.choice((0, 0, 0, 2)), "dram_uncorrectable": 0},
             "remap": {"correctable": 0, "uncorrectable": int(i == pending), "pending": i == pending,
                       "failure": False}} for i in range(8)]


def job(name: str, bench: str, test: str, metric: float, result: Any) -> dict[str, Any]:
    """A per-node job summary as benchmarks/grade.py stores it (``result`` kept for nccl curves)."""
    return {"job_id": f"{bench}-{test}-node-{name}", "test": test, "shape": "node", "hosts": [name],
            "rail": None, "retest_of": None, "rc": 0, "duration_s": 60.0, "metric": metric,
            "status": "PASS", "result": result}


def host(name: str, rng: random.Random) -> dict[str, Any]:
    roll = rng.random()
    if roll < 0.01:
        return {"profile": "h100-sxm5-8x", "group": "rack", "address": None, "observations": {},
                "findings": [finding(name, "run.transport", "ERROR", "ssh: connection timed out", source=None,
                                     remedy="Check that the node is up and reachable")]}
    scale = 0.45 if 0.02 < roll < 0.025 else rng.uniform(0.93, 1.0)
    pending = rng.randrange(8) if 0.01 <= roll < 0.02 else None
    found = [finding(name, "gpu.count", "PASS", "count 8 GPUs, within == 8", value=8, expected="== 8")]
    found += [finding(name, f"gpu.check{k:02d}", "PASS", "ok", component=f"gpu{k % 8}") for k in range(24)]
    if pending is not None:
        found.append(finding(name, "gpu.row_remap.pending", "FAIL", f"gpu{pending}: row remap pending",
                             component=f"gpu{pending}", value=True, expected="false",
                             remedy="Reset the GPU to apply the pending remap"))
    if 0.025 <= roll < 0.03:
        found.append(finding(name, "nvlink.link.down", "FAIL", "gpu2 link 7 inactive", component="gpu2 link 7",
                             remedy="Reseat the GPU baseboard", source="nvidia-smi-nvlink-s"))
    if 0.03 <= roll < 0.08:
        temp = round(rng.uniform(81, 86), 1)
        found.append(finding(name, "gpu.temperature", "WARN", f"gpu5: temperature {temp} C, expected <= 80 C",
                             component="gpu5", value=temp, expected="<= 80 C", unit="C",
                             remedy="Check the airflow"))
    busbw = round(480 * scale, 1)
    found.append(finding(name, "nccl.all_reduce.node.busbw", "FAIL" if scale < 0.6 else "PASS",
                         f"all_reduce node busbw {busbw} GB/s", value=busbw, expected=">= 60% of 480 GB/s",
                         unit="GB/s", source="nccl-node",
                         remedy="Check NVLink and NVSwitch" if scale < 0.6 else None))
    rows = [{"size_bytes": s, "oop_busbw_gbps": round(480 * scale * min(1.0, s / (1 << 28)), 2),
             "ip_busbw_gbps": 0.0} for s in SIZES]
    obs = {"gpu": {"gpus": gpus(rng, pending), "count": 8, "cuda_version": "12.4",
                   "driver_version": "535.161.08" if name == "gpu00042" else "550.54.15"},
           "system": {"kernel": "5.15.0-105-generic", "os_pretty_name": "Ubuntu 22.04.4 LTS"},
           "benchmarks": {"nccl": [job(name, "nccl", "all_reduce_perf", busbw, {"rows": rows})],
                          "hpl": [job(name, "hpl", "hpl", round(400000 * scale, 1), None)]}}
    return {"profile": "h100-sxm5-8x", "group": f"rack{int(name[3:]) // 32:03d}", "address": None,
            "findings": found, "observations": obs}


def synthetic_results(count: int, seed: int = 7) -> dict[str, Any]:
    rng = random.Random(seed)
    hosts = {f"gpu{i:05d}": host(f"gpu{i:05d}", rng) for i in range(1, count + 1)}
    return {"schema": SCHEMAS[0], "run": {"id": "bench-10k", "started": "2026-11-22T03:15:00Z",
                                      "finished": "2026-11-22T04:02:00Z", "duration_s": 2820.0, "mode": "ssh",
                                      "probes": ["gpu", "nvlink", "system"], "version": "bench"},
            "summary": {}, "hosts": hosts}


class Clock:
    """Wall and CPU time since the last lap (CPU is what to compare on a shared machine)."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def lap(self) -> str:
        wall, cpu = time.perf_counter(), time.process_time()
        text = f"{wall - self.wall:6.2f} s / {cpu - self.cpu:6.2f} s CPU"
        self.wall, self.cpu = wall, cpu
        return text


def open_in_chromium(report: Path, rounds: int = 3) -> str:
    """Wall time for headless Chromium to load the report, run its script and dump the DOM (the host
    table is built by JS), min/median of ``rounds``; includes Chromium's own start-up, measured alone."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        return "chromium: not installed"

    def timed(url: str) -> float:
        start = time.perf_counter()
        subprocess.run([binary, *CHROMIUM_FLAGS, "--dump-dom", url], capture_output=True, timeout=300, check=False)
        return time.perf_counter() - start

    blank = sorted(timed("about:blank") for _ in range(rounds))
    page = sorted(timed(report.resolve().as_uri()) for _ in range(rounds))
    return (f"chromium --dump-dom {report.name} ({report.stat().st_size / 1e6:.1f} MB): min {page[0]:.2f}s, "
            f"median {page[len(page) // 2]:.2f}s; about:blank (start-up alone) min {blank[0]:.2f}s")


def repeated(run_dir: Path, rounds: int) -> str:
    """Minimum CPU seconds of each step over ``rounds`` (results written to a scratch directory)."""
    best: dict[str, float] = {}

    def step(label: str, fn: Any) -> Any:
        start = time.process_time()
        value = fn()
        best[label] = min(best.get(label, float("inf")), time.process_time() - start)
        return value

    scratch = Path(tempfile.mkdtemp(prefix="report10k-scratch-"))
    shutil.copy(run_dir / "observations.jsonl.gz", scratch)
    for _ in range(rounds):
        results = reports.load_digest(run_dir).results  # the results as a run holds them (hosts' observations_at)
        step("write_results", functools.partial(write_results, scratch, results))
        digest = step("load_digest", functools.partial(reports.load_digest, run_dir))
        for spec in reports.all_reporters():
            step(spec.filename, functools.partial(spec.render, digest))
    shutil.rmtree(scratch)
    total = sum(v for k, v in best.items() if k != "load_digest")
    return (f"min CPU of {rounds} rounds: " + ", ".join(f"{k} {v:.2f} s" for k, v in best.items())
            + f"; write_results + reports {total:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--keep", type=Path, help="write the run here instead of a temporary directory")
    parser.add_argument("--browser", action="store_true", help="open report.html in headless Chromium")
    parser.add_argument("--repeat", type=int, default=0,
                        help="then N more rounds of write_results, load_digest and every report (a fresh digest "
                             "each round): the minimum CPU of each, steadier than one round on a busy machine")
    args = parser.parse_args()
    run_dir = args.keep or Path(tempfile.mkdtemp(prefix="report10k-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; times are wall / CPU of this process")
    clock = Clock()
    document = synthetic_results(args.hosts)
    v1_size = len(json.dumps(document)) / 1e6
    print(f"synthetic run  {v1_size:7.1f} MB as a version-1 results.json  {clock.lap()}")
    results = RunResults.from_json(document)
    del document
    (run_dir / STORE).unlink(missing_ok=True)  # a kept directory used again: the store is appended to
    store = ObservationStore(run_dir)  # in a run, the grading workers encode and the main process appends
    for host in (h for h in results.hosts.values() if h.observations):
        host.observations_at = store.append(encode_observations(host.name, host.observations))
        host.observations = key_observations(host.observations)  # what a run holds in memory
    print(f"observation store (workers' part in a run)  {clock.lap()}")
    write_results(run_dir, results)
    print(f"write_results  {'':10s}  {clock.lap()}")
    del results
    for name in ("results.json", "findings.table.json.gz", "observations.jsonl.gz"):
        print(f"  {name:24s} {(run_dir / name).stat().st_size / 1e6:7.1f} MB")
    digest = reports.load_digest(run_dir)
    print(f"load_digest    {'':10s}  {clock.lap()}")
    for spec in reports.all_reporters():
        path = spec.write_digest(digest)
        print(f"{path.name:14s} {path.stat().st_size / 1e6:7.1f} MB  {clock.lap()}")
    print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    if args.repeat:
        print(repeated(run_dir, args.repeat))
    if args.browser:
        print(open_in_chromium(run_dir / "report.html"))
        try:
            import page_timing

            print(page_timing.summary(run_dir / "report.html"))
        except ImportError as exc:  # websocket-client not installed
            print(f"page timing skipped: {exc}")
    print(f"run directory: {run_dir}")


if __name__ == "__main__":
    main()
