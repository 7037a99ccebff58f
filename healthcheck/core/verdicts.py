"""The run's two verdict rules, enforced in one place for every entry point.

    findings = nothing_checked(results.hosts)        # host.checked ERROR for hosts with no evidence
    code = run_exit_status(results, strict=False)    # 0 only if every selected host was checked and passed

**Nothing checked is never PASS.** A host's verdict is PASS (or WARN) only if at least one
non-SKIP check ran on real output from that host (``model.is_evidence``); a run exits 0 only if
the selection was not empty and every selected host got such a verdict. ``execute_run`` calls
``nothing_checked`` after probes, benchmarks and fleet checks, so run, replay, bench, sweep and
``--local`` over every transport (local, ssh, slurm, replay) are graded by the same rule.

**A flag is not a fault until the evidence agrees.** Where a tool reports a state flag and a
measurement contradicts it (a clock-event reason with the SM clock at its maximum, a link that
says Down while it carries traffic), the finding states both and is graded by the measurement;
``flag_vs_measurement`` is the one place that decides the status.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from healthcheck.core.model import Finding, Status, host_verdict, is_evidence

CHECK = "host.checked"


class HostResult(Protocol):
    """What the rules read of one host's result (``store.results.HostResult`` is one)."""

    findings: list[Finding]

    @property
    def verdict(self) -> Status: ...


class RunResults(Protocol):
    """What the rules read of a run's results (``store.results.RunResults`` is one)."""

    @property
    def hosts(self) -> Mapping[str, HostResult]: ...

PASSING = (Status.PASS, Status.WARN)


def _why_unchecked(result: HostResult) -> str:
    """What the host's findings say instead of a graded check (skips and errors, shortened)."""
    reasons = [f"{f.check}: {f.message}" for f in result.findings
               if f.status in (Status.SKIP, Status.ERROR) or f.category == "host"]
    if not reasons:
        return "no finding at all"
    shown = "; ".join(" ".join(r.split())[:160] for r in reasons[:4])
    return shown + (f"; ... {len(reasons) - 4} more" if len(reasons) > 4 else "")


def nothing_checked(hosts: Mapping[str, HostResult]) -> list[Finding]:
    """Append a ``host.checked`` ERROR to every host whose findings hold no evidence and no ERROR that
    already says why (and return them).

    A host whose every finding is SKIP (left alone because it runs a job) keeps its SKIP verdict: it
    was deliberately not checked, and ``run_exit_status`` still refuses exit 0 for it."""
    added: list[Finding] = []
    for name, result in hosts.items():
        if any(is_evidence(f) or f.check == CHECK for f in result.findings):
            continue
        if any(f.status is Status.ERROR for f in result.findings):
            continue  # already ERROR, saying why (unreachable: one host.reachable ERROR, no more noise)
        if result.findings and all(f.status is Status.SKIP for f in result.findings):
            continue
        finding = Finding(host=name, check=CHECK, status=Status.ERROR, value=0, unit="checks",
                          expected=">= 1 check graded on output from this host",
                          message=f"nothing was checked on {name}: {_why_unchecked(result)}",
                          remedy="Look at the host's raw outputs (raw/<host>/) and the probe selection "
                                 "(--probes); install the missing tools or collect the outputs, then rerun",
                          source="grading")
        result.findings.append(finding)
        added.append(finding)
    return added


def run_exit_status(results: RunResults, strict: bool) -> int:
    """0 only when the selection was not empty and every host was checked and passed; else 1.

    WARN passes unless ``strict``; a SKIP host (not checked, e.g. busy with a job) never passes."""
    if not results.hosts:
        return 1
    passing = (Status.PASS,) if strict else PASSING
    return 0 if all(host_verdict(h.findings) in passing for h in results.hosts.values()) else 1


def unchecked_hosts(results: RunResults) -> list[str]:
    """Hosts that were not checked at all (SKIP verdict): they keep the exit code from 0."""
    return [name for name, h in results.hosts.items() if h.verdict is Status.SKIP]


def flag_vs_measurement(flag_fault: Status, evidence: bool | None) -> Status:
    """Grade a state flag by the measurement that can confirm it.

    ``flag_fault`` is what the flag alone would mean (FAIL, WARN); ``evidence`` is True when a
    measurement shows the fault (clocks reduced, errors growing, the flag persisting or appearing
    under load), False when a measurement contradicts it, None when there is none. Only a confirmed
    flag keeps a status worse than WARN."""
    if evidence is not True and flag_fault.rank > Status.WARN.rank:
        return Status.WARN
    return flag_fault
