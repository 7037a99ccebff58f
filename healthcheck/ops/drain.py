"""Which nodes to take out of service, and why: findings -> drain decisions, with a circuit breaker.

    results = load_results(Path("runs/20261122T031500Z"))
    plan = plan_drain(results, DrainPolicy(), node_names={"gpu001": "gpu-a-001"})
    plan.decisions[0].reason   # "healthcheck: FAIL gpu.ecc.dbe gpu3=2 (+1 more) run=20261122T031500Z"
    plan.breaker.allowed       # False when too much of the fleet would go, or the run looks broken

Pure: no scheduler, no I/O. ``healthcheck.ops.schedulers`` turns decisions into ``scontrol`` or
``kubectl`` argv lists and checks reason ownership against the scheduler's current state.

A host is drained when it has a *triggering* finding, decided by data only, never by the words of a
message or remedy: its status is in ``policy.statuses`` (FAIL by default; ERROR when asked; WARN never:
``DRAINING_STATUSES``), its check is allowed by ``policy.checks`` and not excluded by ``policy.ignore``
(shell-style globs on check ids), it is not observe-only (the profile's ``observe``), and it is not
advisory: ``ADVISORY_CHECKS`` (``fleet.*``: a version that differs from the majority, fixed by a
rollout; ``history.*``, ``offender.*``: what the history says of a failure already graded; ``merge.*``,
``replay.*``: what the bundle did, not what the node is) never trigger unless ``policy.checks`` names
them or ``policy.advisory`` is emptied. A host "now passes" (may be resumed) when it has no triggering
finding and its verdict is neither FAIL nor ERROR: an unreachable host has proven nothing.

The fleet the breaker counts is the inventory's or the scheduler's (``healthcheck.ops.fleet``): hosts
of the run outside it (``known_hosts``) are listed in ``plan.unknown`` and neither counted nor drained.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import Finding, Status
from healthcheck.store.results import RunResults
from healthcheck.transport.slurm_nodes import REASON_PREFIX

REASON_MAX_CHARS = 160
DRAINING_STATUSES = frozenset({Status.FAIL, Status.ERROR})  # WARN, SKIP and PASS never take a node out
ADVISORY_CHECKS = ("fleet.*", "history.*", "offender.*", "merge.*", "replay.*")
_UNSAFE = re.compile(r"[\x00-\x1f\x7f\"'`\\$]+")


@dataclass(frozen=True)
class DrainPolicy:
    """What makes a host drain-worthy. Globs match check ids (``xid.*``, ``gpu.ecc.*``)."""

    statuses: frozenset[Status] = frozenset({Status.FAIL})
    checks: tuple[str, ...] = ()          # empty: every check may trigger
    ignore: tuple[str, ...] = ()          # never trigger, whatever the status
    advisory: tuple[str, ...] = ADVISORY_CHECKS  # never trigger unless ``checks`` names them explicitly

    def __post_init__(self) -> None:
        wrong = sorted(s.value for s in self.statuses - DRAINING_STATUSES)
        if wrong:
            raise ValueError(f"{', '.join(wrong)} never drains a node (only FAIL, and ERROR when asked): "
                             "a warning is not a fault (docs/drain.md)")


@dataclass(frozen=True)
class DrainDecision:
    """One host to take out: ``node`` is its scheduler name, ``findings`` the triggering ones, worst first."""

    host: str
    node: str
    reason: str
    findings: tuple[Finding, ...]
    run_id: str = ""

    @property
    def categories(self) -> tuple[str, ...]:
        """Categories of the triggering findings (``gpu``, ``nvlink``), sorted, for taints."""
        return tuple(sorted({f.category for f in self.findings}))


@dataclass(frozen=True)
class BreakerVerdict:
    """Whether the plan may be applied; ``reasons`` says why not (empty when allowed)."""

    allowed: bool
    reasons: tuple[str, ...] = ()
    limit: int = 0
    fleet_size: int = 0
    already_out: tuple[str, ...] = ()    # nodes already drained or down, counted against the limit


@dataclass(frozen=True)
class DrainPlan:
    run_id: str
    decisions: tuple[DrainDecision, ...]
    passing: tuple[str, ...]              # hosts that now pass: resume candidates
    breaker: BreakerVerdict
    node_names: Mapping[str, str] = field(default_factory=dict)
    unknown: tuple[str, ...] = ()         # hosts of the run the fleet does not know: not counted, not drained

    def node(self, host: str) -> str:
        return self.node_names.get(host, host)


def triggers(finding: Finding, policy: DrainPolicy) -> bool:
    """True when ``finding`` alone is reason enough to drain its host (never for an observe-only check)."""
    if finding.observe:
        return False
    if any(fnmatch.fnmatchcase(finding.check, g) for g in policy.ignore):
        return False
    named = any(fnmatch.fnmatchcase(finding.check, g) for g in policy.checks)
    if policy.checks and not named:
        return False
    if not named and any(fnmatch.fnmatchcase(finding.check, g) for g in policy.advisory):
        return False
    return finding.status in policy.statuses


def worst_first(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (-f.status.rank, f.check, f.component))


def build_reason(findings: Iterable[Finding], run_id: str = "", max_chars: int = REASON_MAX_CHARS) -> str:
    """``healthcheck: FAIL gpu.ecc.dbe gpu3=2; WARN xid.79 node (+3 more) run=ID``, one line.

    Worst findings first, as many as fit; quotes, backslashes, ``$`` and control characters are
    replaced so the reason is safe to print and to pass through a remote shell.
    """
    ordered = worst_first(findings)
    tail = f" run={_clean(run_id)}" if run_id else ""
    parts: list[str] = []
    for text in (_clean(_describe(f)) for f in ordered):
        rest = len(ordered) - len(parts) - 1
        trial = f"{REASON_PREFIX} " + "; ".join([*parts, text]) + (f" (+{rest} more)" if rest else "") + tail
        if parts and len(trial) > max_chars:
            break
        parts.append(text)
    rest = len(ordered) - len(parts)
    body = "; ".join(parts) + (f" (+{rest} more)" if rest else "") if parts else "no findings"
    reason = f"{REASON_PREFIX} {body}{tail}"
    return reason if len(reason) <= max_chars else reason[: max_chars - 3] + "..."


def _describe(f: Finding) -> str:
    where = "" if f.component in ("", "node") else f" {f.component}"
    value = "" if f.value is None else f"={str(f.value)[:24]}{f.unit or ''}".replace(" ", "")
    return f"{f.status.value} {f.check}{where}{value}"


def _clean(text: str) -> str:
    return " ".join(_UNSAFE.sub(" ", text).split())


def passes(findings: Iterable[Finding], policy: DrainPolicy) -> bool:
    """A host now passes: it has findings, none triggers, and none is FAIL or ERROR, apart from
    advisory or ignored checks (which would not drain it either)."""
    findings = list(findings)
    return bool(findings) and not any(
        triggers(f, policy) or (f.status in (Status.FAIL, Status.ERROR) and not _exempt(f, policy))
        for f in findings)


def _exempt(finding: Finding, policy: DrainPolicy) -> bool:
    """An ignored check, or an advisory one that ``policy.checks`` does not name."""
    def matches(globs: tuple[str, ...]) -> bool:
        return any(fnmatch.fnmatchcase(finding.check, g) for g in globs)
    return matches(policy.ignore) or (matches(policy.advisory) and not matches(policy.checks))


def plan_drain(results: RunResults, policy: DrainPolicy | None = None, *,
               node_names: Mapping[str, str] | None = None, fleet_size: int | None = None,
               known_hosts: Collection[str] | None = None,
               max_fraction: float = DEFAULTS.drain_max_fraction,
               broken_fraction: float = DEFAULTS.drain_broken_run_fraction) -> DrainPlan:
    """Decisions for every drain-worthy host, the passing hosts, and the breaker's verdict.

    ``known_hosts``: the hosts of the fleet (``healthcheck.ops.fleet``); the run's other hosts are
    ``unknown``: listed, never decided on, never counted. ``fleet_size`` defaults to the number of
    known hosts in the run; pass the fleet's size when the run covered part of it.
    """
    policy = policy or DrainPolicy()
    names = dict(node_names or {})
    run_id = str(results.run.get("id") or "")
    known = sorted(results.hosts) if known_hosts is None else sorted(set(results.hosts) & set(known_hosts))
    decisions = []
    passing = []
    for name in known:
        findings = results.hosts[name].findings
        bad = [f for f in findings if triggers(f, policy)]
        if bad:
            decisions.append(DrainDecision(host=name, node=names.get(name, name),
                                           reason=build_reason(bad, run_id),
                                           findings=tuple(worst_first(bad)), run_id=run_id))
        elif passes(findings, policy):
            passing.append(name)
    breaker = check_breaker(_counted(results, known), len(decisions), fleet_size or len(known),
                            max_fraction, broken_fraction)
    return DrainPlan(run_id=run_id, decisions=tuple(decisions), passing=tuple(passing), breaker=breaker,
                     node_names=names, unknown=tuple(sorted(set(results.hosts) - set(known))))


def _counted(results: RunResults, hosts: Collection[str]) -> RunResults:
    """``results`` restricted to ``hosts`` (the breaker judges the run by the fleet's hosts only)."""
    if len(hosts) == len(results.hosts):
        return results
    return dataclasses.replace(results, hosts={h: results.hosts[h] for h in hosts})


def with_fleet_state(plan: DrainPlan, results: RunResults, out_of_service: Collection[str], *,
                     max_fraction: float = DEFAULTS.drain_max_fraction,
                     broken_fraction: float = DEFAULTS.drain_broken_run_fraction) -> DrainPlan:
    """``plan`` with its breaker re-checked against the nodes the scheduler already has out of
    service (drained or down, by us or by anyone; scheduler node names): they count against the
    limit with the new ones, so nightly runs draining a few nodes each never add up to half the fleet."""
    new = {d.node for d in plan.decisions}
    already = sorted(set(out_of_service) - new)
    counted = _counted(results, [h for h in results.hosts if h not in plan.unknown])
    breaker = _fleet_breaker(counted, len(new), plan.breaker.fleet_size, max_fraction, broken_fraction, already)
    return dataclasses.replace(plan, breaker=breaker)


def _fleet_breaker(results: RunResults, to_drain: int, fleet_size: int, max_fraction: float,
                   broken_fraction: float, already_out: Collection[str]) -> BreakerVerdict:
    if not already_out:
        return check_breaker(results, to_drain, fleet_size, max_fraction, broken_fraction)
    base = check_breaker(results, 0, fleet_size, max_fraction, broken_fraction)
    limit, out = base.limit, len(already_out)
    reasons = list(base.reasons)
    if to_drain and out + to_drain > limit:
        shown = ", ".join(sorted(already_out)[:8]) + (f" and {out - 8} more" if out > 8 else "")
        reasons.append(f"{to_drain} new + {out} already out of service ({shown}: drained or down, by "
                       f"healthcheck or anyone) = {out + to_drain} nodes exceeds the limit of {limit} "
                       f"({max_fraction:.0%} of a fleet of {fleet_size}); resume the repaired nodes first, "
                       f"or check whether the fault is the fabric, the software or the test")
    return BreakerVerdict(allowed=not reasons, reasons=tuple(reasons), limit=limit, fleet_size=fleet_size,
                          already_out=tuple(sorted(already_out)))


def drain_limit(fleet_size: int, max_fraction: float) -> int:
    """Most nodes drained in one go: ``floor(fraction * fleet)``, but at least one."""
    return max(1, math.floor(max_fraction * fleet_size + 1e-9))


def check_breaker(results: RunResults, to_drain: int, fleet_size: int,
                  max_fraction: float = DEFAULTS.drain_max_fraction,
                  broken_fraction: float = DEFAULTS.drain_broken_run_fraction) -> BreakerVerdict:
    """Refuse a plan that would drain too much of the fleet, or that comes from a broken run
    (``with_fleet_state`` adds the nodes already out of service)."""
    reasons = []
    hosts = len(results.hosts)
    errors = sum(1 for h in results.hosts.values() if h.verdict is Status.ERROR)
    limit = drain_limit(fleet_size, max_fraction)
    if hosts == 0:
        reasons.append("the run has no hosts: nothing was checked")
    elif errors / hosts >= broken_fraction:
        reasons.append(f"the run looks broken: {errors} of {hosts} hosts are ERROR "
                       f"(>= {broken_fraction:.0%}; a bad SSH key, an unreachable network or a bad "
                       f"profile?); fix the run, not the nodes")
    if to_drain > limit:
        reasons.append(f"{to_drain} nodes to drain exceeds the limit of {limit} "
                       f"({max_fraction:.0%} of a fleet of {fleet_size}); a fault this wide is "
                       f"more likely the fabric, the software or the test than the nodes")
    return BreakerVerdict(allowed=not reasons, reasons=tuple(reasons), limit=limit, fleet_size=fleet_size)
