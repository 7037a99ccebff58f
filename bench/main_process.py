"""The run's own process during replay grading: CPU per host and memory growth per host, workers excluded.

    python bench/main_process.py --bundle /tmp/b200 --hosts 200 --workers 2

Grading runs in forked workers (``healthcheck/run/gradepool.py``); the run's process receives every graded
host (findings, key observations, the encoded store member), appends them to
disk and keeps the results for the reports. That work is serial: at 10,000 hosts every millisecond a
host is 10 s. This times ``gradepool.grade_hosts`` in the run's process only (``time.process_time``
covers its threads, which unpickle the results, and never the workers) and the growth of its resident
memory over the same span (``/proc/self/statm``). Reports are not rendered. Nothing here is asserted
in tests.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from sweep_replay import build_bundle  # noqa: E402

from healthcheck.run import execute, gradepool, replay  # noqa: E402
from healthcheck.run.options import OutputOptions, RunOptions, SelectionOptions, TargetOptions  # noqa: E402


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--bundle", type=Path, help="build (or reuse) the bench bundle here")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="main-process-"))
    bundle = args.bundle or tmp / "bundle"
    if not (bundle / "manifest.json").is_file():
        build_bundle(bundle, args.hosts)
    grade_hosts, seen = gradepool.grade_hosts, {}

    def measured(job: Any, hosts: Any, workers: int, on_done: Any) -> None:
        rss, cpu = rss_bytes(), time.process_time()
        grade_hosts(job, hosts, workers, on_done)
        seen.update(cpu=time.process_time() - cpu, rss=rss_bytes() - rss, hosts=len(hosts))

    replay.grade_hosts = measured
    execute.execute_run(RunOptions(target=TargetOptions(replay=bundle),
                                             outputs=OutputOptions(run_dir=tmp / "run", render=False),
                                             selection=SelectionOptions(grade_workers=args.workers)))
    hosts = seen["hosts"]
    print(f"{hosts} hosts, {args.workers} workers: the run's process during grading "
          f"{seen['cpu'] / hosts * 1000:.2f} CPU-ms a host, "
          f"resident memory +{seen['rss'] / hosts / 1000:.1f} KB a host")


if __name__ == "__main__":
    main()
