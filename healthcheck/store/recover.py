"""Results of a run that never wrote (or damaged) its ``results.json``: rebuilt from what it left.

    results, note = load_or_rebuild(Path("runs/20261122T031500Z"))   # note says when it was rebuilt

A live sweep killed with SIGKILL (OOM killer, ``kill -9``, a node reboot) leaves ``manifest.json``,
``raw/`` and ``findings.jsonl``, its crash journal, appended as each host completed. A finished run has
no journal (its findings are in the findings table) but may have lost results.json afterwards: then the
findings table is read instead. The hosts the manifest lists but the journal or table does not are
ERROR ``host.swept``: nothing checked is never PASS (a replay keeps no journal: every host of a killed
replay is ``host.swept``, and replaying its bundle again is the way back). Observations are in neither,
so a rebuilt run has findings only (replay the run directory to get them back).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from healthcheck.core.model import Finding, Status
from healthcheck.store.bundle import read_manifest_hosts
from healthcheck.store.findings_table import TABLE, TableError, read_table
from healthcheck.store.results import HostResult, RunResults, load_results
from healthcheck.store.rundir import JOURNAL, FindingsLog, RunDirError
from healthcheck.store.safeio import BundleFileError, read_regular


def rebuild_results(run_dir: Path) -> RunResults:
    """``RunResults`` from ``findings.jsonl`` (else the findings table) and the manifest's host list."""
    findings, source = _recorded_findings(Path(run_dir))
    try:
        listed = read_manifest_hosts(run_dir) or []
    except RunDirError:
        listed = []
    if source is None and not listed:
        raise RunDirError(f"{run_dir} has neither a readable results.json, {JOURNAL} nor {TABLE}: "
                          "not a run directory")
    hosts: dict[str, HostResult] = {h.name: HostResult(name=h.name, profile=h.profile, group=h.group,
                                                       address=h.address) for h in listed}
    for finding in findings:
        hosts.setdefault(finding.host, HostResult(name=finding.host)).findings.append(finding)
    replay = source is None and _manifest_mode(run_dir) == "replay"
    for name, result in hosts.items():
        if not result.findings:
            result.findings.append(_not_graded(name, replay))
    run = {"id": Path(run_dir).name, "interrupted": True, "rebuilt_from": source or "manifest.json"}
    return RunResults(run=run, hosts=hosts)


def _recorded_findings(run_dir: Path) -> tuple[Iterable[Finding], str | None]:
    """The journal's findings, else the findings table's, and which file they came from (None: neither)."""
    log = FindingsLog(run_dir)
    if log.path.is_file():
        return log.read(), JOURNAL
    try:
        table = read_table(run_dir)
    except TableError:
        return [], None
    return [f for host in table.values() for f in host], TABLE


def _manifest_mode(run_dir: Path) -> str | None:
    try:
        doc = json.loads(read_regular(Path(run_dir) / "manifest.json")[0].decode("utf-8"))
    except (BundleFileError, OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    return doc.get("mode") if isinstance(doc, dict) else None


def _not_graded(name: str, replay: bool) -> Finding:
    remedy = ("Replay the bundle again (a replay keeps no journal: its bundle is its input)" if replay else
              "Rerun the sweep for this host (--limit), or replay the run directory")
    return Finding(host=name, check="host.swept", status=Status.ERROR, expected="swept",
                   message="not graded: the run ended (killed) before this host's findings were written",
                   remedy=remedy)


def load_or_rebuild(run_dir: Path) -> tuple[RunResults, str | None]:
    """``results.json`` when it is readable, else the results rebuilt (``rebuild_results``) and a note
    saying so (``RunDirError`` when there is nothing to rebuild from)."""
    try:
        return load_results(run_dir), None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        why = "missing" if isinstance(exc, FileNotFoundError) else f"unreadable ({type(exc).__name__}: {exc})"
    results = rebuild_results(run_dir)
    return results, (f"results.json {why}: rebuilt from {results.run['rebuilt_from']} ({len(results.hosts)} hosts; "
                      "the run did not finish, observations are not included)")
