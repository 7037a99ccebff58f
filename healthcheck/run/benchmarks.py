"""Run benchmark jobs on a launcher host, keep their raw output, grade them, attribute pair failures.

    findings, observations = execute_benchmarks(run_dir, hosts, profiles, transport,
                                                {"benchmarks": ["nccl", "hpl"], "plan": "acceptance"},
                                                failed_hosts={"gpu007"})
    findings, observations = replay_benchmarks(run_dir, hosts, profiles, options)   # no launch

Every job's output is stored as ``raw/_jobs/<job_id>.out|.err|.rc`` with ``raw/_jobs/manifest.json``
(the job, launcher host, script, rc, timeout, transport error, duration), so a run can be re-graded
by ``replay_benchmarks``. A job that hangs past its timeout is an ERROR for every host in it. Pair
jobs whose failure points at a node are retested against a known-good partner before the node
is declared bad (``benchmarks.attribution``), and a cluster job that included a bad node runs again
without it, so the other nodes are graded on a run they can pass. The ``isolate`` shape runs the
adaptive isolation round by round through the same launcher (``run.isolation``; its trail is
``raw/_jobs/isolation.json``), and its story is appended to the ``stories`` list when one is given.
``profiles`` maps host names or profile names to ``Profile``s. The benchmark plug-ins (``benchmarks/``)
stay pure: the I/O of a job is here.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from healthcheck import benchmarks
from healthcheck.benchmarks import BenchContext, BenchmarkSpec, bench_setting
from healthcheck.benchmarks.attribution import retest_candidates
from healthcheck.benchmarks.domain import domain_label
from healthcheck.benchmarks.grade import (
    JobOutcome,
    attributed,
    grade_job,
    grade_outcomes,
    inventory_options,
    job_ok,
    pair_results,
    profile_for,
)
from healthcheck.benchmarks.isolate_report import Trail
from healthcheck.benchmarks.launch import (
    LauncherSettings,
    hostfile_text,
    launch_script,
    launcher_argv,
    merge_launcher_settings,
)
from healthcheck.benchmarks.plan import SHAPES, Job, cluster_rerun, job_id, plan_jobs, retest_pairs, stage_of
from healthcheck.benchmarks.stored import read_stored_jobs
from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import CommandResult, Finding, Host, Status
from healthcheck.core.profiles import Profile
from healthcheck.run.fabric_jobs import around_job, merge_fabric
from healthcheck.run.isolation import fabric_leaves, isolation_trails, read_trails, run_isolation, write_trails
from healthcheck.run.telemetry import merge_telemetry, sample_during

JOBS_DIR = Path("raw") / "_jobs"
LOCAL = "local"


# --- planning ---------------------------------------------------------------------------------

def plan_benchmark(spec: BenchmarkSpec, hosts: Sequence[Host], profile: Profile,
                   options: Mapping[str, Any]) -> list[Job]:
    """The jobs of one benchmark over hosts that share ``profile`` (first pass, no retests)."""
    shapes = [s for s in planned_shapes(spec, options) if s != "isolate"]
    plan = str(options.get("plan", "quick"))
    rails = [str(r) for r in bench_setting(profile, options, f"{spec.name}.rails", []) or []]
    if (options.get("per_rail") or bench_setting(profile, options, f"{spec.name}.per_rail", False)) and rails:
        shapes.append("rail")
    rounds = int(options.get("pair_rounds") or (DEFAULTS.bench_pair_rounds if plan == "acceptance" else 1))
    timeout = float(bench_setting(profile, options, f"{spec.name}.timeout_s", DEFAULTS.bench_job_timeout_s))
    ranks = {shape: int(spec.ranks_per_host(profile, shape, options)) for shape in SHAPES}
    return plan_jobs(spec.name, spec.tests(profile, options), shapes, [h.name for h in hosts], ranks,
                     pair_round_count=rounds, rails=rails, timeout_s=timeout,
                     domain_of={h.name: domain_label(h) for h in hosts})


def planned_shapes(spec: BenchmarkSpec, options: Mapping[str, Any]) -> list[str]:
    """The shapes the run's plan asks of ``spec`` (option ``<bench>.shapes`` wins); ``isolate`` among them
    is the adaptive isolation, planned round by round."""
    plan = str(options.get("plan", "quick"))
    return list(options.get(f"{spec.name}.shapes") or spec.shapes.get(plan) or spec.shapes["quick"])


def first_pass(spec: BenchmarkSpec, group: Sequence[Host], profile: Profile,
               options: Mapping[str, Any]) -> list[Job]:
    """The planned jobs; for a rerun (option ``jobs``: Job records of an earlier run) exactly those
    of this benchmark whose hosts are all in ``group``."""
    if options.get("jobs") is None:
        return plan_benchmark(spec, group, profile, options)
    names = {h.name for h in group}
    return [Job.from_json(dict(j)) for j in options["jobs"]
            if j.get("benchmark") == spec.name and set(j.get("hosts") or ()) <= names]


def _groups(hosts: Sequence[Host], profiles: Mapping[str, Profile]) -> list[tuple[Profile, list[Host]]]:
    groups: dict[str, tuple[Profile, list[Host]]] = {}
    for host in hosts:
        profile = profile_for(host, profiles)
        groups.setdefault(profile.name, (profile, []))[1].append(host)
    return list(groups.values())


# --- execution --------------------------------------------------------------------------------

def _launch(job: Job, hosts: Mapping[str, Host], profile: Profile, spec: BenchmarkSpec, transport: Any,
            options: Mapping[str, Any]) -> JobOutcome:
    raw = merge_launcher_settings(profile.setting("benchmarks.launcher", {}) or {}, options.get("launcher") or {})
    settings = LauncherSettings.from_mapping(raw)
    if spec.launcher == "direct":  # runs on the job's node itself: no MPI, the site's env and workdir kept
        settings = LauncherSettings(kind="direct", env=settings.env, workdir=settings.workdir, grace_s=settings.grace_s)
    program = spec.program(job, profile, options)
    nodes = [_node_address(hosts[h], settings) for h in job.hosts]
    argv = launcher_argv(program, nodes=nodes, ranks_per_host=job.ranks_per_host, timeout_s=job.timeout_s,
                         settings=settings)
    script = launch_script(argv, program, hostfile_text(nodes, job.ranks_per_host), settings)
    launcher_name = job.hosts[0] if spec.launcher == "direct" else str(options.get("launcher_host") or job.hosts[0])
    local = launcher_name == LOCAL
    launcher = Host(LOCAL, transport="local") if local else hosts.get(launcher_name, Host(launcher_name))
    runner = _local_transport() if local else transport
    result: CommandResult = runner.run(launcher, script, job.timeout_s + settings.grace_s, command_id=job.job_id)
    return JobOutcome(job=job, launcher=launcher_name, command=script, rc=result.rc, timed_out=result.timed_out,
                      transport_error=result.transport_error, duration_s=result.duration_s,
                      stdout=result.text, stderr=result.err_text)


def _node_address(host: Host, settings: LauncherSettings) -> str:
    return host.address or host.name if settings.host_field == "address" else host.name


def _local_transport() -> Any:
    from healthcheck.transport import open_transport
    return open_transport("local")


def _waves(jobs: Sequence[Job]) -> list[list[Job]]:
    """Jobs in stage order, packed into waves whose jobs share no slot: a host, or for one-GPU rail jobs
    a (host, rail) (``Job.slots``)."""
    waves: list[list[Job]] = []
    for stage in sorted({j.stage for j in jobs}):
        pending = [j for j in jobs if j.stage == stage]
        while pending:
            used: dict[str, set[str | None]] = {}
            wave = []
            for job in pending:
                if all(_slot_free(used, host, rail) for host, rail in job.slots):
                    wave.append(job)
                    for host, rail in job.slots:
                        used.setdefault(host, set()).add(rail)
            waves.append(wave)
            pending = [j for j in pending if j not in wave]
    return waves


def _slot_free(used: Mapping[str, set[str | None]], host: str, rail: str | None) -> bool:
    taken = used.get(host)
    return not taken or (rail is not None and None not in taken and rail not in taken)


def _run_jobs(run_dir: Path, jobs: Sequence[Job], hosts: Mapping[str, Host], profile: Profile,
              transport: Any, options: Mapping[str, Any], manifest: list[dict[str, Any]],
              listener: Any = None) -> list[JobOutcome]:
    """Run ``jobs`` wave by wave; ``listener`` (``progress.JobProgress``) hears of each job's start and end."""
    outcomes: list[JobOutcome] = []
    parallel = int(options.get("parallel_jobs") or DEFAULTS.bench_parallel_jobs)
    if listener is not None:
        listener.on_jobs_planned(len(jobs))

    def launch(j: Job) -> JobOutcome:
        if listener is not None:
            listener.on_job_start(j)
        return _launch(j, hosts, profile, benchmarks.get(j.benchmark), transport, options)

    for wave in _waves(jobs):
        with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(wave)))) as pool:
            # telemetry (issue 9): single-node jobs run with a GPU field sampler on their node
            # (healthcheck/run/telemetry.py; off with the option telemetry=False), stored under raw/_telemetry/
            # fabric counters (issue 33): multi-node jobs run between two counter snapshots of their hosts
            done = list(pool.map(lambda j: sample_during(run_dir, j, hosts, transport, profile, options,
                                                         lambda: around_job(run_dir, j, hosts, transport, options,
                                                                            lambda: launch(j))), wave))
        for outcome in done:
            store_outcome(run_dir, outcome, manifest)
            if listener is not None:
                listener.on_job_done(outcome)
        outcomes += done
    return outcomes


def store_outcome(run_dir: Path, outcome: JobOutcome, manifest: list[dict[str, Any]]) -> None:
    """Write ``raw/_jobs/<job_id>.out|.err|.rc`` and rewrite the manifest (atomically)."""
    folder = Path(run_dir) / JOBS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / outcome.job.job_id
    stem.with_suffix(".out").write_text(outcome.stdout)
    stem.with_suffix(".err").write_text(outcome.stderr)
    stem.with_suffix(".rc").write_text("" if outcome.rc is None else f"{outcome.rc}\n")
    manifest[:] = [e for e in manifest if e["job"]["job_id"] != outcome.job.job_id] + [outcome.manifest_entry()]
    tmp = folder / "manifest.json.tmp"
    tmp.write_text(json.dumps({"schema": "healthcheck.bench-jobs/1", "jobs": manifest}, indent=1) + "\n")
    tmp.replace(folder / "manifest.json")


def load_outcomes(run_dir: Path, known_hosts: Sequence[str] = ()) -> list[JobOutcome]:
    """Every stored job of a run directory, in execution order (empty when none ran); see
    ``benchmarks/stored.py`` for jobs without a manifest."""
    return read_stored_jobs(run_dir, known_hosts)[0]


# --- entry points -----------------------------------------------------------------------------

def _retest_jobs(graded: Sequence[tuple[JobOutcome, list[Finding]]], profile: Profile,
                 options: Mapping[str, Any]) -> list[Job]:
    """Retests of suspects against known-good partners, per pair group (first pass only)."""
    jobs: list[Job] = []
    for (bench, test, shape, rail), results in pair_results(graded).items():
        suspects, good = retest_candidates(results)
        tried = [r.hosts for r in results]
        failed = {h: r.job_id for r in results if not r.ok for h in r.hosts}
        template = next(o.job for o, _ in graded if o.job.benchmark == bench and o.job.test == test
                        and o.job.shape == shape and o.job.rail == rail)
        for index, stage in enumerate(retest_pairs(suspects, good, tried)):
            for suspect, partner in stage:
                jobs.append(Job(job_id=job_id(bench, test, shape, (suspect, partner), rail, retest=True),
                                benchmark=bench, test=test, shape=shape, hosts=(suspect, partner),
                                ranks_per_host=template.ranks_per_host, stage=stage_of("retest", index),
                                rail=rail, retest_of=failed.get(suspect), timeout_s=template.timeout_s))
    return jobs


def execute_benchmarks(run_dir: Path, hosts: Sequence[Host], profiles: Mapping[str, Profile], transport: Any,
                       run_options: Mapping[str, Any], failed_hosts: set[str] | frozenset[str] = frozenset(),
                       listener: Any = None, stories: list[dict[str, Any]] | None = None,
                       ) -> tuple[list[Finding], dict[str, dict[str, Any]]]:
    """Plan, launch and grade ``options["benchmarks"]`` over ``hosts``; store every job's raw output.

    Options: ``benchmarks`` (names), ``plan`` (quick | acceptance | isolate), ``launcher_host`` (an
    inventory host or ``local``; default: the job's first host), ``launcher`` (LauncherSettings
    overrides), ``skip_failed_hosts`` (default True: hosts in ``failed_hosts`` are not benchmarked),
    ``pair_rounds``, ``per_rail``, ``parallel_jobs``, ``retest`` (default True), ``topology`` (an
    ibnetdiscover/iblinkinfo file for the isolation's leaves), and any ``<benchmark>.<setting>``
    overriding the profile's ``settings.benchmarks``; an inventory host var ``benchmarks: {nccl:
    {binary_dir: ...}, launcher: {...}}`` sits between the two.
    """
    by_name = {h.name: h for h in hosts}
    skip = bool(run_options.get("skip_failed_hosts", True))
    eligible = [h for h in hosts if not (skip and h.name in failed_hosts)]
    findings: list[Finding] = []
    manifest: list[dict[str, Any]] = []
    outcomes: list[JobOutcome] = []
    trails: list[Trail] = []
    leaves, topology_findings = fabric_leaves(run_options, eligible) if run_options.get("topology") else ({}, [])
    for spec in benchmarks.select(list(run_options.get("benchmarks") or ())):
        findings += [Finding(host=h.name, check=f"{spec.name}.skipped", status=Status.SKIP,
                             source="benchmarks", message=f"{spec.name} not run: the host failed its probes")
                     for h in hosts if h not in eligible]
        for profile, group in _groups(eligible, profiles):
            group_options = inventory_options(group[0], run_options)
            done = _run_group(run_dir, spec, group, profile, by_name, transport, group_options, manifest, listener)
            if "isolate" in planned_shapes(spec, group_options) and group_options.get("jobs") is None:
                isolated, problems = _run_isolations(run_dir, spec, group, profile, by_name, transport, group_options,
                                                     manifest, listener, trails, leaves)
                done += isolated
                findings += problems
            outcomes += done
            covered = {h for o in done for h in o.job.hosts}
            findings += [Finding(host=h.name, check=f"{spec.name}.skipped", status=Status.SKIP,
                                 source="benchmarks", message=_not_covered(spec.name, profile.name, run_options))
                         for h in group if h.name not in covered]
    graded_findings, observations = grade_outcomes(outcomes, hosts, profiles, run_options, trails, stories)
    # telemetry (issue 9): the series sampled during the jobs join the findings and observations
    findings, observations = merge_telemetry(run_dir, hosts, profiles, topology_findings + findings + graded_findings,
                                             observations)
    return merge_fabric(run_dir, hosts, profiles, findings, observations)


def _run_isolations(run_dir: Path, spec: BenchmarkSpec, group: Sequence[Host], profile: Profile,
                    by_name: Mapping[str, Host], transport: Any, options: Mapping[str, Any],
                    manifest: list[dict[str, Any]], listener: Any, trails: list[Trail],
                    leaves: Mapping[str, str]) -> tuple[list[JobOutcome], list[Finding]]:
    """The isolation of each test of ``spec`` over one profile group, round by round (trails recorded first);
    settings that cannot be used are an ERROR on every host of the group, naming the setting."""
    ctx = BenchContext(profile, by_name, options)
    done: list[JobOutcome] = []
    try:
        planned = isolation_trails(spec, group, profile, options, leaves)
    except ValueError as exc:
        return [], [Finding(host=h.name, check=f"{spec.name}.isolate.settings", status=Status.ERROR,
                            source="benchmarks", expected="usable isolation settings",
                            message=f"{spec.name}: isolation not run: {exc}",
                            remedy=f"Fix settings.benchmarks.{spec.name}.isolate in profile {profile.name} (or the "
                                   "inventory var benchmarks / the run option)") for h in group]
    for trail in planned:
        trails.append(trail)
        write_trails(run_dir, trails)
        done += run_isolation(trail,
                              lambda jobs: _run_jobs(run_dir, jobs, by_name, profile, transport, options, manifest,
                                                     listener),
                              lambda outcome: job_ok(grade_job(outcome, spec, ctx)[0]))
    return done, []


def _not_covered(bench: str, profile: str, options: Mapping[str, Any]) -> str:
    if options.get("jobs") is not None:
        return f"{bench}: not rerun on this host (none of its jobs failed in the earlier run)"
    return f"{bench}: no job for this host (no partner with profile {profile})"


def _run_group(run_dir: Path, spec: BenchmarkSpec, group: Sequence[Host], profile: Profile,
               by_name: Mapping[str, Host], transport: Any, options: Mapping[str, Any],
               manifest: list[dict[str, Any]], listener: Any = None) -> list[JobOutcome]:
    """First-pass jobs of one benchmark over hosts sharing a profile, then retests of suspects, then
    the cluster jobs again without the nodes the pairs proved bad."""
    def run(jobs: Sequence[Job]) -> list[JobOutcome]:
        return _run_jobs(run_dir, jobs, by_name, profile, transport, options, manifest, listener)

    done = run(first_pass(spec, group, profile, options))
    if not options.get("retest", True):
        return done
    ctx = BenchContext(profile, by_name, options)
    graded = [(o, grade_job(o, spec, ctx)[0]) for o in done]
    retests = run(_retest_jobs(graded, profile, options))
    graded += [(o, grade_job(o, spec, ctx)[0]) for o in retests]
    return done + retests + run(cluster_reruns(graded))


def cluster_reruns(graded: Sequence[tuple[JobOutcome, list[Finding]]]) -> list[Job]:
    """Each cluster job that included a node the pair tests and retests proved bad, without those nodes."""
    bad = attributed(graded)[2]
    reruns = (cluster_rerun(o.job, bad.get((o.job.benchmark, o.job.test), {})) for o, _ in graded)
    return [job for job in reruns if job is not None]


def replay_benchmarks(run_dir: Path, hosts: Sequence[Host], profiles: Mapping[str, Profile],
                      options: Mapping[str, Any], stories: list[dict[str, Any]] | None = None,
                      ) -> tuple[list[Finding], dict[str, dict[str, Any]]]:
    """Re-grade the jobs stored under ``raw/_jobs/`` (no launch); hosts missing from ``hosts`` are added.
    Job outputs that cannot be graded (no manifest and an id naming no known hosts), or an isolation
    trail that cannot be replayed, are an ERROR on every host, never silently ignored."""
    outcomes, problems = read_stored_jobs(run_dir, [h.name for h in hosts])
    trails, trail_problems = read_trails(run_dir)
    problems += trail_problems
    by_name = {h.name: h for h in hosts}
    outcomes = [_with_ranks(o, by_name, profiles, options) for o in outcomes]
    known = set(by_name)
    extra = sorted({n for o in outcomes for n in o.job.hosts} - known)
    findings, observations = grade_outcomes(outcomes, [*hosts, *(Host(n) for n in extra)], profiles, options,
                                            trails, stories)
    for bench in dict.fromkeys(o.job.benchmark for o in outcomes):  # hosts the original run left out
        covered = {n for o in outcomes if o.job.benchmark == bench for n in o.job.hosts}
        findings = [Finding(host=h.name, check=f"{bench}.skipped", status=Status.SKIP, source="benchmarks",
                            message=f"{bench} not run on this host in the original run (failed its probes or "
                                    "had no partner)") for h in hosts if h.name not in covered] + findings
    findings += [Finding(host=h.name, check="benchmarks.replay", status=Status.ERROR, source="raw/_jobs",
                         expected="every stored job output graded", message=problem,
                         remedy="Keep raw/_jobs/manifest.json with the job outputs, or name the files "
                                "<benchmark>-<test>-<shape>-<hosts>.out as healthcheck writes them")
                 for problem in problems for h in hosts]
    # telemetry (issue 9) and fabric counters (issue 33): replayed too, for the run's and the stored jobs' hosts
    everyone = [*hosts, *(Host(n) for n in extra)]
    findings, observations = merge_telemetry(run_dir, everyone, profiles, findings, observations)
    return merge_fabric(run_dir, everyone, profiles, findings, observations)


def _with_ranks(outcome: JobOutcome, hosts: Mapping[str, Host], profiles: Mapping[str, Profile],
                options: Mapping[str, Any]) -> JobOutcome:
    """A job rebuilt from its id has no rank count: the profile's, as when it was planned."""
    job = outcome.job
    if job.ranks_per_host:
        return outcome
    profile = profile_for(hosts.get(job.hosts[0], Host(job.hosts[0])), profiles)
    ranks = int(benchmarks.get(job.benchmark).ranks_per_host(profile, job.shape, options))
    return dataclasses.replace(outcome, job=dataclasses.replace(job, ranks_per_host=ranks))
