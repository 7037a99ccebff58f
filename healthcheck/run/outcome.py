"""How a run ended: its outcome, how its sweep ended, and the hosts it never swept.

    end = SweepEnd(interrupted=True)
    not_swept(hosts, results, log, "the run was interrupted (SIGTERM)", in_flight={"gpu007"})

A host the sweep never finished gets exactly one ``host.swept`` ERROR saying why, built here for
every kind of sweep (live, replay).
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from healthcheck.core.model import Finding, Host, Status
from healthcheck.store.results import HostResult, RunResults
from healthcheck.store.rundir import FindingsLog


@dataclass
class RunOutcome:
    run_dir: Path
    results: RunResults
    report_error: str | None = None
    interrupted: bool = False
    signal: str | None = None             # the first SIGINT/SIGTERM, also one that came while results were written
    fatal: str | None = None              # the run directory became unwritable: the sweep stopped


@dataclass(frozen=True)
class SweepEnd:
    interrupted: bool = False
    fatal: str | None = None              # why the sweep stopped early (run directory unwritable)


def append_findings(log: FindingsLog, findings: Sequence[Finding]) -> None:
    """Append to ``findings.jsonl``; a failure is not fatal here: the findings are in memory and reach
    results.json."""
    with contextlib.suppress(OSError):
        log.append(findings)


def not_swept(hosts: Sequence[Host], results: dict[str, HostResult], log: FindingsLog, why: str,
              in_flight: Collection[str] = ()) -> None:
    """One ``host.swept`` ERROR for each host of ``hosts`` without a result, saying ``why``."""
    for host in hosts:
        if host.name in results:
            continue
        when = ("while this host was in flight; its outputs were not kept" if host.name in in_flight
                else "before this host started")
        results[host.name] = HostResult(name=host.name, profile=host.profile, group=host.group, findings=[
            Finding(host=host.name, check="host.swept", status=Status.ERROR, expected="swept",
                    message=f"not swept: {why} {when}",
                    remedy="Rerun the sweep (--limit with the hosts left out)")])
        append_findings(log, results[host.name].findings)
