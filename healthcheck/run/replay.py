"""The replay sweep: a bundle's hosts graded in worker processes, its outputs referenced, not copied.

    results, end = replay_sweep(opts, plan, run_dir, log, guard, previous)
    keep_bundle_outputs(opts, run_dir, results, log)     # the run directory becomes a bundle too

Grading is the live sweep's (``gradepool.grade_collection``); only results come back to this process.
A replay keeps no crash journal (``findings.jsonl``): its input is the bundle, replayed again if killed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from healthcheck.core.model import Finding, Status
from healthcheck.run.gradepool import Graded, GradeJob, grade_hosts, worker_count
from healthcheck.run.interrupt import InterruptGuard
from healthcheck.run.options import RunOptions
from healthcheck.run.outcome import SweepEnd, append_findings, not_swept
from healthcheck.run.plan import RunPlan
from healthcheck.run.progress import ProgressDisplay
from healthcheck.store.bundle import copy_bundle_rest, copy_raw_folder, ran_no_probes, written_by_a_run
from healthcheck.store.gcpause import gc_paused
from healthcheck.store.hostrefs import write_host_refs
from healthcheck.store.observation_store import ObservationStore
from healthcheck.store.results import HostResult
from healthcheck.store.rundir import FindingsLog, host_names, raw_dir, reference_raw, referenced_hosts


def replay_selection(opts: RunOptions) -> RunOptions:
    """A replay of a benchmark-only run (``healthcheck bench``) runs no probe either, unless ``--probes``
    asks for some: its hosts were checked by their jobs, and are again (the same verdicts)."""
    replay, selection = opts.target.replay, opts.selection
    if replay is None or selection.probes is not None or not ran_no_probes(Path(replay)):
        return opts
    return replace(opts, selection=replace(selection, probes=[]))


class _Stopped(Exception):
    """The replay cannot go on (its observation store unwritable); the message says why."""


def replay_sweep(opts: RunOptions, plan: RunPlan, run_dir: Path, log: FindingsLog, guard: InterruptGuard,
                 previous: Mapping[str, Any]) -> tuple[dict[str, HostResult], SweepEnd]:
    """Grade a bundle in worker processes (``run.gradepool``); the raw outputs stay in the bundle
    (``raw/_source.json`` points at them) and only results come back to this process."""
    bundle = Path(opts.target.replay or "")
    raw = raw_dir(bundle)
    job = GradeJob(raw, frozenset(host_names(bundle)), plan.probes, plan.profiles, plan.options, previous,
                   expect_meta=written_by_a_run(raw.parent if raw.name == "raw" else raw),
                   refs=referenced_hosts(raw), node_grading=opts.selection.node_grading)
    store = ObservationStore(run_dir)
    by_name = {h.name: h for h in plan.hosts}
    results: dict[str, HostResult] = {}

    def done(graded: Graded) -> None:
        host = by_name[graded.host]
        at, stop = None, None
        try:
            at = store.append(graded.member)
        except OSError as exc:  # the run directory is unwritable: stop handing out hosts (this one is kept)
            stop = _Stopped(f"{store.path} cannot be written: {exc.strerror or exc}")
        results[host.name] = HostResult(name=host.name, findings=graded.findings, observations=graded.key,
                                        observations_at=at, profile=host.profile, group=host.group,
                                        address=host.address, grading=graded.grading, compared=graded.compared)
        progress.on_host_start(host)
        progress.on_host_done(host, results[host.name])
        if stop is not None:
            raise stop

    with ProgressDisplay(total=len(plan.hosts), enabled=opts.outputs.progress) as progress:
        try:
            with gc_paused():  # every received result is kept to the end, none in a cycle
                grade_hosts(job, plan.hosts, worker_count(len(plan.hosts), opts.selection.grade_workers), done)
        except KeyboardInterrupt as exc:
            guard.note(exc)
            guard.shield()
            not_swept(plan.hosts, results, log, f"the run was interrupted ({guard.signal or 'SIGINT'})")
            return results, SweepEnd(interrupted=True)
        except _Stopped as stop:
            not_swept(plan.hosts, results, log, f"the sweep stopped: {stop}")
            return results, SweepEnd(fatal=str(stop))
    return results, SweepEnd()


def keep_bundle_outputs(opts: RunOptions, run_dir: Path, host_results: dict[str, HostResult],
                        log: FindingsLog) -> None:
    """A replay's run directory is a bundle too: host outputs are referenced (``raw/_source.json``), or
    copied when the bundle is about to be deleted (``copy_raw``); benchmark jobs and telemetry
    (``raw/_*``: few files) are copied. A merged run's host references are referenced again and its own
    few host folders (hosts without a result) copied. Links and special files are refused, never followed."""
    bundle = Path(opts.target.replay or "")
    refs = referenced_hosts(raw_dir(bundle))
    if refs:
        write_host_refs(run_dir / "raw", refs)
        refused = [r for r in copy_raw_folder(raw_dir(bundle), run_dir) if r.startswith("raw/_")]
    elif opts.outputs.copy_raw or not reference_raw(run_dir, bundle):  # not referable (no raw/, under /usr): copied
        refused = [r for r in copy_raw_folder(raw_dir(bundle), run_dir) if r.startswith("raw/_")]
    else:  # a host's refused files are already that host's errors (graded from the same folder)
        refused = copy_bundle_rest(bundle, run_dir, only=lambda name: name.startswith("_"))
    _bundle_problems(refused, host_results, log)


def _bundle_problems(refused: Sequence[str], host_results: dict[str, HostResult], log: FindingsLog) -> None:
    """What a replay refused to copy from the bundle (links, special files) is an ERROR on every host."""
    if not refused:
        return
    listed = "; ".join(refused[:5]) + (f"; and {len(refused) - 5} more" if len(refused) > 5 else "")
    for name, result in host_results.items():
        finding = Finding(host=name, check="replay.bundle", status=Status.ERROR, expected="regular files only",
                          message=f"bundle entries refused (a bundle is untrusted, links are never followed): {listed}",
                          remedy="Rebuild the bundle with the real files instead of links")
        result.findings.append(finding)
        append_findings(log, [finding])
