"""``run --rerun-failed RUN_DIR``: re-sweep only what failed in an earlier run, and say what changed.

    plan = plan_rerun(Path("runs/20261122T031500Z"), only_checks=True)
    plan.hosts              # ['gpu007', 'gpu012']: verdict FAIL or ERROR there
    plan.probes             # ['gpu', 'nvlink']: the probes whose findings failed (only_checks)
    plan.jobs               # benchmark jobs that failed or involve a host a benchmark blamed
    rerun_record(plan, new_results)
    # {"of": "20261122T031500Z", "of_dir": "...", "probes": [...], "jobs": [...],
    #  "hosts": {"gpu007": {"was": "FAIL", "now": "PASS"}, ...}}

A finding is traced to its probe by the command id it cites (``source``), narrowed by the check's
subject when several probes read that command (``nvidia-smi-q-x``); a finding that cites no probe's
command (``host.reachable``: the host was never reached) reruns every probe. Pure apart from
reading the old run directory.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import Finding, Status
from healthcheck.run.regression import diff_verdicts, host_states
from healthcheck.store.results import RunResults, load_results

FAILING = (Status.FAIL, Status.ERROR)
# check subjects whose prefix is not the probe's name
SUBJECT_ALIASES = {"ib": "infiniband", "version": "versions"}


@dataclass(frozen=True)
class RerunPlan:
    of_dir: Path
    of_id: str
    was: Mapping[str, str]                # host -> its verdict in the old run (FAIL or ERROR)
    probes: Sequence[str] | None = None   # None: every probe (no --rerun-checks)
    jobs: Sequence[Mapping[str, Any]] = field(default_factory=tuple)  # benchmark Job records to rerun
    benchmarks: Sequence[str] = ()        # benchmarks of those jobs
    old_probes: Sequence[str] | None = None  # the probes the old run ran (the default selection)

    @property
    def hosts(self) -> list[str]:
        return list(self.was)


def probe_commands(probes: Iterable[Any]) -> dict[str, set[str]]:
    """probe name -> every command id it runs or accepts from a bundle."""
    options = {"kernel_log_window_h": DEFAULTS.kernel_log_window_h}
    return {p.name: set(p.commands(options)) | set(getattr(p, "accepts", ()) or ()) for p in probes}


def probes_for(findings: Iterable[Finding], commands: Mapping[str, set[str]]) -> list[str]:
    """The probes that produced ``findings`` (see the module docstring), in registry order."""
    wanted: set[str] = set()
    for f in findings:
        subject = f.check.split(".")[0]
        subject = SUBJECT_ALIASES.get(subject, subject)
        readers = [name for name, ids in commands.items() if f.source and f.source in ids]
        if len(readers) > 1 and subject in readers:
            readers = [subject]
        if not readers:
            readers = [subject] if subject in commands else list(commands)
        wanted.update(readers)
    return [name for name in commands if name in wanted]


def failed_jobs(run_dir: Path, results: RunResults) -> list[dict[str, Any]]:
    """Benchmark jobs of ``run_dir`` to run again: those whose own findings FAIL or ERROR, and those
    that involve a host a benchmark finding blames (attribution)."""
    path = Path(run_dir) / "raw" / "_jobs" / "manifest.json"
    if not path.is_file():
        return []
    entries = [e for e in json.loads(path.read_text()).get("jobs", []) if isinstance(e, dict) and "job" in e]
    names = {e["job"].get("benchmark") for e in entries}
    bad = [f for f in results.findings() if f.status in FAILING and f.check.split(".")[0] in names]
    blamed_components = {(f.host, f.check.split(".")[0], f.component) for f in bad}
    blamed_hosts = {(f.host, f.check.split(".")[0]) for f in bad}
    chosen = []
    for entry in entries:
        job = entry["job"]
        if job.get("retest_of"):
            continue  # retests are planned again from the rerun's own pair results
        hosts = job.get("hosts") or []
        failed = entry.get("rc") not in (0, None) or entry.get("timed_out") or entry.get("transport_error")
        component = _component(job)
        if failed or any((h, job.get("benchmark"), component) in blamed_components for h in hosts) \
                or any((h, job.get("benchmark")) in blamed_hosts for h in hosts):
            chosen.append(job)
    return chosen


def _component(job: Mapping[str, Any]) -> str:
    from healthcheck.benchmarks.plan import Job

    return Job.from_json(dict(job)).component


def plan_rerun(run_dir: Path, only_checks: bool, probes: Iterable[Any] = ()) -> RerunPlan:
    """What to run again from ``run_dir`` (raises ValueError when it has no results.json)."""
    run_dir = Path(run_dir).resolve()  # runs/latest moves on with the rerun itself: record where it pointed
    if not (run_dir / "results.json").is_file():
        raise ValueError(f"--rerun-failed {run_dir}: no results.json there (not a finished run directory)")
    results = load_results(run_dir)
    was = {name: h.verdict.value for name, h in results.hosts.items() if h.verdict in FAILING}
    jobs = failed_jobs(run_dir, results)
    selected: list[str] | None = None
    if only_checks:
        bench_names = {j.get("benchmark") for j in jobs} | _benchmark_names(run_dir)
        bad = [f for name in was for f in results.hosts[name].findings
               if f.status in FAILING and f.check.split(".")[0] not in bench_names]
        selected = probes_for(bad, probe_commands(probes)) if bad else []
    old_probes = results.run.get("probes")
    return RerunPlan(of_dir=run_dir, of_id=str(results.run.get("id") or run_dir.name), was=was, probes=selected,
                     jobs=tuple(jobs), benchmarks=tuple(dict.fromkeys(str(j.get("benchmark")) for j in jobs)),
                     old_probes=[str(p) for p in old_probes] if isinstance(old_probes, list) else None)


def _benchmark_names(run_dir: Path) -> set[str]:
    manifest = Path(run_dir) / "manifest.json"
    if not manifest.is_file():
        return set()
    args = json.loads(manifest.read_text()).get("args") or {}
    bench = args.get("bench") if isinstance(args.get("bench"), dict) else args  # older manifests: one flat object
    return {str(b) for b in bench.get("benchmarks") or ()}


def rerun_record(plan: RerunPlan, results: RunResults) -> dict[str, Any]:
    """The ``rerun`` object of the new results.json: per host "was FAIL, now PASS"."""
    return {"of": plan.of_id, "of_dir": str(plan.of_dir), "probes": None if plan.probes is None else list(plan.probes),
            "jobs": [j.get("job_id") for j in plan.jobs],
            "hosts": {name: {"was": was, "now": results.hosts[name].verdict.value if name in results.hosts
                             else None} for name, was in plan.was.items()}}


def rerun_changes(plan: RerunPlan, results: RunResults) -> dict[str, object]:
    """The ``changes`` object (same shape as a sweep's) of the rerun against the old run's hosts."""
    old = host_states(load_results(plan.of_dir))
    return diff_verdicts({h: s for h, s in old.items() if h in plan.was}, host_states(results), plan.of_id)
