"""A node draining (and resuming) itself in Slurm after a node-local run: HealthCheckProgram / Epilog use.

    outcome = self_drain(findings, host="gpu001", node="gpu001", policy=SelfDrainPolicy())
    outcome.action     # "drain", "refresh", "resume", "none", "left-alone", "refused", "failed"

The ownership rules are those of ``healthcheck drain`` (``healthcheck.ops.schedulers.slurm``): a reason
not starting with ``healthcheck:`` belongs to someone else and is never overwritten or resumed. A
FAIL drains with ``Reason="healthcheck: <check> <component>: <short message>"``; an ERROR of the check
itself (tool hang, missing tool) drains only with ``drain_on_error``; a later clean run (no FAIL, no
ERROR) resumes the node only when the current reason is ours. A circuit breaker (one ``sinfo`` over
the cluster) refuses a new drain when healthcheck already holds ``max_fraction`` of the nodes: a
bad driver rollout must not let every node drain itself. Nothing raises: every outcome is a value.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import Finding, Status
from healthcheck.core.spec import ParseError
from healthcheck.ops.drain import REASON_MAX_CHARS, DrainDecision, DrainPolicy, _clean, passes, triggers
from healthcheck.ops.drain import drain_limit as fleet_drain_limit
from healthcheck.ops.schedulers import NodeRef
from healthcheck.ops.schedulers.controller import Controller, apply_actions, failure_text, read_states
from healthcheck.ops.schedulers.slurm import SLURM
from healthcheck.transport.slurm_nodes import REASON_PREFIX, SlurmStates, parse_sinfo_fleet, sinfo_fleet_argv

RECHECK_AFTER_S = 1.1   # after our drain, before the second look: Slurm stamps reasons to the second


@dataclass(frozen=True)
class SelfDrainPolicy:
    drain_on_error: bool = False          # also drain when a check could not be evaluated (ERROR)
    max_fraction: float = DEFAULTS.drain_max_fraction

    @property
    def drain_policy(self) -> DrainPolicy:
        statuses = {Status.FAIL} | ({Status.ERROR} if self.drain_on_error else set())
        return DrainPolicy(statuses=frozenset(statuses))


@dataclass(frozen=True)
class SelfDrainOutcome:
    action: str     # drain | refresh | resume | none | left-alone | refused | failed
    note: str
    reason: str = ""


def self_reason(findings: Sequence[Finding]) -> str:
    """``healthcheck: gpu.row_remap.pending gpu2: 1 row remap pending (+2 more)``: the first triggering
    finding, cleaned of quotes, ``$`` and control characters, at most 160 characters."""
    first = findings[0]
    where = "" if first.component in ("", "node") else f" {first.component}"
    more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
    head = _clean(f"{REASON_PREFIX} {first.check}{where}: {first.message}")
    if len(head) + len(more) > REASON_MAX_CHARS:
        head = head[: REASON_MAX_CHARS - len(more) - 3] + "..."
    return head + more


def self_drain(findings: Sequence[Finding], host: str, node: str, policy: SelfDrainPolicy,
               controller: Controller | None = None, recheck_after_s: float = RECHECK_AFTER_S) -> SelfDrainOutcome:
    """Drain, refresh, resume or leave ``node`` according to this run's ``findings``."""
    controller = controller or Controller()
    rules = policy.drain_policy
    bad = [f for f in findings if triggers(f, rules)]
    if not bad and not passes(findings, rules):
        return SelfDrainOutcome("none", "not drained, not resumed: the run has ERROR findings "
                                "(the checks could not judge the node; --drain-on-error drains on them)")
    states, error = read_states(SLURM, controller, [node])
    if states is None:
        return SelfDrainOutcome("refused", f"cannot read the node's Slurm state ({error}): reason ownership "
                                "unchecked, nothing changed")
    current = states.nodes.get(node)
    if current is None:
        return SelfDrainOutcome("refused", f"Slurm does not know node {node} (give --slurm-node)")
    held: frozenset[str] = frozenset()
    if bad:
        reason = self_reason(bad)
        if current.ours and current.drained and current.reason == reason:
            return SelfDrainOutcome("none", f"already drained by healthcheck ({current.state})", reason)
        if current.reason and not current.ours:
            return SelfDrainOutcome("left-alone", f"{current.state} with someone else's reason "
                                    f"{current.reason!r} (set by {current.reason_user or '?'})", reason)
        if not current.ours:
            held, refusal = _breaker(controller, node, policy.max_fraction)
            if refusal:
                return SelfDrainOutcome("refused", refusal, reason)
        actions = SLURM.drain_actions([DrainDecision(host=host, node=node, reason=reason,
                                                     findings=tuple(bad))], states)
        kind = "refresh" if current.ours else "drain"
    else:
        reason = ""
        unchecked = _unchecked_category(current.reason, findings) if current.ours else None
        if unchecked is not None:
            return SelfDrainOutcome("left-alone", f"drained by healthcheck for {unchecked} ({current.reason!r}), "
                                    f"which this run did not check: left for a run that checks it")
        actions = SLURM.resume_actions([NodeRef(host, node)], states)
        if not actions:
            return SelfDrainOutcome("none", f"passes; {current.state}, nothing to resume")
        kind = "resume"
    action = actions[0]
    if action.skipped:
        return SelfDrainOutcome("left-alone", action.note, reason)
    outcomes = apply_actions([action], controller)
    if outcomes and outcomes[0].error is not None:
        return SelfDrainOutcome("failed", f"{action.commands[0]}: {outcomes[0].error}", reason)
    if kind == "drain":
        time.sleep(recheck_after_s)
        return _recheck(controller, host, node, reason, policy.max_fraction, held, action.note)
    return SelfDrainOutcome(kind, action.note, reason)


def reason_check(reason: str) -> str | None:
    """The check id an ours reason names: ``healthcheck: <check> <component>: ...`` (self-drain) or
    ``healthcheck: FAIL <check> ...`` (``healthcheck drain``); None when it names none."""
    tokens = reason[len(REASON_PREFIX):].split() if reason.startswith(REASON_PREFIX) else []
    if tokens and tokens[0] in {s.value for s in Status}:
        tokens = tokens[1:]
    return tokens[0].split("=")[0].rstrip(":;") if tokens else None


def _unchecked_category(reason: str, findings: Sequence[Finding]) -> str | None:
    """The category of the reason's check when no finding of this run has that category, else None."""
    check = reason_check(reason)
    if not check:
        return None
    category = check.split(".", 1)[0]
    return None if any(f.category == category for f in findings) else check


def _fleet(controller: Controller) -> tuple[SlurmStates | None, str | None]:
    """Every node of the cluster with state, reason and reason time, or (None, why)."""
    result = controller.run(sinfo_fleet_argv(), command_id="slurm-sinfo")
    why = failure_text(result)
    if why is not None:
        return None, f"sinfo: {why}"
    try:
        return parse_sinfo_fleet(result.text), None
    except ParseError as exc:
        return None, f"cannot read sinfo ({exc})"


def _ours_drained(states: SlurmStates, node: str) -> list[str]:
    return sorted(n for n, s in states.nodes.items() if n != node and s.ours and s.drained)


def _breaker(controller: Controller, node: str, max_fraction: float) -> tuple[frozenset[str], str | None]:
    """The nodes healthcheck holds drained now, and why a new self-drain is refused (None: allowed)."""
    states, why = _fleet(controller)
    if states is None:
        return frozenset(), f"circuit breaker: cannot count drained nodes ({why}); nothing changed"
    ours = _ours_drained(states, node)
    limit = fleet_drain_limit(max(1, len(states.nodes)), max_fraction)
    if len(ours) + 1 > limit:
        return frozenset(ours), (
            f"circuit breaker: healthcheck already drained {len(ours)} of {len(states.nodes)} nodes "
            f"({_names(ours)}); draining {node} too would exceed {limit} ({max_fraction:.0%}); a fault this "
            "wide is more likely the software than the nodes")
    return frozenset(ours), None


def _recheck(controller: Controller, host: str, node: str, reason: str, max_fraction: float,
             held: Collection[str], note: str) -> SelfDrainOutcome:
    """The second look after our drain: keep it when the nodes ahead of ours leave room, else resume."""
    states, why = _fleet(controller)
    mine = states.nodes.get(node) if states is not None else None
    if states is None or mine is None or not (mine.ours and mine.drained and mine.reason == reason):
        return SelfDrainOutcome("drain", f"{note}; circuit breaker not re-checked "
                                f"({why or 'the reason changed since'})", reason)
    key = (mine.reason_time, node)
    ahead = [n for n in _ours_drained(states, node) if (states.nodes[n].reason_time, n) < key or n in held]
    limit = fleet_drain_limit(max(1, len(states.nodes)), max_fraction)
    if len(ahead) + 1 <= limit:
        return SelfDrainOutcome("drain", note, reason)
    undo = apply_actions(SLURM.resume_actions([NodeRef(host, node)], states), controller)
    if not undo or undo[0].error is not None:
        return SelfDrainOutcome("failed", f"circuit breaker: {node} is over the limit of {limit} but could not "
                                f"be resumed ({undo[0].error if undo else 'no resume action'})", reason)
    return SelfDrainOutcome("refused", (
        f"circuit breaker (second look): healthcheck drained {len(ahead)} of {len(states.nodes)} nodes before "
        f"{node} ({_names(ahead)}); {node} would exceed {limit} ({max_fraction:.0%}) and was resumed at once; "
        "a fault this wide is more likely the software than the nodes"), reason)


def _names(nodes: Sequence[str]) -> str:
    return ", ".join(nodes[:5]) + (" ..." if len(nodes) > 5 else "")
