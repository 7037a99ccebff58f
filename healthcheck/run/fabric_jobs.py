"""Fabric counters before and after each multi-node benchmark job, stored and graded (issue 33).

    outcome = around_job(run_dir, job, hosts, transport, options, lambda: launch(job))
    findings, observations = merge_fabric(run_dir, hosts, profiles, findings, observations)  # also on replay

Each host of a job of two or more hosts runs ``probes.fabric_jobs.SNAPSHOT`` (the ib-sysfs dump and
``ethtool -S`` of its RoCE netdevs) right before and right after the launch; the outputs are stored as
``raw/_fabric/<job_id>/<host>.before.out`` / ``.after.out`` with ``<host>.json`` (job, seconds between
the snapshots, errors), so a replay grades the same deltas; a snapshot is the host its file names, and
only the run's hosts are graded. Each host gets a ``fabric_jobs`` observation: per job the counters that
moved (before, after, growth, per GB), for the report. Off with the run option
``fabric_counters=False``. A snapshot that failed or cannot be parsed is a WARN naming host and job,
never a silent gap.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from healthcheck.benchmarks.grade import check_base, profile_for
from healthcheck.benchmarks.plan import Job
from healthcheck.core.model import CommandResult, Finding, Host, Status
from healthcheck.core.profiles import Profile
from healthcheck.core.spec import ParseError
from healthcheck.probes.fabric_jobs import SNAPSHOT, grade_job_deltas, moved_rows, parse_snapshot, port_deltas

FABRIC_DIR = "raw/_fabric"
SNAPSHOT_TIMEOUT_S = 60.0
T = TypeVar("T")


def fabric_on(job: Job, options: Mapping[str, Any]) -> bool:
    return bool(options.get("fabric_counters", True)) and len(job.hosts) >= 2


def around_job(run_dir: Path, job: Job, hosts: Mapping[str, Host], transport: Any, options: Mapping[str, Any],
               launch: Callable[[], T]) -> T:
    """``launch()`` between two counter snapshots of every host of ``job``; both stored; launch()'s value."""
    if not fabric_on(job, options):
        return launch()
    nodes = [hosts.get(name, Host(name)) for name in job.hosts]
    before = _snapshots(transport, nodes, f"fabric-before-{job.job_id}")
    clock = time.monotonic()
    try:
        return launch()
    finally:
        seconds = time.monotonic() - clock
        after = _snapshots(transport, nodes, f"fabric-after-{job.job_id}")
        for node in nodes:
            _store(run_dir, job, node.name, before[node.name], after[node.name], seconds)


def _snapshots(transport: Any, nodes: Sequence[Host], command_id: str) -> dict[str, CommandResult]:
    with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
        futures = {n.name: pool.submit(transport.run, n, SNAPSHOT, SNAPSHOT_TIMEOUT_S, command_id) for n in nodes}
        return {name: future.result() for name, future in futures.items()}


def _store(run_dir: Path, job: Job, host: str, before: CommandResult, after: CommandResult, seconds: float) -> None:
    folder = Path(run_dir) / FABRIC_DIR / job.job_id
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{host}.before.out").write_bytes(before.stdout)
    (folder / f"{host}.after.out").write_bytes(after.stdout)
    errors = {side: r.transport_error or (f"exit {r.rc}" if r.rc not in (0, None) else None)
              for side, r in (("before", before), ("after", after))}
    meta = {"job": job.to_json(), "host": host, "window_s": round(seconds, 3), "errors": errors}
    (folder / f"{host}.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")


def merge_fabric(run_dir: Path, hosts: Sequence[Host], profiles: Mapping[str, Profile], findings: list[Finding],
                 observations: dict[str, dict[str, Any]]) -> tuple[list[Finding], dict[str, dict[str, Any]]]:
    """``findings`` plus the graded deltas of every stored job (the run's hosts only), and ``observations``
    with each host's ``fabric_jobs``: ``{"jobs": [{"job_id", "check", "window_s", "ports", "rows"}]}``."""
    by_name = {h.name: h for h in hosts}
    root = Path(run_dir) / FABRIC_DIR
    out = list(findings)
    for folder in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else ():
        graded, views = _grade_folder(folder, by_name, profiles)
        out += graded
        for host, view in views.items():
            observations.setdefault(host, {}).setdefault("fabric_jobs", {"jobs": []})["jobs"].append(view)
    return out, observations


def _grade_folder(folder: Path, hosts: Mapping[str, Host],
                  profiles: Mapping[str, Profile]) -> tuple[list[Finding], dict[str, dict[str, Any]]]:
    by_host, moved, problems, job, seconds = {}, {}, [], None, 0.0
    for meta_path in sorted(folder.glob("*.json")):
        try:
            meta = json.loads(meta_path.read_text())
            job = job or Job.from_json(meta["job"])
            host = meta_path.stem  # the file's name, never a field inside it (a replayed bundle is untrusted)
            seconds = max(seconds, float(meta.get("window_s") or 0.0))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            problems.append(("?", f"{meta_path.name}: {exc}"))
            continue
        if host not in hosts:
            continue
        try:
            before = parse_snapshot((folder / f"{host}.before.out").read_text(errors="replace"))
            after = parse_snapshot((folder / f"{host}.after.out").read_text(errors="replace"))
        except (OSError, ParseError) as exc:
            why = "; ".join(f"{side}: {e}" for side, e in (meta.get("errors") or {}).items() if e) or str(exc)
            problems.append((host, why))
            continue
        by_host[host] = port_deltas(before, after)
        moved[host] = moved_rows(before, after, by_host[host])
    if job is None:
        return [], {}
    base = check_base(job)
    profile = profile_for(hosts.get(job.hosts[0], Host(job.hosts[0])), profiles)
    out = grade_job_deltas(base, job.job_id, by_host, seconds, profile)
    out += [Finding(host=host, check=f"{base}.fabric", component=job.job_id, status=Status.WARN,
                    source="fabric-snapshot", message=f"fabric counters around job {job.job_id} not read: {why}",
                    remedy="Look at raw/_fabric/<job>/ for the snapshots; the job itself is graded apart")
            for host, why in problems if host in hosts]
    views = {host: {"job_id": job.job_id, "check": base, "window_s": round(seconds, 3), "ports": len(deltas),
                    "rows": moved[host]} for host, deltas in by_host.items()}
    return out, views
