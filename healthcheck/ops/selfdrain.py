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

from collections.abc import Sequence
from dataclasses import dataclass

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import Finding, Status
from healthcheck.core.spec import ParseError
from healthcheck.ops.drain import REASON_MAX_CHARS, DrainDecision, DrainPolicy, _clean, passes, triggers
from healthcheck.ops.drain import drain_limit as fleet_drain_limit
from healthcheck.ops.schedulers import NodeRef
from healthcheck.ops.schedulers.controller import Controller, apply_actions, failure_text, read_states
from healthcheck.ops.schedulers.slurm import SLURM
from healthcheck.transport.slurm_nodes import REASON_PREFIX, parse_sinfo_state_reason


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
               controller: Controller | None = None) -> SelfDrainOutcome:
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
    if bad:
        reason = self_reason(bad)
        if current.ours and current.drained and current.reason == reason:
            return SelfDrainOutcome("none", f"already drained by healthcheck ({current.state})", reason)
        if current.reason and not current.ours:
            return SelfDrainOutcome("left-alone", f"{current.state} with someone else's reason "
                                    f"{current.reason!r} (set by {current.reason_user or '?'})", reason)
        if not current.ours and (refusal := _breaker(controller, node, policy.max_fraction)):
            return SelfDrainOutcome("refused", refusal, reason)
        actions = SLURM.drain_actions([DrainDecision(host=host, node=node, reason=reason,
                                                     findings=tuple(bad))], states)
        kind = "refresh" if current.ours else "drain"
    else:
        reason = ""
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
    return SelfDrainOutcome(kind, action.note, reason)


def _breaker(controller: Controller, node: str, max_fraction: float) -> str | None:
    """Why a new self-drain is refused (healthcheck already holds too many nodes), or None."""
    result = controller.run(["sinfo", "-h", "-N", "-o", "%N|%T|%E"], command_id="slurm-sinfo")
    why = failure_text(result)
    if why is not None:
        return f"circuit breaker: cannot count drained nodes (sinfo: {why}); nothing changed"
    try:
        nodes = parse_sinfo_state_reason(result.text).nodes
    except ParseError as exc:
        return f"circuit breaker: cannot read sinfo ({exc}); nothing changed"
    ours = sorted(n for n, s in nodes.items() if n != node and s.ours and s.drained)
    limit = fleet_drain_limit(max(1, len(nodes)), max_fraction)
    if len(ours) + 1 > limit:
        return (f"circuit breaker: healthcheck already drained {len(ours)} of {len(nodes)} nodes "
                f"({', '.join(ours[:5])}{' ...' if len(ours) > 5 else ''}); draining {node} too would exceed "
                f"{limit} ({max_fraction:.0%}); a fault this wide is more likely the software than the nodes")
    return None
