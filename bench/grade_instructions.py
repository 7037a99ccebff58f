"""Replay grading in instructions per host (valgrind callgrind): a count that load on the machine does not move.

    python bench/grade_instructions.py                       # 5 and 20 hosts, the run's own process
    python bench/grade_instructions.py --small 10 --large 40 --vary
    python bench/grade_instructions.py --bundles /tmp/gi     # bundles built there, or reused when present
    cd /tmp/base && python bench/grade_instructions.py --bundles /tmp/gi   # an A/B on the same bundles

On a shared machine the same code's CPU time per host moves by half from one hour to the next, so a change
of a few percent is lost in ``bench/grade_profile.py``'s milliseconds. Instructions executed do not depend on
load: callgrind counts them, and two runs of one checkout agree to within a few thousand of some billions.
The script replays a bench bundle (``bench/sweep_replay.py``) of ``--small`` and of ``--large`` hosts, each in
one process under callgrind (grading in-process, one worker, memoized whole outputs forgotten before each
host, as real hosts whose outputs differ: ``bench/grade_profile.py --clear-memos outputs``), and prints

    (instructions of the large run - instructions of the small run) / (large - small)

for the run's own process (reading bundles, grading, encoding, results.json) and, apart, for the forked
report child (a fleet this small renders every host in full: not what a large fleet's report costs a host).
Start-up and imports cancel out in the difference. An instruction is not a nanosecond (cache misses and
system calls are not in it), so the milliseconds still come from ``grade_profile.py`` and the 10,000-host
pairs (docs/performance.md); this is the yardstick for whether a change made grading do less. For an A/B,
each checkout runs its own copy of this script on the same ``--bundles``. Needs ``valgrind``; a 20-host run
takes about a minute. Nothing here is asserted in tests.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

COLLECTED = re.compile(r"^==(\d+)== Collected : (\d+)$", re.M)


def replay(bundle: Path) -> None:
    """The child: one replay of ``bundle``, in this process, memoized outputs forgotten before each host."""
    from healthcheck.probes import parse_memo
    from healthcheck.run import execute, gradepool
    from healthcheck.run.options import OutputOptions, RunOptions, SelectionOptions, TargetOptions

    grade_one = gradepool.grade_one

    def cleared(job: object, host: object) -> object:
        parse_memo.clear(outputs_only=True)
        return grade_one(job, host)
    gradepool.grade_one = cleared
    run_dir = Path(tempfile.mkdtemp(prefix="grade-instructions-run-"))
    try:
        execute.execute_run(RunOptions(target=TargetOptions(replay=bundle),
                                       outputs=OutputOptions(run_dir=run_dir / "run"),
                                       selection=SelectionOptions(grade_workers=1)))
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def warm_up(bundle: Path) -> None:
    """One replay outside valgrind first: every module it imports has its bytecode written before counting
    (writing it inside a counted run would be counted)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.run([sys.executable, __file__, "--child", str(bundle)], env=env, capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        sys.exit(f"the warm-up replay failed (rc {proc.returncode}):\n{proc.stderr[-2000:]}")


def counted(bundle: Path) -> tuple[int, int]:
    """(instructions of the run's own process, of every process it forked) for one replay of ``bundle``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONHASHSEED"] = "0"  # the same string hashes, so the same dict probing, in every run
    with subprocess.Popen(["valgrind", "--tool=callgrind", "--trace-children=yes", "--callgrind-out-file=/dev/null",
                           sys.executable, __file__, "--child", str(bundle)],
                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as proc:
        _, stderr = proc.communicate()
    counts = {int(pid): int(n) for pid, n in COLLECTED.findall(stderr)}
    if proc.returncode != 0 or proc.pid not in counts:
        sys.exit(f"replay under valgrind failed (rc {proc.returncode}):\n{stderr[-2000:]}")
    own = counts.pop(proc.pid)  # valgrind runs the program in its own process: the pid it was started as
    return own, sum(counts.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=5, help="hosts in the smaller replay (default 5)")
    parser.add_argument("--large", type=int, default=20, help="hosts in the larger replay (default 20)")
    parser.add_argument("--vary", action="store_true", help="hosts' nvidia-smi reports differ (sweep_replay --vary)")
    parser.add_argument("--bundles", type=Path, help="build the two bundles here (DIR/SMALL, DIR/LARGE), or reuse them")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        replay(args.child)
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    if args.large <= args.small:
        sys.exit("--large must be more hosts than --small")
    from sweep_replay import build_bundle
    tmp = Path(tempfile.mkdtemp(prefix="grade-instructions-"))
    where = args.bundles or tmp
    try:
        runs = {}
        for hosts in (args.small, args.large):
            if not (where / str(hosts) / "manifest.json").is_file():
                build_bundle(where / str(hosts), hosts, vary=args.vary)
        warm_up(where / str(args.small))
        for hosts in (args.small, args.large):
            runs[hosts] = counted(where / str(hosts))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    (own_s, child_s), (own_l, child_l) = runs[args.small], runs[args.large]
    per = args.large - args.small
    print(f"{ROOT}: {(own_l - own_s) / per / 1e6:.2f} M instructions a host in the run's own process "
          f"({args.small} hosts: {own_s / 1e6:.0f} M, {args.large}: {own_l / 1e6:.0f} M); "
          f"report child {(child_l - child_s) / per / 1e6:.2f} M a host")


if __name__ == "__main__":
    main()
