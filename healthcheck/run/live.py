"""The live sweep: every host collected over its transport and graded as it completes, outputs on disk at once.

    results, end = live_sweep(opts, plan, run_dir, transport, log, guard)

A host whose raw outputs cannot be written gets a ``host.raw_write`` ERROR and the sweep goes on;
when ``findings.jsonl`` itself cannot be appended, the sweep stops (``SweepEnd.fatal``). A host run
on this machine (``--local``) is also given what its probes collect in-process (``collect_local``:
NVML), each call bounded, a hang a finding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import Finding, Host, HostCollection, Status
from healthcheck.core.spec import Probe, Transport
from healthcheck.run.fanout import Runner, host_deadline
from healthcheck.run.fleetinputs import fleet_inputs
from healthcheck.run.gradepool import GradeJob, grade_collection
from healthcheck.run.interrupt import InterruptGuard
from healthcheck.run.nodetools import bounded, hang_finding
from healthcheck.run.options import RunOptions
from healthcheck.run.outcome import SweepEnd, not_swept
from healthcheck.run.plan import RunPlan
from healthcheck.run.progress import ProgressDisplay
from healthcheck.store.jsoncodec import plain
from healthcheck.store.observation_store import ObservationStore, encode_observations, key_observations
from healthcheck.store.results import HostResult
from healthcheck.store.rundir import FindingsLog, RunDirError, write_collection
from healthcheck.transport.script import Command


def live_sweep(opts: RunOptions, plan: RunPlan, run_dir: Path, transport: Transport, log: FindingsLog,
               guard: InterruptGuard, previous: Mapping[str, Any]) -> tuple[dict[str, HostResult], SweepEnd]:
    """Collect and grade every host of ``plan``; each host's raw outputs and findings reach disk as it
    completes."""
    job = GradeJob(run_dir / "raw", frozenset(), plan.probes, plan.profiles, plan.options, previous)
    store = ObservationStore(run_dir)
    write_errors: dict[str, str] = {}
    timeout_s = opts.transport.timeout_s

    def collected(collection: HostCollection) -> None:
        try:
            write_collection(run_dir, collection)
        except (OSError, RunDirError) as exc:
            write_errors[collection.host] = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)

    def grade(host: Host, collection: HostCollection) -> HostResult:
        preparsed, hung = local_observations(host, plan.probes, timeout_s)
        findings, observations = grade_collection(job, host, collection, host.transport, preparsed)
        findings[1:1] = hung
        if host.name in write_errors:
            findings.append(raw_write_finding(host.name, run_dir, write_errors[host.name]))
        try:
            log.append(findings)
        except OSError as exc:
            runner.stop(f"{run_dir / 'findings.jsonl'} cannot be written: {exc.strerror or exc}")
        return HostResult(name=host.name, findings=findings, observations=plain(key_observations(observations)),
                          observations_at=store.append(encode_observations(host.name, observations)),
                          profile=host.profile, group=host.group, address=host.address,
                          compared=fleet_inputs(observations))

    def deadline_for(commands: Sequence[Command]) -> float:
        return opts.transport.deadline_s or host_deadline(commands, DEFAULTS.kill_after_s,
                                                          DEFAULTS.host_deadline_margin_s)

    with ProgressDisplay(total=len(plan.hosts), enabled=opts.outputs.progress) as progress:
        runner = Runner(transport, plan.commands_for, opts.transport.forks, deadline_for, listeners=[progress],
                        on_collected=collected)
        results = runner.run(plan.hosts, grade)
    if runner.interrupted:
        guard.shield()  # from here on a further signal only waits for results.json and the reports
    why = (f"the run was interrupted ({guard.signal or 'SIGINT'})" if runner.interrupted
           else f"the sweep stopped: {runner.stop_reason}")
    not_swept(plan.hosts, results, log, why, in_flight=runner.abandoned)
    return results, SweepEnd(interrupted=runner.interrupted, fatal=runner.stop_reason)


def local_observations(host: Host, probes: Sequence[Probe], timeout_s: float) -> tuple[dict[str, Any], list[Finding]]:
    """What the probes collect in this process for a host run here (``--local``), each call bounded by
    ``timeout_s``: (observations by probe name, a tool-hang finding per call that did not return)."""
    if host.transport != "local":
        return {}, []
    observations: dict[str, Any] = {}
    hung: list[Finding] = []
    for probe in probes:
        local = getattr(probe, "collect_local", None)
        if local is None:
            continue
        answered, obs = bounded(local.collect, timeout_s)
        if not answered:
            hung.append(hang_finding(host.name, [local.tool], local.what, timeout_s, source=local.tool,
                                     consequence=local.fallback))
        elif obs is not None:
            observations[probe.name] = obs
    return observations, hung


def raw_write_finding(host: str, run_dir: Path, error: str) -> Finding:
    return Finding(host=host, check="host.raw_write", status=Status.ERROR, value=error,
                   expected=f"raw outputs written to {run_dir / 'raw' / host}",
                   message=f"{host}: raw outputs not written ({error}); its findings are kept, its outputs are lost",
                   remedy="Free space on the filesystem of the run directory (df -h), or fix the host name; "
                          "rerun this host to get a replayable bundle")
