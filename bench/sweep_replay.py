"""Measure how fast the orchestrator grades a large cluster (our own speed, not the cluster's).

    python bench/sweep_replay.py --hosts 1000 --forks 64

Builds a synthetic bundle of N hosts by copying the sample capture's hosts round-robin (one in
four faulty), replays it through the whole pipeline (parse, grade, fleet checks, results.json,
reports) and prints hosts per second and where the time went. Also times the framed-stream reader
on the per-host script output. Nothing here is asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from healthcheck.pipeline import RunOptions, execute_run
from healthcheck.transport.script import FrameReader

SAMPLE = Path(__file__).resolve().parents[1] / "inventories" / "samples" / "h100-4node"


def build_bundle(target: Path, hosts: int) -> None:
    sample_hosts = sorted(p for p in (SAMPLE / "raw").iterdir() if p.is_dir())
    listed = []
    for i in range(hosts):
        name = f"gpu{i + 1:04d}"
        shutil.copytree(sample_hosts[i % len(sample_hosts)], target / "raw" / name)
        listed.append({"name": name, "profile": "h100-sxm5-8x", "group": f"rack{i // 32:02d}", "address": None,
                       "user": None, "port": None, "transport": "ssh", "vars": {}})
    (target / "manifest.json").write_text(json.dumps({"hosts": listed}))


def time_frame_reader(sections: int = 200, size: int = 256 * 1024) -> float:
    marker = "@@HC-bench"
    payload = b"x" * size
    stream = b"".join(
        f"\n{marker} BEGIN c{i} rc=0 out={size} err=0 outsize={size} errsize=0\n".encode() + payload
        + f"\n{marker} END c{i}\n".encode() for i in range(sections))
    reader = FrameReader("h", marker)
    start = time.perf_counter()
    done = 0
    for offset in range(0, len(stream), 65536):
        done += len(list(reader.feed(stream[offset:offset + 65536], 0.0)))
    elapsed = time.perf_counter() - start
    assert done == sections
    return len(stream) / elapsed / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--forks", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bundle = Path(tmp) / "bundle"
        start = time.perf_counter()
        build_bundle(bundle, args.hosts)
        built = time.perf_counter() - start
        start = time.perf_counter()
        outcome = execute_run(RunOptions(replay=bundle, run_dir=Path(tmp) / "run", forks=args.forks))
        elapsed = time.perf_counter() - start
        summary = outcome.results.summary()
        size = sum(p.stat().st_size for p in (Path(tmp) / "run").glob("*") if p.is_file())
    print(f"bundle of {args.hosts} hosts built in {built:.1f}s")
    print(f"replay + grade + reports: {elapsed:.1f}s = {args.hosts / elapsed:.0f} hosts/s "
          f"(verdicts {summary['by_verdict']}); top-level files {size / 1e6:.1f} MB")
    print(f"frame reader: {time_frame_reader():.0f} MB/s")


if __name__ == "__main__":
    main()
