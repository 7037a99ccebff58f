"""Where replay CPU goes, per host: each probe's parse / evaluate / JSON, bundle reading, encoding, and
the main process's own work (results, reports), all in one process (grading workers off).

    python bench/grade_profile.py --hosts 200                  # builds a bench bundle in a temp dir
    python bench/grade_profile.py --bundle /tmp/b200 --hosts 200 --golden /tmp/golden.json.gz
    python bench/grade_profile.py --bundle /tmp/b200 --hosts 200 --check /tmp/golden.json.gz
    python bench/grade_profile.py --bundle /tmp/b200 --hosts 200 --clear-memos outputs   # see below

The bundle is ``bench/sweep_replay.py``'s (per-host ``nvidia-smi -q -x`` and ``hostname``, the
rest hard links to the sample capture). Times are CPU seconds of this process
(``time.process_time``), so they hold up on a shared machine better than wall time; each row is
milliseconds per host. ``--golden`` writes every host's findings and observations from the run
directory; ``--check`` compares a later run with that file and lists what differs (a speed-up
must not change a verdict, a finding or an observation). The bundle's hosts share hard-linked outputs, so
the parse memos (``probes/parse_memo.py``) would find every host's outputs parsed already: ``--clear-memos
outputs`` forgets whole outputs before each host (as real hosts, whose outputs always differ), ``all`` also
what healthy nodes print alike (nvlink GPU blocks, sysfs paths, the topo matrix: the worst case).
Nothing here is asserted in tests. The script puts its own checkout first on the import path: for an
A/B, run each checkout's own copy (``cd /tmp/base && python bench/grade_profile.py ...``), not one
copy with another ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from sweep_replay import build_bundle  # noqa: E402

from healthcheck.core import spec  # noqa: E402
from healthcheck.run import execute, gradepool, outputs  # noqa: E402
from healthcheck.run.options import OutputOptions, RunOptions, SelectionOptions, TargetOptions  # noqa: E402
from healthcheck.store.results import load_results  # noqa: E402

SPENT: collections.Counter[str] = collections.Counter()


def timed(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            SPENT[label] += time.process_time() - start
    return wrapper


def instrument(clear_memos: str | None = None) -> None:
    """Wrap the stages of one host's grading and the main process's writers with CPU timers."""
    parse, evaluate = spec.ProbeSpec.parse, spec.ProbeSpec.evaluate
    spec.ProbeSpec.parse = lambda self, outputs: timed(f"parse    {self.name}", parse)(self, outputs)
    spec.ProbeSpec.evaluate = lambda self, obs, ctx: timed(f"evaluate {self.name}", evaluate)(self, obs, ctx)
    gradepool.plain = timed("json     key observations (jsoncodec.plain)", gradepool.plain)
    for name in ("read_bundle_host", "encode_observations", "key_observations"):
        setattr(gradepool, name, timed(f"host     {name}", getattr(gradepool, name)))
    gradepool.grade_one = timed("total    grade_one (all of the above)", gradepool.grade_one)
    if clear_memos:
        from healthcheck.probes import parse_memo
        grade_one = gradepool.grade_one

        def cleared(job: Any, host: Any) -> Any:
            parse_memo.clear(outputs_only=clear_memos == "outputs")
            return grade_one(job, host)
        gradepool.grade_one = cleared
    for name in ("write_results", "render_reports"):
        setattr(outputs, name, timed(f"main     {name}", getattr(outputs, name)))


def snapshot(run_dir: Path) -> dict[str, Any]:
    """Every host's findings and observations, as plain JSON, in a stable order."""
    results = load_results(run_dir, observations=True)
    out: dict[str, Any] = {}
    for host in results.hosts.values():
        findings = sorted((f.to_json() for f in host.findings), key=lambda f: json.dumps(f, sort_keys=True))
        out[host.name] = {"verdict": host.verdict.value, "findings": findings, "observations": host.observations}
    return json.loads(json.dumps(out, sort_keys=True, default=str))


def compare(before: dict[str, Any], after: dict[str, Any], limit: int = 20) -> list[str]:
    problems: list[str] = []
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        if a == b:
            continue
        if a is None or b is None:
            problems.append(f"{name}: only in {'after' if a is None else 'before'}")
            continue
        for key in ("verdict", "findings", "observations"):
            if a[key] != b[key]:
                if key == "observations":
                    probes = sorted(p for p in set(a[key]) | set(b[key]) if a[key].get(p) != b[key].get(p))
                    problems.append(f"{name}: observations differ for {probes}")
                elif key == "findings":
                    gone = [f for f in a[key] if f not in b[key]][:3]
                    new = [f for f in b[key] if f not in a[key]][:3]
                    problems.append(f"{name}: findings differ; before only {gone}; after only {new}")
                else:
                    problems.append(f"{name}: verdict {a[key]} -> {b[key]}")
        if len(problems) >= limit:
            break
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--bundle", type=Path, help="build (or reuse) the bench bundle here")
    parser.add_argument("--golden", type=Path, help="write every host's findings/observations here (.json.gz)")
    parser.add_argument("--check", type=Path, help="compare with a --golden file; exit 1 when anything differs")
    parser.add_argument("--clear-memos", choices=("outputs", "all"),
                        help="forget memoized parses before each host (see the module docstring)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="grade-profile-"))
    bundle = args.bundle or tmp / "bundle"
    if not (bundle / "manifest.json").is_file():
        build_bundle(bundle, args.hosts)
    instrument(args.clear_memos)
    run_dir = tmp / "run"
    start_cpu, start = time.process_time(), time.perf_counter()
    execute.execute_run(RunOptions(target=TargetOptions(replay=bundle),
                                             outputs=OutputOptions(run_dir=run_dir),
                                             selection=SelectionOptions(grade_workers=1)))
    cpu, wall = time.process_time() - start_cpu, time.perf_counter() - start
    hosts = len(json.loads((bundle / "manifest.json").read_text())["hosts"])
    print(f"{hosts} hosts, one process: {cpu:.2f} CPU-s ({cpu / hosts * 1000:.1f} ms a host), wall {wall:.2f}s")
    for label, spent in sorted(SPENT.items(), key=lambda kv: -kv[1]):
        if spent / hosts * 1000 >= 0.05:
            print(f"  {label:45s} {spent / hosts * 1000:7.2f} ms/host")
    print(f"run directory: {run_dir}")
    if args.golden:
        with gzip.open(args.golden, "wt") as fh:
            json.dump(snapshot(run_dir), fh)
        print(f"golden written: {args.golden}")
    if args.check:
        with gzip.open(args.check, "rt") as fh:
            problems = compare(json.load(fh), snapshot(run_dir))
        print("\n".join(problems) if problems else f"identical to {args.check}")
        raise SystemExit(1 if problems else 0)


if __name__ == "__main__":
    main()
