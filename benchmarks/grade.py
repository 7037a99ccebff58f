"""Pure grading of benchmark job outcomes: job-level errors, each tool's evaluator, fleet checks,
and pair attribution.

    findings, observations = grade_outcomes(outcomes, hosts, profiles, options)

A transport error, a hung job (timeout) or output no parser understands is an ERROR for every
host in the job; an exit code alone never passes (a non-zero rc with clean-looking output is an
ERROR too). Pair and rail jobs are attributed (``benchmarks.attribution``): a failed pair is
re-stated as PASS for the partner the attribution cleared, WARN when the link is to blame. The jobs
of an isolation (``trails``) are replayed through its planner (``benchmarks.isolate_report``): its
verdicts become findings, each failed group job is re-stated with what it is blamed on, and its story
(the tree of jobs) is appended to ``stories``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from healthcheck import benchmarks
from healthcheck.benchmarks import BenchContext, BenchmarkSpec
from healthcheck.benchmarks.attribution import (
    NodeBlame,
    PairBlame,
    PairResult,
    apply_blame,
    attribute,
    attribution_findings,
    included_blame,
)
from healthcheck.benchmarks.isolate_report import (
    Trail,
    isolation_findings,
    probe_job,
    replay_trail,
    restate,
    story,
)
from healthcheck.benchmarks.isolate_verdict import Conclusion
from healthcheck.benchmarks.launch import TIMEOUT_EXIT_CODES, merge_launcher_settings
from healthcheck.benchmarks.launcher_errors import launcher_remedy, parse_launcher_errors, telling_lines
from healthcheck.benchmarks.plan import Job
from healthcheck.core.model import Finding, Host, Status, worst
from healthcheck.core.profiles import EMPTY_PROFILE, Profile
from healthcheck.core.spec import ParseError
from healthcheck.store.jsoncodec import to_jsonable


@dataclass(frozen=True)
class JobOutcome:
    """What one job returned on its launcher host (stdout/stderr as text)."""

    job: Job
    launcher: str
    command: str
    rc: int | None
    timed_out: bool
    transport_error: str | None
    duration_s: float
    stdout: str
    stderr: str

    def manifest_entry(self) -> dict[str, Any]:
        return {"job": self.job.to_json(), "launcher": self.launcher, "command": self.command, "rc": self.rc,
                "timed_out": self.timed_out, "transport_error": self.transport_error,
                "duration_s": round(self.duration_s, 3)}


def profile_for(host: Host, profiles: Mapping[str, Profile]) -> Profile:
    """A host's profile from ``profiles`` keyed by host name or by profile name."""
    return profiles.get(host.name) or profiles.get(host.profile or "") or EMPTY_PROFILE


def check_base(job: Job) -> str:
    """``nccl.all_reduce``, ``osu.latency``, ``hpl``, ``imb``: the prefix of a job's check ids."""
    if job.benchmark == "nccl":
        return "nccl." + re.sub(r"_perf(_mpi)?$", "", job.test)
    if job.benchmark == "osu":
        return "osu." + job.test.removeprefix("osu_")
    return job.benchmark


_JOB_REMEDY = ("Check the launcher output in raw/_jobs/<job>.err: ssh between the nodes, the benchmark "
               "binary and MPI installation, and the job timeout")


def grade_job(outcome: JobOutcome, spec: BenchmarkSpec, ctx: BenchContext) -> tuple[list[Finding], Any]:
    """Findings for the hosts of one job, and its parsed result (None when it could not be parsed)."""
    job = outcome.job

    def error(message: str, remedy: str = _JOB_REMEDY) -> list[Finding]:
        return [Finding(host=h, check=f"{check_base(job)}.job", status=Status.ERROR, component=job.component,
                        message=f"{job.prefix}{message}", remedy=remedy, source=job.job_id) for h in job.hosts]

    if outcome.transport_error:
        return error(f"could not run the job on launcher {outcome.launcher}: {outcome.transport_error}"), None
    text = outcome.stdout + "\n" + outcome.stderr
    if outcome.timed_out or outcome.rc in TIMEOUT_EXIT_CODES:
        return error(f"job hung: no result within {job.timeout_s:g} s (rc {outcome.rc}), killed"), None
    try:
        parsed = spec.parse(text)
    except ParseError as exc:
        cause, known, remedy = _failure_cause(outcome)
        if known:
            return error(f"{cause} (rc {outcome.rc})", remedy), None
        if cause:
            return error(f"exited with rc {outcome.rc}: {cause} (unreadable output: {exc})", remedy), None
        return error(f"unreadable output: {exc} (rc {outcome.rc}; nothing on stderr)", remedy), None
    except Exception as exc:  # a parser bug: this job is ERROR, every other job is still graded
        return error(f"the {job.benchmark} parser crashed: {type(exc).__name__}: {exc} (a healthcheck bug: "
                     f"attach raw/_jobs/{job.job_id}.out)"), None
    try:
        findings = spec.evaluate(job, parsed, ctx)
    except Exception as exc:
        return error(f"the {job.benchmark} evaluation crashed: {type(exc).__name__}: {exc} (a healthcheck bug: "
                     f"attach raw/_jobs/{job.job_id}.out)"), None
    if outcome.rc not in (0, None) and not any(f.status in (Status.FAIL, Status.ERROR) for f in findings):
        cause, _, remedy = _failure_cause(outcome, stdout_lines=False)  # stdout is the result itself
        findings += error(f"the launcher exited with rc {outcome.rc} although the output looked complete"
                          + (f": {cause}" if cause else ""), remedy)
    return findings, parsed


def _failure_cause(outcome: JobOutcome, stdout_lines: bool = True) -> tuple[str, bool, str]:
    """(cause, recognised, remedy) of a job that failed: the launcher's recognised causes (running as
    root, too few slots, ssh from the launcher, a missing binary or work dir), else the most telling
    lines of its stderr (then, with ``stdout_lines``, of its stdout); empty when neither says anything."""
    errors = parse_launcher_errors(outcome.stdout + "\n" + outcome.stderr)
    if errors:
        return "; ".join(e.message for e in errors[:3]), True, launcher_remedy(errors, _JOB_REMEDY)
    said = telling_lines(outcome.stderr) or (telling_lines(outcome.stdout) if stdout_lines else "")
    return said, False, _JOB_REMEDY


def _metric(spec: BenchmarkSpec, parsed: Any) -> float | None:
    """The job's headline number for the report; a metric that cannot be computed is None."""
    if parsed is None:
        return None
    try:
        value = spec.metric(parsed)
    except Exception:  # the findings already say what is wrong with the output
        return None
    return value if isinstance(value, int | float) and math.isfinite(value) else None


def job_status(findings: Sequence[Finding]) -> Status:
    """A job's own grade: its worst graded finding (a SKIP beside PASSes, such as the NCCL transport not
    being logged, does not make a measured job SKIP); SKIP when nothing was graded, ERROR with no finding."""
    graded = [f.status for f in findings if f.status is not Status.SKIP]
    return worst(graded) if graded else (Status.SKIP if findings else Status.ERROR)


def job_ok(findings: Sequence[Finding]) -> bool:
    return not any(f.status in (Status.FAIL, Status.ERROR) for f in findings)


def _pair_group(job: Job) -> tuple[str, str, str, str | None] | None:
    return (job.benchmark, job.test, job.shape, job.rail) if job.shape in ("pair", "rail") else None


def pair_results(graded: Sequence[tuple[JobOutcome, list[Finding]]]) -> dict[tuple[str, str, str, str | None],
                                                                            list[PairResult]]:
    groups: dict[tuple[str, str, str, str | None], list[PairResult]] = {}
    for outcome, findings in graded:
        key = _pair_group(outcome.job)
        if key is not None and len(outcome.job.hosts) == 2:
            a, b = outcome.job.hosts
            groups.setdefault(key, []).append(PairResult(outcome.job.job_id, (a, b), job_ok(findings),
                                                         retest=outcome.job.retest_of is not None))
    return groups


def grade_outcomes(outcomes: Sequence[JobOutcome], hosts: Sequence[Host], profiles: Mapping[str, Profile],
                   options: Mapping[str, Any], trails: Sequence[Trail] = (),
                   stories: list[dict[str, Any]] | None = None) -> tuple[list[Finding], dict[str, dict[str, Any]]]:
    """All findings of all jobs (fleet, attribution and isolation included), and per-host observations;
    each isolation's story is appended to ``stories`` when given."""
    by_name = {h.name: h for h in hosts}
    metrics: dict[str, float | None] = {}
    graded: list[tuple[JobOutcome, list[Finding]]] = []
    parsed_by_bench: dict[tuple[str, str], list[tuple[Job, Any]]] = {}
    observations: dict[str, dict[str, Any]] = {}
    for outcome in outcomes:
        job = outcome.job
        spec = benchmarks.get(job.benchmark)
        first = by_name.get(job.hosts[0], Host(job.hosts[0]))
        profile = profile_for(first, profiles)
        ctx = BenchContext(profile, by_name, inventory_options(first, options))
        findings, parsed = grade_job(outcome, spec, ctx)
        graded.append((outcome, findings))
        if parsed is not None:
            parsed_by_bench.setdefault((job.benchmark, profile.name), []).append((job, parsed))
        metrics[job.job_id] = _metric(spec, parsed)
        summary = {"job_id": job.job_id, "test": job.test, "shape": job.shape, "hosts": list(job.hosts),
                   "rail": job.rail, "retest_of": job.retest_of, **({"excluded": list(job.excluded)}
                                                                     if job.excluded else {}), "rc": outcome.rc,
                   "duration_s": round(outcome.duration_s, 3),
                   "metric": metrics[job.job_id],
                   "status": job_status(findings).value}
        series = spec.series(to_jsonable(parsed)) if parsed is not None else {}
        if series:
            summary["series"] = dict(series)
        for h in job.hosts:
            observations.setdefault(h, {"benchmarks": {}})["benchmarks"].setdefault(job.benchmark, []).append(summary)
    findings, blames, bad_nodes = attributed(graded)
    reruns = {(o.job.benchmark, o.job.test, frozenset(o.job.hosts + o.job.excluded)): o.job
              for o, _ in graded if o.job.shape == "cluster" and o.job.excluded}
    for outcome, _findings in graded:  # a cluster job with a node found bad in the pairs is blamed on it
        job = outcome.job
        rerun = reruns.get((job.benchmark, job.test, frozenset(job.hosts)))
        blame = included_blame(job.job_id, job.hosts, bad_nodes.get((job.benchmark, job.test), {}),
                               rerun.component if rerun and not job.excluded else None) \
            if job.shape == "cluster" else None
        blames += [blame] if blame else []
    isolated: dict[str, tuple[str, Conclusion]] = {}  # job id -> (probe key, conclusion) of its isolation
    ok_by_job = {o.job.job_id: job_ok(f) for o, f in graded}
    for trail in trails:
        conclusion = replay_trail(trail, ok_by_job)
        base = check_base(Job("", trail.benchmark, trail.test, "group", (), 1))
        findings += isolation_findings(base, trail, conclusion)
        isolated.update({probe_job(trail, o.probe).job_id: (o.probe.key, conclusion) for o in conclusion.outcomes})
        if stories is not None:
            stories.append(story(trail, conclusion, metrics))
    for outcome, job_findings in graded:
        where = isolated.get(outcome.job.job_id)
        findings += restate(job_findings, *where) if where else apply_blame(job_findings, blames)
    for (bench, profile_name), parsed in parsed_by_bench.items():
        spec = benchmarks.get(bench)
        if spec.fleet is not None:
            profile = next((p for p in profiles.values() if p.name == profile_name), EMPTY_PROFILE)
            findings += spec.fleet(parsed, BenchContext(profile, by_name, options))
    return findings, observations


def attributed(graded: Sequence[tuple[JobOutcome, list[Finding]]]) -> tuple[
        list[Finding], list[PairBlame], dict[tuple[str, str], dict[str, NodeBlame]]]:
    """The pair jobs' attribution: its findings (per node, per link), the blame of every failed pair,
    and the nodes proved bad per (benchmark, test) (``cluster_rerun`` runs a cluster job without them)."""
    findings: list[Finding] = []
    blames: list[PairBlame] = []
    bad_nodes: dict[tuple[str, str], dict[str, NodeBlame]] = {}
    for (bench, test, shape, rail), results in pair_results(graded).items():
        nodes, pairs = attribute(results)
        base = f"{check_base(Job('', bench, test, shape, (), 1))}.{'rails' if shape == 'rail' else 'pairs'}"
        findings += attribution_findings(base, nodes, pairs, component=f"rail {rail}" if rail else "node")
        blames += pairs
        bad_nodes.setdefault((bench, test), {}).update({h: n for h, n in nodes.items() if n.verdict == "bad"})
    return findings, blames, bad_nodes


def inventory_options(host: Host, options: Mapping[str, Any]) -> dict[str, Any]:
    """Run options over the host's inventory var ``benchmarks`` (``nccl.binary_dir`` style keys)."""
    raw = host.vars.get("benchmarks") if isinstance(host.vars, Mapping) else None
    merged: dict[str, Any] = {}
    for tool, values in (raw or {}).items():
        if tool == "launcher" and isinstance(values, Mapping):
            merged["launcher"] = merge_launcher_settings(values, options.get("launcher") or {})
        elif isinstance(values, Mapping):
            merged.update({f"{tool}.{key}": value for key, value in values.items()})
    return {**merged, **{k: v for k, v in options.items() if k != "launcher" or "launcher" not in merged}}
