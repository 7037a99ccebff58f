"""``healthcheck gate``: is this node fit for the next job? The passive probes that fit, then active micro-tests,
inside a hard time budget; the verdict is an exit code a scheduler acts on (Slurm Prolog, Kubernetes init).

    outcome = run_gate(GateOptions(spool=Path("/var/spool/healthcheck-gate"), profile="h100-sxm5-8x"))
    outcome.exit_code    # 0 the job may start; 1 the node failed (or, with on_error="closed", could not be judged)
    outcome.tests        # one ActiveRecord per active test: ran, cached, dropped or skipped, and why

Order: the job-safe passive probes whose declared cost fits ``passive_budget_s`` (``healthcheck node``'s
selection), then, unless they already failed the node, the active tests in ``gate_plan.PRIORITY`` order, each
taken while its estimate fits what is left of the budget (``gate_plan``), each killed at its own timeout or when
the budget runs out (``gate_exec``). A test that passed within ``cache_minutes`` on the same boot, driver and
profile is served from the cache (``gate_cache``) instead of run. The bundle goes to ``spool/<host>/`` as for
``healthcheck node`` (results.json holds every finding; the active tests' raw output is in ``raw/_gate/`` and
the plan, timings and cache use in ``gate.json``). Two gates on one node wait for each other (a lock file), so
concurrent prologs never measure each other's load. The caller starts the ``gate_exec.Watchdog``: the process
never outlives ``budget_s``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import Finding, Status, host_verdict
from healthcheck.ops.gate.cache import CachedTest, boot_id, cache_key, cacheable, read_cache, write_cache
from healthcheck.ops.gate.exec import ChildGroups, run_launch
from healthcheck.ops.gate.plan import PRIORITY, PlannedTest, fits_now, load_test_costs, plan_gate
from healthcheck.ops.gate.steps import TESTS, GateContext, StepOutput
from healthcheck.ops.node import NodeOptions, node_name, plan_probes, remove_stale, swap_in
from healthcheck.run.execute import execute_run
from healthcheck.run.options import OutputOptions, RunOptions, SelectionOptions, TargetOptions, TransportOptions
from healthcheck.run.plan import plan_run
from healthcheck.run.selection import SelectionError
from healthcheck.store.results import RunResults, write_results
from healthcheck.store.rundir import RunDirError, _safe_component

ON_ERROR = ("open", "closed")
DEFAULT_GPUS = 8   # for estimates only, when neither the node nor the profile says


@dataclass
class GateOptions:
    spool: Path
    host: str | None = None
    inventory: Path | None = None
    profile: str | None = None
    budget_s: float = DEFAULTS.gate_budget_s
    passive_budget_s: float = DEFAULTS.gate_passive_budget_s
    reserve_s: float = DEFAULTS.gate_reserve_s
    tests: Sequence[str] | None = None           # active tests (default: all, PRIORITY order)
    skip_tests: Sequence[str] = ()
    probes: Sequence[str] | None = None          # passive probes (default: the job-safe ones that fit)
    cache_dir: Path | None = None                # default: <spool>/.gate-cache
    cache_minutes: float = DEFAULTS.gate_cache_minutes
    on_error: str = "open"
    settings: Mapping[str, Any] = field(default_factory=dict)   # benchmark settings (``--set gpuperf.python=...``)
    kill_grace_s: float = DEFAULTS.gate_kill_grace_s
    started: float = field(default_factory=time.monotonic)      # the watchdog's clock starts here too
    groups: ChildGroups = field(default_factory=ChildGroups)    # the running tests, for the watchdog


@dataclass(frozen=True)
class ActiveRecord:
    name: str
    state: str                  # ran | cached | dropped | skipped
    note: str = ""
    seconds: float = 0.0
    estimate_s: float | None = None
    timeout_s: float | None = None
    rc: int | None = None
    timed_out: bool = False
    tool: str = ""


@dataclass
class GateOutcome:
    host: str
    bundle: Path
    results: RunResults
    tests: list[ActiveRecord]
    passive_left_out: dict[str, str]
    on_error: str = "open"

    @property
    def findings(self) -> list[Finding]:
        result = self.results.hosts.get(self.host)
        return list(result.findings) if result else []

    @property
    def verdict(self) -> Status:
        return host_verdict(self.findings)

    @property
    def first_failure(self) -> Finding | None:
        for status in (Status.FAIL, Status.ERROR):
            for f in self.findings:
                if f.status is status and not f.observe:
                    return f
        return None

    @property
    def exit_code(self) -> int:
        return gate_exit_code(self.verdict, self.on_error)


def gate_exit_code(verdict: Status, on_error: str) -> int:
    """1 when the node failed; an ERROR verdict (the gate could not judge: a hung test, nothing checked) fails
    only when the site chose ``closed``; 0 otherwise."""
    if verdict is Status.FAIL:
        return 1
    return 1 if verdict is Status.ERROR and on_error == "closed" else 0


def run_gate(opts: GateOptions) -> GateOutcome:
    """Check this node within ``opts.budget_s`` and write its bundle; raises only on setup errors."""
    if opts.on_error not in ON_ERROR:
        raise ValueError(f"on_error must be one of {', '.join(ON_ERROR)}, got {opts.on_error!r}")
    deadline = opts.started + opts.budget_s
    host = _safe_component(node_name(opts.host))
    names, left_out = plan_probes(NodeOptions(spool=opts.spool, host=host, probes=opts.probes,
                                              budget_s=opts.passive_budget_s))
    if not names:
        raise ValueError("no passive probe fits: " + "; ".join(f"{n}: {why}" for n, why in left_out.items()))
    try:
        profile = plan_run(_passive_options(opts, host, names, deadline, None)).profile_of[host]
    except (SelectionError, KeyError) as exc:
        raise RunDirError(f"host {host} is not in inventory {opts.inventory} (give --host or add it)") from exc
    spool = Path(opts.spool)
    spool.mkdir(parents=True, exist_ok=True)
    remove_stale(spool, host)
    with NodeLock(spool / f".{host}.gate.lock", deadline - opts.reserve_s):
        holder = spool / f".{host}.tmp-{os.getpid()}"
        shutil.rmtree(holder, ignore_errors=True)
        staging = holder / host
        try:
            results = execute_run(_passive_options(opts, host, names, deadline, staging)).results
            if host not in results.hosts:
                raise RunDirError(f"host {host} is not in inventory {opts.inventory} (give --host or add it)")
            active, records = _active(opts, host, profile, results, staging, deadline)
            _write(staging, results, host, active, records, opts, left_out)
            bundle = swap_in(staging, spool / host)
        finally:
            shutil.rmtree(holder, ignore_errors=True)
    return GateOutcome(host=host, bundle=bundle, results=results, tests=records, passive_left_out=left_out,
                       on_error=opts.on_error)


def _passive_options(opts: GateOptions, host: str, names: Sequence[str], deadline: float,
                     staging: Path | None) -> RunOptions:
    share = max(1.0, min(opts.passive_budget_s, deadline - time.monotonic() - opts.reserve_s))
    return RunOptions(
        target=TargetOptions(inventory=opts.inventory, hostlist=None if opts.inventory else host,
                             limit=[host] if opts.inventory else None, local=True, profile=opts.profile),
        outputs=OutputOptions(run_dir=staging, render=False),
        transport=TransportOptions(forks=1, timeout_s=share, deadline_s=share + DEFAULTS.kill_after_s),
        selection=SelectionOptions(probes=list(names), probe_options={
            "kernel_log_window_h": DEFAULTS.kernel_log_window_h, "plan": "quick"}))


class NodeLock:
    """An exclusive lock on this node's gate (``flock``), waited for until ``until`` (monotonic): two gates
    never measure at once; one that cannot get it in time raises ``RunDirError`` (the gate's own error)."""

    def __init__(self, path: Path, until: float) -> None:
        self.path, self.until, self.fd = path, until, -1

    def __enter__(self) -> NodeLock:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if time.monotonic() >= self.until:
                    os.close(self.fd)
                    raise RunDirError(f"another healthcheck gate holds {self.path} for the whole budget") from None
                time.sleep(0.2)

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


def _observed(results: RunResults, host: str, field_name: str) -> Any:
    obs = results.hosts[host].observations.get("gpu")
    return obs.get(field_name) if isinstance(obs, Mapping) else getattr(obs, field_name, None)


def _active(opts: GateOptions, host: str, profile: Any, results: RunResults, staging: Path,
            deadline: float) -> tuple[list[Finding], list[ActiveRecord]]:
    """Run (or serve from the cache) the active tests that fit; their findings and one record per test."""
    requested = [t for t in (opts.tests or PRIORITY) if t not in set(opts.skip_tests)]
    unknown = [t for t in requested if t not in TESTS]
    if unknown:
        raise ValueError(f"unknown gate test(s) {', '.join(unknown)} (known: {', '.join(PRIORITY)})")
    gpus = _gpu_count(results, host, profile)
    cache_path = (opts.cache_dir or Path(opts.spool) / ".gate-cache") / f"{host}.json"
    key = cache_key(profile.name, boot_id(), _observed(results, host, "driver_version"), gpus)
    cached = {n: c for n, c in read_cache(cache_path, key, time.time(), opts.cache_minutes * 60).items()
              if n in requested}
    findings = [_cached(f, entry) for entry in cached.values() for f in entry.findings]
    records = [ActiveRecord(n, "cached", f"passed {(time.time() - c.at) / 60:.1f} min ago") for n, c in cached.items()]
    todo = [t for t in requested if t not in cached]
    if host_verdict(results.hosts[host].findings) is Status.FAIL:
        why = "not run: the passive probes already failed the node"
        return findings + _skips(host, todo, why), records + [ActiveRecord(t, "skipped", why) for t in todo]
    plan = plan_gate(todo, load_test_costs(profile), gpus or DEFAULT_GPUS, deadline - time.monotonic() - opts.reserve_s)
    ctx = GateContext(host=host, profile=profile, options=dict(opts.settings), gpus=gpus,
                      workdir=staging.parent / "work")
    fresh = dict(cached)
    for test in plan.run:
        left = deadline - time.monotonic() - opts.reserve_s
        if not fits_now(test, left):
            plan = plan.without(test.name, f"estimated {test.estimate_s:.1f} s, {max(left, 0):.1f} s left when its "
                                           "turn came (earlier tests took longer than estimated)")
            continue
        graded, record = _run_test(opts, ctx, test, left, staging)
        findings += graded
        records.append(record)
        if record.state == "ran" and cacheable(graded):
            fresh[test.name] = CachedTest(test.name, time.time(), tuple(graded))
    findings += [Finding(host=host, check="gate.plan", component=name, status=Status.SKIP, source="gate",
                         message=f"{name} not run: {why}") for name, why in plan.dropped.items()]
    records += [ActiveRecord(name, "dropped", why) for name, why in plan.dropped.items()]
    _save_cache(cache_path, key, fresh, opts.cache_minutes)
    return findings, records


def _gpu_count(results: RunResults, host: str, profile: Any) -> int | None:
    """What the node's gpu probe counted, else the profile's ``gpu.count``, else None."""
    seen = _observed(results, host, "count")
    if isinstance(seen, int) and seen > 0:
        return seen
    exp = profile.expect("gpu.count")
    return exp.value if exp is not None and isinstance(exp.value, int) else None


def _run_test(opts: GateOptions, ctx: GateContext, test: PlannedTest, left: float,
              staging: Path) -> tuple[list[Finding], ActiveRecord]:
    """Launch one test (a SKIP when its tool is missing), keep its raw output, grade it."""
    launch = TESTS[test.name].launch(ctx)
    if isinstance(launch, str):
        return _skips(ctx.host, [test.name], f"not run: {launch}"), ActiveRecord(test.name, "skipped", launch)
    out = run_launch(launch, ctx.workdir, min(test.timeout_s, left), opts.groups, opts.kill_grace_s)
    _keep_raw(staging, test.name, out)
    record = ActiveRecord(test.name, "ran", _note(out), round(out.duration_s, 3), round(test.estimate_s, 1),
                          round(out.timeout_s, 1), out.rc, out.timed_out, launch.tool)
    return TESTS[test.name].grade(ctx, launch, out), record


def _skips(host: str, names: Sequence[str], why: str) -> list[Finding]:
    return [Finding(host=host, check="gate.test", component=n, status=Status.SKIP, source="gate",
                    message=f"{n} {why}") for n in names]


def _cached(f: Finding, entry: CachedTest) -> Finding:
    when = datetime.fromtimestamp(entry.at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Finding.from_json({**f.to_json(), "message": f"{f.message} [cached: measured by the gate at {when}]"})


def _note(out: StepOutput) -> str:
    if out.start_error:
        return out.start_error
    if out.timed_out:
        return f"killed after {out.timeout_s:.1f} s (its timeout or the budget)"
    return f"exit code {out.rc}"


def _keep_raw(staging: Path, name: str, out: StepOutput) -> None:
    folder = staging / "raw" / "_gate"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.out").write_text(out.stdout)
    (folder / f"{name}.err").write_text(out.stderr + (f"\n[healthcheck: {out.start_error}]\n" if out.start_error
                                                      else ""))
    (folder / f"{name}.rc").write_text("" if out.rc is None else f"{out.rc}\n")


def _save_cache(path: Path, key: str, tests: Mapping[str, CachedTest], minutes: float) -> None:
    if minutes <= 0:
        return
    with contextlib.suppress(OSError):  # a cache that cannot be written only costs the next gate a rerun
        write_cache(path, key, tests)


def _write(staging: Path, results: RunResults, host: str, active: list[Finding], records: list[ActiveRecord],
           opts: GateOptions, left_out: Mapping[str, str]) -> None:
    """Active findings into results.json (and the findings table), the plan and timings into gate.json."""
    results.hosts[host].findings.extend(active)
    write_results(staging, results)
    doc = {"schema": "healthcheck.gate/1", "host": host, "budget_s": opts.budget_s,
           "passive_budget_s": opts.passive_budget_s, "reserve_s": opts.reserve_s, "on_error": opts.on_error,
           "cache_minutes": opts.cache_minutes, "elapsed_s": round(time.monotonic() - opts.started, 3),
           "passive_left_out": dict(left_out), "tests": [asdict(r) for r in records]}
    (staging / "gate.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
