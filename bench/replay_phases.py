"""Where the wall time of one ``healthcheck run --replay`` goes, phase by phase, in the run's own process.

    python bench/replay_phases.py --replay /tmp/b1k --run-dir /tmp/r1k-phases
    python bench/replay_phases.py --replay /tmp/b10k --run-dir /tmp/r10k-phases

Runs the CLI in this process with timers around the pipeline's stages (grading, fleet checks,
results.json, each report format) and prints, for each, when it started, its wall time and the CPU
seconds of this process and of its children (the grading workers). Arguments are ``healthcheck
run``'s. Build a bundle with ``bench/sweep_replay.py --hosts N --bundle DIR``. Nothing here is
asserted in tests.
"""

from __future__ import annotations

import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

T0 = time.monotonic()
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from healthcheck import reports  # noqa: E402
from healthcheck.run import execute, outputs, post  # noqa: E402


def cpu() -> tuple[float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def timed(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start, (own, children) = time.monotonic(), cpu()
        try:
            return fn(*args, **kwargs)
        finally:
            now_own, now_children = cpu()
            print(f"{label:28s} at {start - T0:7.2f}s  wall {time.monotonic() - start:7.2f}s  "
                  f"cpu {now_own - own:7.2f}  children {now_children - children:7.2f}", file=sys.stderr)
    return wrapper


def instrument() -> None:
    for module, name in ((execute, "replay_sweep"), (execute, "keep_bundle_outputs"), (post, "fleet_stage"),
                         (execute, "nothing_checked"), (outputs, "write_results"), (outputs, "render_reports")):
        setattr(module, name, timed(name, getattr(module, name)))
    write_digest = reports.ReporterSpec.write_digest
    reports.ReporterSpec.write_digest = lambda self, digest: timed(f"  report {self.name}", write_digest)(
        self, digest)


def main() -> None:
    from healthcheck.cli.main import main as cli

    instrument()
    print(f"{'imports':28s} at {0:7.2f}s  wall {time.monotonic() - T0:7.2f}s", file=sys.stderr)
    try:
        cli(["run", *sys.argv[1:]], prog_name="healthcheck", standalone_mode=False)
    finally:
        own, children = cpu()
        print(f"{'total':28s} wall {time.monotonic() - T0:7.2f}s  cpu {own:7.2f}  children {children:7.2f}",
              file=sys.stderr)


if __name__ == "__main__":
    main()
