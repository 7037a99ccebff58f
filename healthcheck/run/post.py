"""After the sweep: evidence on failing hosts, the benchmark jobs, and the fleet checks, each a guarded stage.

    findings = run_stage("fleet", lambda: fleet_stage(results, plan, run_dir), results)

A stage that crashes gives every host an ERROR naming the stage; the run still writes results.json
(each host's own findings are already on disk). Observe-only marks are applied here, once, to every
finding a stage adds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from itertools import groupby
from operator import attrgetter
from pathlib import Path
from typing import Any

from healthcheck import probes as probe_registry
from healthcheck.core.grading import apply_observe
from healthcheck.core.model import Finding, Status
from healthcheck.core.profiles import EMPTY_PROFILE, Profile
from healthcheck.core.spec import Transport
from healthcheck.run.benchmarks import execute_benchmarks, replay_benchmarks
from healthcheck.run.evidence import collect_evidence, evidence_wanted
from healthcheck.run.fleetinputs import fleet_readers, read_probes
from healthcheck.run.fleetinputs import kept as keep_of
from healthcheck.run.options import RunOptions
from healthcheck.run.plan import RunPlan, host_profiles
from healthcheck.run.progress import JobProgress
from healthcheck.run.reach import open_sweep_transport
from healthcheck.store.jsoncodec import to_jsonable
from healthcheck.store.observation_store import (
    ObservationStore,
    encode_observations,
    iter_observations,
    read_observations,
)
from healthcheck.store.results import HostResult

HARD_FAIL_CATEGORIES = ("gpu", "nvlink", "topology", "fabric", "xid")
_HOST = attrgetter("host")


def hard_failed(result: HostResult) -> bool:
    """Unreachable, or a FAIL in a subject that makes a benchmark on the host meaningless."""
    return any((f.check == "host.reachable" and f.status is Status.ERROR)
               or (f.status is Status.FAIL and f.category in HARD_FAIL_CATEGORIES) for f in result.findings)


def run_stage(stage: str, stage_fn: Callable[[], list[Finding]], host_results: dict[str, HostResult]) -> list[Finding]:
    """Run a post-sweep stage; if it crashes, every host gets an ERROR saying so."""
    try:
        return stage_fn()
    except Exception as exc:
        findings = [Finding(host=name, check=f"{stage}.stage", status=Status.ERROR, expected=f"{stage} to complete",
                            message=f"the {stage} stage crashed: {type(exc).__name__}: {exc}",
                            remedy="A healthcheck bug: attach the run directory to a bug report")
                    for name in host_results]
        for f in findings:
            host_results[f.host].findings.append(f)
        return findings


def mark_observed(findings: list[Finding], profile_of: Mapping[str, Profile]) -> list[Finding]:
    """Each finding marked observe-only when its host's profile says so (``grading.apply_observe``), once
    per run of findings of the same host."""
    out: list[Finding] = []
    for host, same_host in groupby(findings, key=_HOST):
        out.extend(apply_observe(same_host, profile_of.get(host, EMPTY_PROFILE)))
    return out


def evidence_stage(opts: RunOptions, plan: RunPlan, run_dir: Path, host_results: dict[str, HostResult],
                   entries: list[dict[str, Any]]) -> list[Finding]:
    """``--collect-evidence``: nvidia-bug-report.sh on hosts failing GPU/NVLink/Xid checks, before benchmarks."""
    if not opts.selection.collect_evidence or plan.mode == "replay":
        return []
    wanted = evidence_wanted(host_results)
    if not wanted:
        return []
    # its own commands per host: one srun per host under slurm (a job step is planned for the probes only)
    evidence_opts = replace(opts, transport=replace(opts.transport, output_cap_bytes=opts.selection.evidence_max_bytes,
                                                    slurm_mode="per-host"))
    transport = open_sweep_transport(evidence_opts, plan.hosts, run_dir, lambda h: ())
    findings, collected = collect_evidence(run_dir, plan.hosts, wanted, transport,
                                           timeout_s=opts.selection.evidence_timeout_s)
    entries.extend(collected)
    for f in findings:
        host_results[f.host].findings.append(f)
    return findings


def benchmark_stage(opts: RunOptions, plan: RunPlan, run_dir: Path, transport: Transport,
                    host_results: dict[str, HostResult], stories: list[dict[str, Any]] | None = None) -> list[Finding]:
    """Run the selected benchmarks after the probes (or re-grade a bundle's stored jobs); the stories of
    the isolations (``--plan isolate``) are appended to ``stories`` (results.json ``isolation``)."""
    run_options = {**opts.selection.probe_options, "benchmarks": list(opts.bench.benchmarks),
                   "plan": opts.selection.plan}
    by_host = host_profiles(plan.hosts, plan.profiles)
    if plan.mode == "replay":
        if not (run_dir / "raw" / "_jobs").is_dir():
            return []
        findings, observations = replay_benchmarks(run_dir, plan.hosts, by_host, run_options, stories)
    elif opts.bench.benchmarks:
        failed = {name for name, r in host_results.items() if hard_failed(r)}
        with JobProgress(enabled=opts.outputs.progress) as progress:
            findings, observations = execute_benchmarks(run_dir, plan.hosts, by_host, transport, run_options, failed,
                                                        listener=progress, stories=stories)
    else:
        return []
    _add_observations(run_dir, host_results, observations)
    for f in findings:
        host_results.setdefault(f.host, HostResult(name=f.host)).findings.append(f)
    return findings


def _add_observations(run_dir: Path, host_results: dict[str, HostResult],
                      observations: Mapping[str, Mapping[str, Any]]) -> None:
    store = ObservationStore(run_dir)
    read = read_probes()
    for name, obs in observations.items():
        host, added = host_results.setdefault(name, HostResult(name=name)), to_jsonable(obs)
        host.observations.update(added)
        if not read.isdisjoint(added):  # what the fleet checks compare changed: read from the store
            host.compared = None
        if host.observations_at is not None:  # the store has the probes' part: append the host again, merged
            full = read_observations(run_dir, host.observations_at) or {}
            host.observations_at = store.append(encode_observations(name, {**full, **added}))


def fleet_stage(host_results: dict[str, HostResult], plan: RunPlan, run_dir: Path | None = None,
                tables: dict[str, Any] | None = None) -> list[Finding]:
    """Fleet checks over all hosts' observations; their findings join the hosts they name. A check sees
    results.json's key observations, plus the probes it ``reads`` (what its ``keep`` keeps of them): taken
    at grading (``HostResult.compared``, run.fleetinputs), else read from the observation store host by host.
    The reports' fleet views (``reports.fleet_views``) see the same way. A check or view with a ``table``
    (the NVLink domains, the fabric heat list) puts its results.json sections into ``tables``."""
    checks, readers = probe_registry.fleet_checks(), fleet_readers()
    ran = {probe.name for probe in plan.probes}  # a probe the run did not grade has nothing in the store
    reads = {reader.name: tuple(p for p in getattr(reader, "reads", ()) if p in ran) for reader in readers}
    wanted = tuple(dict.fromkeys(p for probes in reads.values() for p in probes))
    key = {name: r.observations for name, r in host_results.items() if r.observations}
    read: dict[str, dict[str, dict[str, Any]]] = {reader.name: {} for reader in readers if reads[reader.name]}
    unread = {name: r for name, r in host_results.items() if r.compared is None}
    for name, r in host_results.items():
        for reader_name, probes in (r.compared or {}).items():
            kept = {p: probes[p] for p in reads.get(reader_name, ()) if p in probes}
            if kept:
                read[reader_name][name] = kept
        r.compared = None  # used: not held through the reports
    for name, full in _stored(unread, wanted, run_dir):
        for reader in readers:
            kept = {p: keep_of(reader, p, full[p]) for p in reads[reader.name] if p in full}
            if kept:
                read[reader.name][name] = kept

    def observed(reader: Any) -> Mapping[str, Mapping[str, Any]]:
        extra = read.get(reader.name) or {}
        return {name: {**key.get(name, {}), **extra.get(name, {})} for name in key.keys() | extra.keys()} \
            if extra else key
    by_name = {h.name: h for h in plan.hosts}
    findings: list[Finding] = []
    for check in checks:
        findings.extend(f for f in check.evaluate_fleet(observed(check), by_name, plan.profiles)
                        if f.host in host_results)
    for f in findings:
        host_results[f.host].findings.append(f)
    for reader in readers if tables is not None else ():
        table = getattr(reader, "table", None)
        if table is not None:
            tables.update(table(observed(reader), by_name, plan.profiles))
    return findings


def _stored(host_results: Mapping[str, HostResult], probes: Sequence[str], run_dir: Path | None
            ) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each host's ``probes`` from the observation store (one host decoded at a time)."""
    if not probes or run_dir is None:
        return iter(())
    where = {name: r.observations_at for name, r in host_results.items() if r.observations_at is not None}
    return iter_observations(run_dir, where, probes)


def post_stages(opts: RunOptions, plan: RunPlan, run_dir: Path, transport: Transport,
                host_results: dict[str, HostResult], evidence: list[dict[str, Any]],
                stories: list[dict[str, Any]] | None = None, tables: dict[str, Any] | None = None
                ) -> Sequence[tuple[str, Callable[[], list[Finding]]]]:
    """The post-sweep stages, in order: evidence, benchmarks, fleet. ``evidence``, ``stories`` and ``tables``
    collect what the run records beside the hosts (results.json ``evidence``, ``isolation`` and the fleet
    stage's sections: ``domains``, ``fabric_heat``)."""
    return (("evidence", lambda: evidence_stage(opts, plan, run_dir, host_results, evidence)),
            ("benchmarks", lambda: benchmark_stage(opts, plan, run_dir, transport, host_results, stories)),
            ("fleet", lambda: fleet_stage(host_results, plan, run_dir, tables)))
