"""Repeat offenders: the same part failing the same check on N of the last M runs, escalated. Pure.

    current = failure_keys(results)                       # {(host, check, component): Finding}
    offenders = repeat_offenders(current, past, min_failures=3, window=5)
    offender_findings(offenders, window=5)                # FAIL offender.repeat, "RMA candidate: gpu3 ..."

``past`` are the previous recorded runs, newest first: ``PastRun(run_id, failed keys, hosts present)``
(``healthcheck.ops.history.HistoryIndex.recent_failures``). A key is one (host, check id, component): a
node that logs the same Xid 800,000 times is one key in one run (the xid probe already folds identical
events into one finding with a count), so identical events are counted once per run, never repeated.
Only FAIL findings count; ``history.*`` and ``offender.*`` findings and observe-only findings do not.
The current run must fail the key too: a part that failed four nights ago and passes now is not escalated.
A run in which the host was not swept does not count towards M for that host.

Check id: ``offender.repeat`` (FAIL), one per recurring (host, check, component).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from healthcheck.core.model import Finding, Status
from healthcheck.store.results import RunResults

Key = tuple[str, str, str]   # (host, check id, component)
NOT_COUNTED = ("history.", "offender.")


@dataclass(frozen=True)
class PastRun:
    run_id: str
    failed: frozenset[Key]
    hosts: frozenset[str]


@dataclass(frozen=True)
class Offender:
    host: str
    check: str
    component: str
    failures: int                # runs in the window that failed this key, the current one included
    runs: int                    # runs in the window in which the host was swept
    run_ids: tuple[str, ...]     # the failing runs, newest first
    message: str                 # the current finding's message

    def to_json(self) -> dict[str, object]:
        return {"host": self.host, "check": self.check, "component": self.component, "failures": self.failures,
                "runs": self.runs, "run_ids": list(self.run_ids), "message": self.message}


def counted(f: Finding) -> bool:
    return f.status is Status.FAIL and not f.check.startswith(NOT_COUNTED) and not getattr(f, "observe", False)


def failure_keys(results: RunResults) -> dict[Key, Finding]:
    """The FAIL keys of a run, each once (the first finding of that key)."""
    out: dict[Key, Finding] = {}
    for host in results.hosts.values():
        for f in host.findings:
            if counted(f):
                out.setdefault((f.host, f.check, f.component or "node"), f)
    return out


def repeat_offenders(current: Mapping[Key, Finding], past: Sequence[PastRun], run_id: str,
                     min_failures: int, window: int) -> list[Offender]:
    """Keys failing now and on at least ``min_failures`` of the host's last ``window`` runs."""
    out = []
    for key in sorted(current):
        host = key[0]
        runs = [r for r in past if host in r.hosts][:max(window - 1, 0)]
        failing = [run_id] + [r.run_id for r in runs if key in r.failed]
        if len(failing) >= min_failures:
            out.append(Offender(host=host, check=key[1], component=key[2], failures=len(failing),
                                runs=len(runs) + 1, run_ids=tuple(failing), message=current[key].message))
    return out


def offender_findings(offenders: Sequence[Offender], min_failures: int, window: int) -> list[Finding]:
    out = []
    for o in offenders:
        part = o.component != "node"
        label = "RMA candidate" if part else "Repeat offender"
        where = f"{o.component} " if part else ""
        out.append(Finding(
            host=o.host, check="offender.repeat", component=o.component, status=Status.FAIL, value=o.failures,
            expected=f"fewer than {min_failures} failing runs of the last {window}", unit="runs", source="history",
            message=f"{label}: {where}{o.check} failing on {o.failures} of the last {o.runs} runs "
                    f"({', '.join(o.run_ids[:5])}); now: {o.message}",
            remedy=(f"The same fault keeps coming back on {o.component}: stop resetting it and open a hardware "
                    "ticket / RMA for that part, with the evidence of these runs" if part else
                    "The same fault keeps coming back on this node after every repair or reboot: escalate it "
                    "to hardware inspection instead of another reboot")))
    return out
