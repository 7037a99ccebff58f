"""One run, end to end: plan -> sweep (live or replay) -> post-sweep stages -> verdict rules -> outputs.

    outcome = execute_run(RunOptions(target=TargetOptions(inventory=Path("inventories/example.yaml")),
                                     outputs=OutputOptions(out=Path("runs"))))
    outcome.run_dir, outcome.results.verdict

Live runs and replays share everything after collection, so ``--replay`` of a run gives the same
verdicts. A live run's raw outputs and findings are on disk as each host completes (``findings.jsonl``,
its crash journal until results.json is written).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import healthcheck
from healthcheck import probes as probe_registry
from healthcheck.core.profiles import EMPTY_PROFILE, profile_digest
from healthcheck.core.spec import PREVIOUS_AT
from healthcheck.core.verdicts import nothing_checked
from healthcheck.run.interrupt import InterruptGuard
from healthcheck.run.live import live_sweep
from healthcheck.run.options import RunOptions
from healthcheck.run.outcome import RunOutcome, SweepEnd, append_findings
from healthcheck.run.outputs import write_or_stop, write_outputs
from healthcheck.run.plan import RunPlan, manifest, plan_run
from healthcheck.run.post import mark_observed, post_stages, run_stage
from healthcheck.run.reach import check_reach, open_sweep_transport
from healthcheck.run.replay import keep_bundle_outputs, replay_selection, replay_sweep
from healthcheck.run.rerun import RerunPlan, plan_rerun, rerun_changes, rerun_record
from healthcheck.run.selection import limit_names
from healthcheck.store.bundle import collection_times
from healthcheck.store.gcpause import gc_paused
from healthcheck.store.results import HostResult, RunResults, load_results
from healthcheck.store.rundir import FindingsLog, new_run_dir, write_json


class NothingToRerunError(ValueError):
    """``--rerun-failed`` of a run where no selected host failed: nothing to do (not a usage error)."""


def execute_run(opts: RunOptions) -> RunOutcome:
    """Run (or replay) a sweep and write the whole run directory. Raises only on bad setup
    (``RunDirError`` also when the run directory cannot be written at all)."""
    started = datetime.now(timezone.utc)
    clock = time.monotonic()
    opts, rerun = apply_rerun(replay_selection(opts))
    plan = plan_run(opts)
    if rerun is not None and not plan.hosts:
        raise NothingToRerunError(f"--rerun-failed {rerun.of_dir}: none of its failing hosts "
                                  f"({', '.join(rerun.hosts)}) is in the selected inventory or --limit")
    check_reach(opts, plan.hosts)
    run_dir = new_run_dir(opts.outputs.out, opts.outputs.run_dir)
    transport = open_sweep_transport(opts, plan.hosts, run_dir, plan.commands_for)
    journal = plan.mode != "replay"  # a replay keeps no crash journal: its bundle is its input, replayed again
    write_or_stop(run_dir, "manifest.json", lambda: write_json(run_dir / "manifest.json",
                                                              manifest(opts, plan, started)), journal)
    log = FindingsLog(run_dir, enabled=journal)
    evidence: list[dict[str, Any]] = []
    stories: list[dict[str, Any]] = []  # the isolations' (results.json "isolation")
    tables: dict[str, Any] = {}  # the fleet stage's results.json sections ("domains", "fabric_heat")
    previous = previous_observations(opts.selection.previous)
    with InterruptGuard() as guard:
        try:
            if plan.mode == "replay":
                host_results, sweep_end = replay_sweep(opts, plan, run_dir, log, guard, previous)
            else:
                host_results, sweep_end = live_sweep(opts, plan, run_dir, transport, log, guard, previous)
        finally:
            getattr(transport, "close", lambda: None)()
        interrupted = sweep_end.interrupted
        try:
            if plan.mode == "replay":
                keep_bundle_outputs(opts, run_dir, host_results, log)
            if not (interrupted or sweep_end.fatal):  # no benchmark launch, no fleet verdict
                stages = post_stages(opts, plan, run_dir, transport, host_results, evidence, stories, tables)
                for stage, stage_fn in stages:
                    append_findings(log, mark_observed(run_stage(stage, stage_fn, host_results), plan.profile_of))
        except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM after the sweep: results are still written
            guard.note(exc)
            interrupted = True
        guard.shield()
        _apply_verdict_rules(plan, host_results, log)
        results = _results(opts, plan, run_dir, host_results, sweep_end, started, clock, interrupted,
                           guard.signal, evidence, tables, rerun)
        if stories:
            results.extra["isolation"] = stories
        with gc_paused():  # millions of acyclic objects (the findings): the collector would only walk them
            report_error = write_outputs(opts, run_dir, results)
    return RunOutcome(run_dir=run_dir, results=results, report_error=report_error, interrupted=interrupted,
                      signal=guard.signal, fatal=sweep_end.fatal)


def _apply_verdict_rules(plan: RunPlan, host_results: dict[str, HostResult], log: FindingsLog) -> None:
    """Observe-only marks on every finding (benchmark and fleet ones too), then "nothing checked is never
    PASS": the one place both are applied for every kind of run."""
    if any(p.observe for p in plan.profile_of.values()):  # none has observe-only checks: nothing to mark
        for host in host_results.values():
            host.findings = mark_observed(host.findings, plan.profile_of)
    append_findings(log, nothing_checked(host_results))


def _results(opts: RunOptions, plan: RunPlan, run_dir: Path, host_results: dict[str, HostResult],
             sweep_end: SweepEnd, started: datetime, clock: float, interrupted: bool, signal: str | None,
             evidence: list[dict[str, Any]], tables: Mapping[str, Any], rerun: RerunPlan | None) -> RunResults:
    run_info = {"id": run_dir.name, "started": started.isoformat(timespec="seconds"),
                "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "duration_s": round(time.monotonic() - clock, 3), "mode": plan.mode,
                "probes": [p.name for p in plan.probes], "inventory": str(opts.target.inventory or ""),
                "replay_of": str(opts.target.replay or ""), "version": healthcheck.__version__,
                "profiles": sorted(plan.profiles), "interrupted": interrupted,
                **({"signal": signal} if signal else {}),
                **({"stopped": sweep_end.fatal} if sweep_end.fatal else {})}
    _record_profile_digests(plan, host_results)
    ordered = {h.name: host_results[h.name] for h in plan.hosts if h.name in host_results}
    ordered.update({n: r for n, r in host_results.items() if n not in ordered})
    results = RunResults(run=run_info, hosts=ordered,
                         extra={"evidence": evidence} if opts.selection.collect_evidence else {})
    if not (interrupted or sweep_end.fatal):  # the fleet stage ran: its tables (NVLink domains, fabric heat)
        results.extra.update(tables)
    if rerun is not None:
        run_info["rerun_of"] = rerun.of_id
        results.extra.update(rerun=rerun_record(rerun, results), changes=rerun_changes(rerun, results))
    return results


def _record_profile_digests(plan: RunPlan, host_results: Mapping[str, HostResult]) -> None:
    """Each host's ``profile_digest``: what it was graded against (a merge takes a node's grading only
    when its digest is the merge's own, ``run.nodegrading``). Computed once per profile used as it is; a
    profile extended by host vars names its host in its sources and is digested for that host alone."""
    digests: dict[str, str] = {}
    for host in plan.hosts:
        result = host_results.get(host.name)
        effective = plan.profile_of.get(host.name)
        if result is None or effective is None:
            continue
        name = host.profile or ""
        if effective is not plan.profiles.get(name, EMPTY_PROFILE):
            result.profile_digest = profile_digest(effective)
            continue
        if name not in digests:
            digests[name] = profile_digest(effective)
        result.profile_digest = digests[name]


def previous_observations(previous: Path | None) -> dict[str, Mapping[str, Any]]:
    """Each host's observations in an earlier run (``--previous``): the baselines of growth checks, with
    the time the collector recorded for that collection (``spec.PREVIOUS_AT``: rates are computed over
    the interval between recorded times, never over a node's own clock alone)."""
    if previous is None or not (Path(previous) / "results.json").is_file():
        return {}
    prior = load_results(Path(previous), observations=True)
    times = collection_times(Path(previous), prior.hosts)
    return {name: {**h.observations, **({PREVIOUS_AT: times[name]} if name in times else {})}
            for name, h in prior.hosts.items()}


def apply_rerun(opts: RunOptions) -> tuple[RunOptions, RerunPlan | None]:
    """With ``rerun_of``: the options limited to the old run's FAIL/ERROR hosts (and, with
    ``rerun_checks``, to the probes and benchmark jobs behind those findings)."""
    target, selection = opts.target, opts.selection
    if target.rerun_of is None:
        return opts, None
    plan = plan_rerun(target.rerun_of, target.rerun_checks,
                      probe_registry.select(selection.probes, selection.skip_probes))
    if not plan.hosts:
        raise NothingToRerunError(f"nothing to rerun: no host FAILed or ERRORed in {target.rerun_of}")
    limit = [h for h in plan.hosts if target.limit is None or h in limit_names(target.limit)]
    target = replace(target, limit=limit, rerun_of=plan.of_dir)
    if plan.probes is not None:
        selection = replace(selection, probes=list(plan.probes))
    elif selection.probes is None and plan.old_probes is not None:
        selection = replace(selection, probes=list(plan.old_probes))  # the same probes as the run being rerun
    bench = opts.bench
    if plan.jobs:
        bench = replace(bench, benchmarks=list(dict.fromkeys([*bench.benchmarks, *plan.benchmarks])))
        selection = replace(selection, probe_options={**selection.probe_options, "jobs": [dict(j) for j in plan.jobs]})
    return replace(opts, target=target, selection=selection, bench=bench), plan
