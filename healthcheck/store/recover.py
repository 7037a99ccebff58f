"""Results of a run that never wrote (or damaged) its ``results.json``: rebuilt from ``findings.jsonl``.

    results, note = load_or_rebuild(Path("runs/20261122T031500Z"))   # note says when it was rebuilt

A sweep killed with SIGKILL (OOM killer, ``kill -9``, a node reboot) leaves ``manifest.json``,
``raw/`` and ``findings.jsonl``, appended as each host completed. The hosts the manifest lists but
``findings.jsonl`` does not are ERROR ``host.swept``: nothing checked is never PASS. Observations
are not in ``findings.jsonl``, so a rebuilt run has findings only (replay the run directory to get
them back).
"""

from __future__ import annotations

from pathlib import Path

from healthcheck.core.model import Finding, Status
from healthcheck.store.bundle import read_manifest_hosts
from healthcheck.store.results import HostResult, RunResults, load_results
from healthcheck.store.rundir import FindingsLog, RunDirError


def rebuild_results(run_dir: Path) -> RunResults:
    """``RunResults`` from ``findings.jsonl`` and the manifest's host list."""
    log = FindingsLog(run_dir)
    if not log.path.is_file():
        raise RunDirError(f"{run_dir} has neither a readable results.json nor findings.jsonl: not a run directory")
    try:
        listed = read_manifest_hosts(run_dir) or []
    except RunDirError:
        listed = []
    hosts: dict[str, HostResult] = {h.name: HostResult(name=h.name, profile=h.profile, group=h.group,
                                                       address=h.address) for h in listed}
    for finding in log.read():
        hosts.setdefault(finding.host, HostResult(name=finding.host)).findings.append(finding)
    for name, result in hosts.items():
        if not result.findings:
            result.findings.append(_not_graded(name))
    run = {"id": Path(run_dir).name, "interrupted": True, "rebuilt_from": "findings.jsonl"}
    return RunResults(run=run, hosts=hosts)


def _not_graded(name: str) -> Finding:
    return Finding(host=name, check="host.swept", status=Status.ERROR, expected="swept",
                   message="not graded: the run ended (killed) before this host's findings were written",
                   remedy="Rerun the sweep for this host (--limit), or replay the run directory")


def load_or_rebuild(run_dir: Path) -> tuple[RunResults, str | None]:
    """``results.json`` when it is readable, else the results rebuilt from ``findings.jsonl`` and a
    note saying so (``RunDirError`` when neither exists)."""
    try:
        return load_results(run_dir), None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        why = "missing" if isinstance(exc, FileNotFoundError) else f"unreadable ({type(exc).__name__}: {exc})"
    results = rebuild_results(run_dir)
    return results, (f"results.json {why}: rebuilt from findings.jsonl ({len(results.hosts)} hosts; "
                      "the run did not finish, observations are not included)")
