"""One run, end to end: inventory -> plan -> transport -> raw outputs -> grade -> fleet -> reports.

    outcome = execute_run(RunOptions(inventory=Path("inventories/example.yaml"), out=Path("runs")))
    outcome.run_dir, outcome.results.verdict

Live runs (ssh/local) and replays share everything after collection, so ``--replay`` of a run
gives the same verdicts. Raw outputs and findings are on disk as each host completes.
"""

from __future__ import annotations

import contextlib
import platform
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from itertools import groupby
from operator import attrgetter
from pathlib import Path
from typing import Any

import healthcheck
from healthcheck import probes as probe_registry
from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.grading import apply_observe
from healthcheck.core.hostvars import host_profile, plan_key
from healthcheck.core.model import Finding, Host, HostCollection, Status
from healthcheck.core.profiles import EMPTY_PROFILE, Profile, available_profiles, load_profile
from healthcheck.core.spec import Transport
from healthcheck.core.verdicts import nothing_checked
from healthcheck.inventory.hosts import Inventory, check_host_names, expand_hostlist, load_inventory
from healthcheck.run.fanout import Runner, host_deadline, plan_commands
from healthcheck.run.forked import Forked
from healthcheck.run.gradepool import Graded, GradeJob, grade_collection, grade_hosts, worker_count
from healthcheck.run.interrupt import InterruptGuard
from healthcheck.run.nodetools import bounded, hang_finding
from healthcheck.run.progress import JobProgress, ProgressDisplay
from healthcheck.run.rerun import RerunPlan, plan_rerun, rerun_changes, rerun_record
from healthcheck.run.selection import limit_hosts, limit_names
from healthcheck.store.bundle import (
    copy_bundle_rest,
    copy_raw_folder,
    read_manifest_hosts,
    validate_bundle,
    written_by_a_run,
)
from healthcheck.store.gcpause import gc_paused
from healthcheck.store.jsoncodec import plain, to_jsonable
from healthcheck.store.observation_store import (
    ObservationStore,
    encode_observations,
    key_observations,
    read_observations,
)
from healthcheck.store.results import (
    HostResult,
    RunResults,
    load_results,
    store_observations,
    write_results,
)
from healthcheck.store.rundir import (
    FindingsLog,
    RunDirError,
    host_names,
    new_run_dir,
    raw_dir,
    reference_raw,
    update_latest,
    write_collection,
    write_json,
)
from healthcheck.transport import Command, PerHostTransport, open_transport

_HOST = attrgetter("host")


@dataclass
class RunOptions:
    """Everything a run needs; the CLI fills it, tests and ``sweep`` build it directly."""

    inventory: Path | None = None
    hostlist: str | None = None           # ad-hoc hosts (ClusterShell nodeset) instead of an inventory
    replay: Path | None = None
    local: bool = False
    out: Path | None = None
    run_dir: Path | None = None
    forks: int = DEFAULTS.forks
    timeout_s: float = DEFAULTS.command_timeout_s
    connect_timeout_s: float = DEFAULTS.connect_timeout_s
    deadline_s: float | None = None
    output_cap_bytes: int = DEFAULTS.output_cap_bytes
    probes: Sequence[str] | None = None
    skip_probes: Sequence[str] = ()
    ssh_config: Path | None = None
    accept_new_host_keys: bool = False
    ssh_client: str = "paramiko"          # or "openssh": the system ssh with ControlMaster (docs/ssh.md)
    transport: str | None = None          # override every host's transport (ssh, local, slurm)
    srun_args: Sequence[str] = ()         # extra srun arguments for the slurm transport (--partition=...)
    slurm_mode: str = "step"              # slurm: "step" (one srun for all hosts) or "per-host" (one srun each)
    slurm_spool: Path | None = None       # step mode: directory shared with the nodes [default: RUN/slurm-step]
    profile: str | None = None            # override (or default for bundles without an inventory)
    profile_dirs: Sequence[Path] = ()
    limit: Sequence[str] | None = None    # only these host names
    previous: Path | None = None          # earlier run dir: counters' growth is measured against it
    progress: bool = False
    grade_workers: int | None = None      # replay grading processes (None: DEFAULTS, one per core)
    benchmarks: Sequence[str] = ()
    plan: str = "quick"
    probe_options: Mapping[str, Any] = field(default_factory=dict)
    render: bool = True                   # False: the caller renders the reports (``healthcheck sweep``)
    collect_evidence: bool = False        # nvidia-bug-report.sh on failing gpu/nvlink/xid hosts (run.evidence)
    evidence_timeout_s: float = DEFAULTS.evidence_timeout_s
    evidence_max_bytes: int = DEFAULTS.evidence_max_bytes
    rerun_of: Path | None = None          # earlier run dir: sweep only its FAIL/ERROR hosts (healthcheck.run.rerun)
    rerun_checks: bool = False            # with rerun_of: only the probes (and jobs) that produced those findings
    metrics_detail: bool = False          # metrics.prom: every check and the per-GPU/link/port series
    copy_raw: bool = False                # replay: copy the bundle's raw/ (a bundle about to be deleted) instead of
                                          # referencing it (raw/_source.json)
    max_hosts: int = DEFAULTS.max_hosts   # an inventory or nodeset expanding to more is a usage error


@dataclass
class RunOutcome:
    run_dir: Path
    results: RunResults
    report_error: str | None = None
    interrupted: bool = False
    signal: str | None = None             # the first SIGINT/SIGTERM, also one that came while results were written
    fatal: str | None = None              # the run directory became unwritable: the sweep stopped


def _profile_search(opts: RunOptions) -> list[Path]:
    dirs = list(opts.profile_dirs)
    if opts.inventory is not None:
        dirs.append(Path(opts.inventory).resolve().parent / "profiles")
    return dirs


def _hosts(opts: RunOptions, search: Sequence[Path]) -> tuple[list[Host], Inventory | None]:
    known = available_profiles(search)
    if opts.inventory is not None:
        inv = load_inventory(opts.inventory, known_profiles=known, max_hosts=opts.max_hosts)
        hosts = list(inv.hosts)
    elif opts.hostlist:
        inv = None
        names = expand_hostlist(opts.hostlist.split(), "--hosts", opts.max_hosts)  # sinfo: one line per state
        check_host_names(names, "--hosts")  # before any connection
        hosts = [Host(name=n) for n in names]
    elif opts.replay is not None:
        inv = None
        hosts = _replay_hosts(opts.replay)
    elif opts.local:
        inv, hosts = None, [Host(name=platform.node() or "localhost", transport="local")]
    elif opts.rerun_of is not None:
        inv, hosts = None, _replay_hosts(opts.rerun_of)  # the old run's hosts, addresses and vars
    else:
        raise ValueError("give an inventory (-i), --hosts NODESET, --replay DIR or --local")
    if opts.profile:
        hosts = [Host(**{**h.__dict__, "profile": opts.profile}) for h in hosts]
    if opts.local:
        hosts = [Host(**{**h.__dict__, "transport": "local"}) for h in hosts]
    elif opts.transport and opts.replay is None:
        hosts = [Host(**{**h.__dict__, "transport": opts.transport}) for h in hosts]
    if opts.limit is not None:  # a rerun's list was already checked against the user's --limit
        hosts = limit_hosts(hosts, opts.limit, strict=opts.rerun_of is None)
    return hosts, inv


def _replay_hosts(bundle: Path) -> list[Host]:
    """Hosts of a bundle: from its manifest when it is a run directory, else its raw/ folders."""
    validate_bundle(bundle)  # a parent folder of runs, links, a folder without outputs: usage errors
    listed = read_manifest_hosts(bundle)
    return listed if listed is not None else [Host(name=name) for name in host_names(bundle)]


def _load_profiles(hosts: Sequence[Host], search: Sequence[Path]) -> dict[str, Profile]:
    return {name: load_profile(name, search) for name in sorted({h.profile for h in hosts if h.profile})}


def _previous_observations(previous: Path | None) -> dict[str, dict[str, Any]]:
    if previous is None or not (Path(previous) / "results.json").is_file():
        return {}
    prior = load_results(Path(previous), observations=True)
    return {name: h.observations for name, h in prior.hosts.items()}


def _manifest(opts: RunOptions, hosts: Sequence[Host], profiles: Mapping[str, Profile],
              plans: Mapping[str, Sequence[Command]], mode: str, started: datetime) -> dict[str, Any]:
    args = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items()}
    return {"healthcheck_version": healthcheck.__version__, "python": sys.version.split()[0],
            "started": started.isoformat(timespec="seconds"), "mode": mode, "args": args,
            "hosts": [h.to_json() for h in hosts],
            "profiles": {n: {"path": p.path, "expectations": {k: asdict(e) for k, e in p.expectations.items()}}
                         for n, p in profiles.items()},
            "commands": [{"id": c.id, "line": c.line, "timeout_s": c.timeout_s} for c in plans[""]],
            "commands_by_profile": {name: [{"id": c.id, "line": c.line, "timeout_s": c.timeout_s} for c in cmds]
                                    for name, cmds in plans.items() if name}}


def execute_run(opts: RunOptions) -> RunOutcome:
    """Run (or replay) a sweep and write the whole run directory. Raises only on bad setup
    (``RunDirError`` also when the run directory cannot be written at all)."""
    started = datetime.now(timezone.utc)
    clock = time.monotonic()
    opts, rerun = _apply_rerun(opts)
    search = _profile_search(opts)
    hosts, _inventory = _hosts(opts, search)
    profiles = _load_profiles(hosts, search)
    selected = probe_registry.select(opts.probes, opts.skip_probes)
    if opts.benchmarks:
        from healthcheck import benchmarks

        benchmarks.select(opts.benchmarks)  # unknown names fail here, before anything runs
    # the plan reaches the probes too (DCGM diag level 3 for acceptance), whoever built the options
    options = {"kernel_log_window_h": DEFAULTS.kernel_log_window_h, "plan": opts.plan, **opts.probe_options}
    plans = {name: plan_commands(selected, {**options, "profile": prof}, opts.timeout_s)
             for name, prof in profiles.items()}
    for host in hosts:  # hosts whose mounts/services vars refine their profile (healthcheck.core.hostvars)
        if plan_key(host) not in plans:
            prof = host_profile(host, profiles.get(host.profile or "", EMPTY_PROFILE))
            plans[plan_key(host)] = plan_commands(selected, {**options, "profile": prof}, opts.timeout_s)
    plans[""] = plan_commands(selected, options, opts.timeout_s)
    mode = "replay" if opts.replay is not None else ("local" if opts.local else "ssh")
    if rerun is not None and not hosts:
        raise NothingToRerunError(f"--rerun-failed {rerun.of_dir}: none of its failing hosts "
                                  f"({', '.join(rerun.hosts)}) is in the selected inventory or --limit")
    run_dir = new_run_dir(opts.out, opts.run_dir)
    transport = _transport(opts, mode, hosts, run_dir, lambda h: plans.get(plan_key(h), plans[""]))
    _write_or_stop(run_dir, "manifest.json", lambda: write_json(
        run_dir / "manifest.json", _manifest(opts, hosts, profiles, plans, mode, started)))
    log = FindingsLog(run_dir)
    evidence: list[dict[str, Any]] = []
    with InterruptGuard() as guard:
        try:
            host_results, sweep_end = _sweep(opts, mode, run_dir, hosts, profiles, selected, options, plans,
                                             transport, log, guard)
        finally:
            getattr(transport, "close", lambda: None)()
        interrupted = sweep_end.interrupted
        profile_of = _profiles_of(hosts, profiles)  # once per run: built per host it was quadratic in hosts
        try:
            if opts.replay is not None:
                _keep_bundle_outputs(opts, run_dir, host_results, log)
            stages = () if interrupted or sweep_end.fatal else (  # no benchmark launch, no fleet verdict
                ("evidence", lambda: _evidence(opts, mode, run_dir, hosts, host_results, evidence)),
                ("benchmarks", lambda: _benchmarks(opts, mode, run_dir, hosts, profiles, transport, host_results)),
                ("fleet", lambda: _fleet(host_results, hosts, profiles)))
            for stage, run_stage in stages:
                _append(log, _observe(_guarded(stage, run_stage, host_results), profile_of))
        except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM after the sweep: results are still written
            guard.note(exc)
            interrupted = True
        guard.shield()
        if any(p.observe for p in profile_of.values()):  # none has observe-only checks: nothing to mark
            for host in host_results.values():  # benchmark and fleet findings too: observe-only marks in one place
                host.findings = _observe(host.findings, profile_of)
        _append(log, nothing_checked(host_results))  # the one place "nothing checked is never PASS" is applied
        run_info = {"id": run_dir.name, "started": started.isoformat(timespec="seconds"),
                    "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "duration_s": round(time.monotonic() - clock, 3), "mode": mode,
                    "probes": [p.name for p in selected], "inventory": str(opts.inventory or ""),
                    "replay_of": str(opts.replay or ""), "version": healthcheck.__version__,
                    "profiles": sorted(profiles), "interrupted": interrupted,
                    **({"signal": guard.signal} if guard.signal else {}),
                    **({"stopped": sweep_end.fatal} if sweep_end.fatal else {})}
        ordered = {h.name: host_results[h.name] for h in hosts if h.name in host_results}
        ordered.update({n: r for n, r in host_results.items() if n not in ordered})
        results = RunResults(run=run_info, hosts=ordered,
                             extra={"evidence": evidence} if opts.collect_evidence else {})
        if rerun is not None:
            run_info["rerun_of"] = rerun.of_id
            results.extra.update(rerun=rerun_record(rerun, results), changes=rerun_changes(rerun, results))
        with gc_paused():  # millions of acyclic objects (the findings): the collector would only walk them
            report_error = _write_outputs(opts, run_dir, results)
    return RunOutcome(run_dir=run_dir, results=results, report_error=report_error, interrupted=interrupted,
                      signal=guard.signal, fatal=sweep_end.fatal)


def _keep_bundle_outputs(opts: RunOptions, run_dir: Path, host_results: dict[str, HostResult],
                         log: FindingsLog) -> None:
    """A replay's run directory is a bundle too: host outputs are referenced (``raw/_source.json``), or
    copied when the bundle is about to be deleted (``copy_raw``); benchmark jobs and telemetry
    (``raw/_*``: few files) are copied. Links and special files are refused, never followed."""
    bundle = Path(opts.replay or "")
    if opts.copy_raw or not reference_raw(run_dir, bundle):  # not referable (no raw/, under /usr): copied
        refused = [r for r in copy_raw_folder(raw_dir(bundle), run_dir) if r.startswith("raw/_")]
    else:  # a host's refused files are already that host's errors (graded from the same folder)
        refused = copy_bundle_rest(bundle, run_dir, only=lambda name: name.startswith("_"))
    _bundle_problems(refused, host_results, log)


def _write_or_stop(run_dir: Path, what: str, write: Any) -> None:
    """A write into the run directory itself; failing, it is a clean stop (``RunDirError``, exit 2)."""
    try:
        write()
    except OSError as exc:
        raise RunDirError(f"cannot write {what} in {run_dir}: {exc.strerror or exc}; what is already on disk "
                          f"(raw/, findings.jsonl) is kept: free space and run `healthcheck results {run_dir}`"
                          ) from exc


def _append(log: FindingsLog, findings: Sequence[Finding]) -> None:
    with contextlib.suppress(OSError):  # the findings are in memory and reach results.json
        log.append(findings)


@dataclass
class SweepEnd:
    interrupted: bool = False
    fatal: str | None = None  # why the sweep stopped early (run directory unwritable)


class NothingToRerunError(ValueError):
    """``--rerun-failed`` of a run where no selected host failed: nothing to do (not a usage error)."""


def _apply_rerun(opts: RunOptions) -> tuple[RunOptions, RerunPlan | None]:
    """With ``rerun_of``: the options limited to the old run's FAIL/ERROR hosts (and, with
    ``rerun_checks``, to the probes and benchmark jobs behind those findings)."""
    if opts.rerun_of is None:
        return opts, None
    plan = plan_rerun(opts.rerun_of, opts.rerun_checks, probe_registry.select(opts.probes, opts.skip_probes))
    if not plan.hosts:
        raise NothingToRerunError(f"nothing to rerun: no host FAILed or ERRORed in {opts.rerun_of}")
    limit = [h for h in plan.hosts if opts.limit is None or h in limit_names(opts.limit)]
    changes: dict[str, Any] = {"limit": limit, "rerun_of": plan.of_dir}
    if plan.probes is not None:
        changes["probes"] = list(plan.probes)
    elif opts.probes is None and plan.old_probes is not None:
        changes["probes"] = list(plan.old_probes)  # the same probes as the run being rerun
    if plan.jobs:
        changes["benchmarks"] = list(dict.fromkeys([*opts.benchmarks, *plan.benchmarks]))
        changes["probe_options"] = {**opts.probe_options, "jobs": [dict(j) for j in plan.jobs]}
    return replace(opts, **changes), plan


def _sweep(opts: RunOptions, mode: str, run_dir: Path, hosts: Sequence[Host], profiles: Mapping[str, Profile],
           selected: Sequence[Any], options: Mapping[str, Any], plans: Mapping[str, Sequence[Command]],
           transport: Transport, log: FindingsLog, guard: InterruptGuard) -> tuple[dict[str, HostResult], SweepEnd]:
    """Collect and grade every host; each host's raw outputs and findings reach disk as it completes.
    A host whose raw outputs cannot be written gets a ``host.raw_write`` ERROR and the sweep goes on;
    when ``findings.jsonl`` itself cannot be appended, the sweep stops (``SweepEnd.fatal``)."""
    previous = _previous_observations(opts.previous)
    write_errors: dict[str, str] = {}
    runner: Runner
    store = ObservationStore(run_dir)
    if mode == "replay" and opts.replay is not None:
        bundle = Path(opts.replay)
        raw = raw_dir(bundle)
        job = GradeJob(raw, frozenset(host_names(bundle)), selected, profiles, options, previous,
                       expect_meta=written_by_a_run(raw.parent if raw.name == "raw" else raw))
        return _replay_sweep(opts, hosts, job, log, store, guard)
    job = GradeJob(run_dir / "raw", frozenset(), selected, profiles, options, previous)

    def collected(collection: HostCollection) -> None:
        try:
            write_collection(run_dir, collection)
        except (OSError, RunDirError) as exc:
            write_errors[collection.host] = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)

    def grade(host: Host, collection: HostCollection) -> HostResult:
        preparsed, hung = {}, []
        if host.transport == "local":  # NVML is called in-process: bounded, a hang is FAIL
            answered, nvml_obs = bounded(lambda: local_nvml_observations(selected), opts.timeout_s)
            preparsed = nvml_obs or {}
            hung = [] if answered else [hang_finding(host.name, ["nvml"], "NVML calls (pynvml)", opts.timeout_s,
                                                     source="nvml", consequence="GPUs graded from nvidia-smi -q -x")]
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
                          profile=host.profile, group=host.group, address=host.address)

    def deadline_for(commands: Sequence[Command]) -> float:
        return opts.deadline_s or host_deadline(commands, DEFAULTS.kill_after_s, DEFAULTS.host_deadline_margin_s)

    with ProgressDisplay(total=len(hosts), enabled=opts.progress) as progress:
        runner = Runner(transport, lambda h: plans.get(plan_key(h), plans[""]), opts.forks,
                        deadline_for, listeners=[progress], on_collected=collected)
        results = runner.run(hosts, grade)
    if runner.interrupted:
        guard.shield()  # from here on a further signal only waits for results.json and the reports
    why = (f"the run was interrupted ({guard.signal or 'SIGINT'})" if runner.interrupted
           else f"the sweep stopped: {runner.stop_reason}")
    for host in hosts:
        if host.name not in results:
            in_flight = host.name in runner.abandoned
            results[host.name] = HostResult(name=host.name, profile=host.profile, group=host.group, findings=[
                Finding(host=host.name, check="host.swept", status=Status.ERROR, expected="swept",
                        message=f"not swept: {why} "
                                + ("while this host was in flight; its outputs were not kept" if in_flight
                                   else "before this host started"),
                        remedy="Rerun the sweep (--limit with the hosts left out)")])
            _append(log, results[host.name].findings)
    return results, SweepEnd(interrupted=runner.interrupted, fatal=runner.stop_reason)


def raw_write_finding(host: str, run_dir: Path, error: str) -> Finding:
    return Finding(host=host, check="host.raw_write", status=Status.ERROR, value=error,
                   expected=f"raw outputs written to {run_dir / 'raw' / host}",
                   message=f"{host}: raw outputs not written ({error}); its findings are kept, its outputs are lost",
                   remedy="Free space on the filesystem of the run directory (df -h), or fix the host name; "
                          "rerun this host to get a replayable bundle")


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
        _append(log, [finding])


def _not_swept(hosts: Sequence[Host], results: dict[str, HostResult], log: FindingsLog, why: str) -> None:
    for host in hosts:
        if host.name not in results:
            results[host.name] = HostResult(name=host.name, profile=host.profile, group=host.group, findings=[
                Finding(host=host.name, check="host.swept", status=Status.ERROR, expected="swept",
                        message=f"not swept: {why} before this host started",
                        remedy="Rerun the sweep (--limit with the hosts left out)")])
            _append(log, results[host.name].findings)


def _replay_sweep(opts: RunOptions, hosts: Sequence[Host], job: GradeJob, log: FindingsLog,
                  store: ObservationStore, guard: InterruptGuard) -> tuple[dict[str, HostResult], SweepEnd]:
    """Grade a bundle in worker processes (``healthcheck.run.gradepool``); the raw outputs stay in the
    bundle (``raw/_source.json`` points at them) and only results come back to this process."""
    by_name = {h.name: h for h in hosts}
    results: dict[str, HostResult] = {}

    def done(graded: Graded) -> None:
        host = by_name[graded.host]
        results[host.name] = HostResult(name=host.name, findings=graded.findings, observations=graded.key,
                                        observations_at=store.append(graded.member), profile=host.profile,
                                        group=host.group, address=host.address)
        progress.on_host_start(host)
        progress.on_host_done(host, results[host.name])
        try:
            log.append_lines(graded.lines)
        except OSError as exc:  # the run directory is unwritable: stop handing out hosts (this one is kept)
            raise _Stopped(f"{log.path} cannot be written: {exc.strerror or exc}") from exc

    with ProgressDisplay(total=len(hosts), enabled=opts.progress) as progress:
        try:
            with gc_paused():  # every received result is kept to the end, none in a cycle (measured: 0 collected)
                grade_hosts(job, hosts, worker_count(len(hosts), opts.grade_workers), done)
        except KeyboardInterrupt as exc:
            guard.note(exc)
            guard.shield()
            _not_swept(hosts, results, log, f"the run was interrupted ({guard.signal or 'SIGINT'})")
            return results, SweepEnd(interrupted=True)
        except _Stopped as stop:
            _not_swept(hosts, results, log, f"the sweep stopped: {stop}")
            return results, SweepEnd(fatal=str(stop))
    return results, SweepEnd()


class _Stopped(Exception):
    """The replay cannot go on (``findings.jsonl`` unwritable); the message says why."""


def _evidence(opts: RunOptions, mode: str, run_dir: Path, hosts: Sequence[Host],
              host_results: dict[str, HostResult], entries: list[dict[str, Any]]) -> list[Finding]:
    """``--collect-evidence``: nvidia-bug-report.sh on hosts failing GPU/NVLink/Xid checks, before benchmarks."""
    if not opts.collect_evidence or mode == "replay":
        return []
    from healthcheck.run.evidence import collect_evidence, evidence_wanted

    wanted = evidence_wanted(host_results)
    if not wanted:
        return []
    # its own commands per host: one srun per host under slurm (a job step is planned for the probes only)
    transport = _transport(replace(opts, output_cap_bytes=opts.evidence_max_bytes, slurm_mode="per-host"), mode,
                           hosts, run_dir, lambda h: ())
    findings, collected = collect_evidence(run_dir, hosts, wanted, transport, timeout_s=opts.evidence_timeout_s)
    entries.extend(collected)
    for f in findings:
        host_results[f.host].findings.append(f)
    return findings


def _guarded(stage: str, run_stage: Any, host_results: dict[str, HostResult]) -> list[Finding]:
    """Run a post-sweep stage; if it crashes, every host gets an ERROR saying so and the run still
    writes results.json (the per-host findings are already on disk)."""
    try:
        findings = run_stage()
    except Exception as exc:
        findings = [Finding(host=name, check=f"{stage}.stage", status=Status.ERROR, expected=f"{stage} to complete",
                            message=f"the {stage} stage crashed: {type(exc).__name__}: {exc}",
                            remedy="A healthcheck bug: attach the run directory to a bug report")
                    for name in host_results]
        for f in findings:
            host_results[f.host].findings.append(f)
    return findings


def _profiles_of(hosts: Sequence[Host], profiles: Mapping[str, Profile]) -> dict[str, Profile]:
    """Each host's profile with its host vars (``hostvars.host_profile``), by host name."""
    return {h.name: host_profile(h, profiles.get(h.profile or "", EMPTY_PROFILE)) for h in hosts}


def _observe(findings: list[Finding], profile_of: Mapping[str, Profile]) -> list[Finding]:
    """Each finding marked observe-only when its host's profile says so (``grading.apply_observe``): once
    per run of findings of the same host (a host's list is one run), not once per finding."""
    out: list[Finding] = []
    for host, same_host in groupby(findings, key=_HOST):
        out.extend(apply_observe(same_host, profile_of.get(host, EMPTY_PROFILE)))
    return out


def _write_outputs(opts: RunOptions, run_dir: Path, results: RunResults) -> str | None:
    """results.json (with the findings table), then the reports; returns the reports' error, if any.

    Where fork can be used (``healthcheck.run.forked``), the reports are written by a child process meanwhile,
    from the same results in memory, in their usual order, and the run waits for it (bounded): the two
    halves take about as long. Either way a failure of
    results.json raises ``RunDirError`` with no report left behind, and a failing report is
    ``report_error``: the first failing format, the ones after it not written, as when written one by one."""
    if not opts.render:
        _write_results(opts, run_dir, results)
        return None
    # hosts missing from the observation store go in first, so the child sees their offsets
    _write_or_stop(run_dir, "results.json", lambda: store_observations(run_dir, results))
    try:
        names = _report_names()  # every format imported before the fork: once, not in both processes
    except Exception:  # a format that cannot be imported: one by one, it is the reports' error as before
        names = None
    child = None if names is None else Forked.start(lambda: render_reports(run_dir, results, opts.metrics_detail))
    if child is None:
        _write_results(opts, run_dir, results)
        return _render(run_dir, results, opts.metrics_detail)
    try:
        _write_results(opts, run_dir, results)
    except BaseException:  # no results.json: no report either, as when written one by one
        child.finish(timeout_s=0)  # stopped and reaped, never left behind
        for name in names or ():
            _discard(run_dir, name)
        raise
    error = child.finish(DEFAULTS.report_timeout_s)
    if error is not None:
        _say_not_rendered(error)
    return error


def _write_results(opts: RunOptions, run_dir: Path, results: RunResults) -> None:
    _write_or_stop(run_dir, "results.json", lambda: write_results(run_dir, results))
    if opts.run_dir is None:
        update_latest(run_dir)


def _discard(run_dir: Path, name: str) -> None:
    """What the stopped child may have written of report ``name`` (the file, its temporary file)."""
    from healthcheck import reports

    path = run_dir / reports.get(name).filename
    for leftover in (path, path.with_name(path.name + ".tmp")):
        with contextlib.suppress(OSError):
            leftover.unlink()


def _report_names() -> list[str]:
    from healthcheck import reports

    return [spec.name for spec in reports.all_reporters()]


def _say_not_rendered(error: str) -> None:
    print(f"healthcheck: reports not rendered ({error}); results.json is complete", file=sys.stderr)


def _render(run_dir: Path, results: RunResults | None = None, metrics_detail: bool = False) -> str | None:
    """Render the reports; a failure is reported, not raised (``healthcheck report`` can retry)."""
    try:
        render_reports(run_dir, results, metrics_detail)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        _say_not_rendered(error)
        return error
    return None


def _transport(opts: RunOptions, mode: str, hosts: Sequence[Host], run_dir: Path,
               commands_for: Callable[[Host], Sequence[Command]]) -> Transport:
    """Replay for replays; otherwise each host's own transport (ssh unless it says local). Slurm hosts
    share one job step (``slurm_mode="step"``) or get one srun each (``"per-host"``)."""
    def make(kind: str) -> Transport:
        if kind == "slurm" and opts.slurm_mode == "step":
            from healthcheck.transport.slurm_step import SlurmStepTransport

            return SlurmStepTransport([h for h in hosts if h.transport == "slurm"], commands_for,
                                      Path(opts.slurm_spool or run_dir / "slurm-step"), srun_args=opts.srun_args,
                                      alloc_wait_s=opts.connect_timeout_s, cap=opts.output_cap_bytes)
        return open_transport(kind, ssh_config_path=opts.ssh_config,
                              accept_new_host_keys=opts.accept_new_host_keys,
                              connect_timeout_s=opts.connect_timeout_s, cap=opts.output_cap_bytes,
                              bundle=opts.replay, srun_args=opts.srun_args, ssh_client=opts.ssh_client)
    if mode == "replay":
        return make("replay")
    return PerHostTransport({kind: make(kind) for kind in sorted({h.transport for h in hosts})})


HARD_FAIL_CATEGORIES = ("gpu", "nvlink", "topology", "fabric", "xid")


def hard_failed(result: HostResult) -> bool:
    """Unreachable, or a FAIL in a subject that makes a benchmark on the host meaningless."""
    return any((f.check == "host.reachable" and f.status is Status.ERROR)
               or (f.status is Status.FAIL and f.category in HARD_FAIL_CATEGORIES) for f in result.findings)


def _benchmarks(opts: RunOptions, mode: str, run_dir: Path, hosts: Sequence[Host],
                profiles: Mapping[str, Profile], transport: Transport,
                host_results: dict[str, HostResult]) -> list[Finding]:
    """Run the selected benchmarks after the probes (or re-grade a bundle's stored jobs)."""
    from healthcheck.benchmarks.run import execute_benchmarks, replay_benchmarks

    run_options = {**opts.probe_options, "benchmarks": list(opts.benchmarks), "plan": opts.plan}
    by_host = {h.name: profiles.get(h.profile or "", EMPTY_PROFILE) for h in hosts}
    if mode == "replay":
        if not (run_dir / "raw" / "_jobs").is_dir():
            return []
        findings, observations = replay_benchmarks(run_dir, hosts, by_host, run_options)
    elif opts.benchmarks:
        failed = {name for name, r in host_results.items() if hard_failed(r)}
        with JobProgress(enabled=opts.progress) as progress:
            findings, observations = execute_benchmarks(run_dir, hosts, by_host, transport, run_options, failed,
                                                        listener=progress)
    else:
        return []
    store = ObservationStore(run_dir)
    for name, obs in observations.items():
        host, added = host_results.setdefault(name, HostResult(name=name)), to_jsonable(obs)
        host.observations.update(added)
        if host.observations_at is not None:  # the store has the probes' part: append the host again, merged
            full = read_observations(run_dir, host.observations_at) or {}
            host.observations_at = store.append(encode_observations(name, {**full, **added}))
    for f in findings:
        host_results.setdefault(f.host, HostResult(name=f.host)).findings.append(f)
    return findings


def local_nvml_observations(selected: Sequence[Any]) -> dict[str, Any]:
    """GPU observations from NVML for a local host, when pynvml and the driver library load;
    otherwise nothing, and the gpu probe reads the script's ``nvidia-smi -q -x`` as usual."""
    if "gpu" not in {p.name for p in selected}:
        return {}
    from healthcheck.probes.nvml import collect_nvml

    class _NoNvml(Exception):
        pass

    def no_fallback() -> Any:
        raise _NoNvml

    try:
        return {"gpu": collect_nvml(fallback=no_fallback)}
    except _NoNvml:
        return {}


def _fleet(host_results: dict[str, HostResult], hosts: Sequence[Host],
           profiles: Mapping[str, Profile]) -> list[Finding]:
    """Fleet checks over all hosts' observations; their findings join the hosts they name."""
    observations = {name: r.observations for name, r in host_results.items() if r.observations}
    by_name = {h.name: h for h in hosts}
    findings: list[Finding] = []
    for check in probe_registry.fleet_checks():
        findings.extend(f for f in check.evaluate_fleet(observations, by_name, profiles) if f.host in host_results)
    for f in findings:
        host_results[f.host].findings.append(f)
    return findings


def render_reports(run_dir: Path, results: RunResults | None = None, metrics_detail: bool = False) -> list[Path]:
    """Write report.html, junit.xml, metrics.prom, summary.md (the reports package); from ``results``
    when the caller has them in memory, else from the run directory."""
    from healthcheck import reports

    if results is None and not metrics_detail:
        return reports.write_all(run_dir)
    return reports.write_all(run_dir, results=results, options={"metrics_detail": metrics_detail})
