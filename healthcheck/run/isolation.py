"""The isolation plan's I/O: its layout from the inventory and a fabric file, its rounds launched, its trail kept.

    layout, findings = isolation_layout(group, profile, options, leaves)
    outcomes = run_isolation(trail, run_jobs, passed)      # rounds until the planner is done
    write_trails(run_dir, trails); trails, problems = read_trails(run_dir)

``run_jobs(jobs)`` launches one round's jobs (``run.benchmarks``: the same launcher, waves, timeouts and
``raw/_jobs`` as every other job) and ``passed(outcome)`` grades one; the planner itself is pure
(``benchmarks.isolate``). ``raw/_jobs/isolation.json`` holds each isolation's trail (layout, settings,
test), rewritten atomically when one starts, so a replay re-runs the planner over the stored jobs.
``--topology FILE`` (option ``topology``) is ``ibnetdiscover`` or ``iblinkinfo`` output, read here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from healthcheck.benchmarks import BenchmarkSpec, bench_setting
from healthcheck.benchmarks.grade import JobOutcome
from healthcheck.benchmarks.ibfabric import host_leaves, parse_fabric
from healthcheck.benchmarks.isolate import IsolationSettings, drive
from healthcheck.benchmarks.isolate_report import SCHEMA, Trail, probe_job
from healthcheck.benchmarks.plan import Job
from healthcheck.benchmarks.topology import Layout, build_layout
from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import Finding, Host, Status
from healthcheck.core.profiles import Profile
from healthcheck.store.safeio import BundleFileError, read_regular

TRAILS = Path("raw") / "_jobs" / "isolation.json"
TOPOLOGY_MAX_BYTES = 64 << 20


def fabric_leaves(options: Mapping[str, Any], hosts: Sequence[Host]) -> tuple[dict[str, str], list[Finding]]:
    """Host -> leaf from the ``topology`` file, and a WARN on every host when it cannot be used."""
    path = options.get("topology")
    if not path:
        return {}, []
    try:
        with open(path, "rb") as fh:  # the user's own file, named on the command line
            text = fh.read(TOPOLOGY_MAX_BYTES).decode("utf-8", errors="replace")
    except OSError as exc:
        return {}, _topology_warning(hosts, f"cannot read the topology file {path}: {exc.strerror or exc}")
    leaves = host_leaves(parse_fabric(text), [h.name for h in hosts])
    if not leaves:
        return {}, _topology_warning(hosts, f"the topology file {path} names none of these hosts (no "
                                            "ibnetdiscover or iblinkinfo HCA described as '<host> <device>')")
    return leaves, []


def _topology_warning(hosts: Sequence[Host], message: str) -> list[Finding]:
    return [Finding(host=h.name, check="benchmarks.topology", status=Status.WARN, source="topology",
                    message=f"{message}: the isolation ran without the leaves it would give",
                    remedy="Give ibnetdiscover (or iblinkinfo) output of this fabric, or the inventory vars leaf "
                           "and nvlink_domain") for h in hosts]


def isolation_trails(spec: BenchmarkSpec, group: Sequence[Host], profile: Profile, options: Mapping[str, Any],
                     leaves: Mapping[str, str]) -> list[Trail]:
    """One trail per test of ``spec`` over ``group`` (hosts of one profile); settings from
    ``<bench>.isolate`` (profile ``settings.benchmarks``, inventory var, run options), rails from
    ``<bench>.rails``. A bad setting raises ``ValueError`` (a setup error)."""
    settings = IsolationSettings.from_mapping(bench_setting(profile, options, f"{spec.name}.isolate", {}) or {})
    rails = [str(r) for r in bench_setting(profile, options, f"{spec.name}.rails", []) or []]
    layout: Layout = build_layout([(h.name, h.vars) for h in group], rails, leaves)
    ranks = int(spec.ranks_per_host(profile, "group", options))
    timeout = float(bench_setting(profile, options, f"{spec.name}.timeout_s", DEFAULTS.bench_job_timeout_s))
    return [Trail(spec.name, test, profile.name, layout, settings, ranks, timeout)
            for test in spec.tests(profile, options)]


def run_isolation(trail: Trail, run_jobs: Callable[[list[Job]], list[JobOutcome]],
                  passed: Callable[[JobOutcome], bool]) -> list[JobOutcome]:
    """Every round of one isolation, launched; returns the jobs' outcomes in run order."""
    done: list[JobOutcome] = []

    def run_round(probes: Sequence[Any]) -> list[bool]:
        jobs = [probe_job(trail, p) for p in probes]
        outcomes = {o.job.job_id: o for o in run_jobs(jobs)}
        done.extend(outcomes.values())
        return [passed(outcomes[j.job_id]) for j in jobs]

    drive(trail.layout, trail.settings, run_round)
    return done


def write_trails(run_dir: Path, trails: Sequence[Trail]) -> None:
    path = Path(run_dir) / TRAILS
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"schema": SCHEMA, "isolations": [t.to_json() for t in trails]}, indent=1) + "\n")
    tmp.replace(path)


def read_trails(run_dir: Path) -> tuple[list[Trail], list[str]]:
    """The trails of a run directory or bundle (none when it has no isolation), and why any is unusable."""
    path = Path(run_dir) / TRAILS
    if not path.exists() and not path.is_symlink():
        return [], []
    try:
        doc = json.loads(read_regular(path)[0].decode("utf-8"))
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("isolations"), list):
            raise ValueError(f"not a {SCHEMA} document")
    except (BundleFileError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        return [], [f"{TRAILS} unusable ({type(exc).__name__}: {exc}): the isolation cannot be replayed"]
    trails, problems = [], []
    for i, entry in enumerate(doc["isolations"]):
        try:
            trails.append(Trail.from_json(entry))
        except (ValueError, TypeError) as exc:
            problems.append(f"{TRAILS} isolation {i} unusable: {exc}")
    return trails, problems
