"""Slurm: read node state and reasons, and build ``scontrol`` drain/resume argv lists that respect them.

    text = run(["scontrol", "show", "node", "gpu001,gpu003"]).stdout
    states = parse_scontrol_show_node(text)   # {"gpu001": SlurmNode(state="IDLE", reason="")...}
    SLURM.drain_actions(plan.decisions, states)
    # [Action(node="gpu003", argvs=(("scontrol", "update", "NodeName=gpu003", "State=DRAIN",
    #                                  "Reason=healthcheck: FAIL gpu.ecc.dbe gpu3=2 run=..."),), ...)]

Reason ownership (as LBNL NHC's ``node-mark-offline``/``node-mark-online`` do with ``NHC:``):
a node whose reason does not start with ``healthcheck:`` belongs to someone else and is never
touched, neither drained over (which would overwrite the reason) nor resumed. A node we drained
gets its reason refreshed when it still fails, and is resumed only when it now passes.
"""

from __future__ import annotations

from collections.abc import Sequence

from healthcheck.ops.drain import DrainDecision
from healthcheck.ops.schedulers.base import Action, NodeRef
from healthcheck.transport.slurm_nodes import (
    REASON_PREFIX,
    SlurmStates,
    parse_scontrol_show_node,
    show_node_argv,
)


def drain_argv(node: str, reason: str) -> tuple[str, ...]:
    return ("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}")


def resume_argv(node: str) -> tuple[str, ...]:
    return ("scontrol", "update", f"NodeName={node}", "State=RESUME")


class SlurmScheduler:
    """``Scheduler`` for Slurm (see ``healthcheck.ops.schedulers.base``)."""

    name = "slurm"

    def query_argv(self, nodes: Sequence[str]) -> list[str]:
        return show_node_argv(nodes)

    def fleet_argv(self) -> list[str]:
        return ["scontrol", "show", "node"]   # every node slurmctld knows

    def nodes(self, states: SlurmStates) -> frozenset[str]:
        return frozenset(states.nodes)

    def parse_state(self, text: str) -> SlurmStates:
        return parse_scontrol_show_node(text)

    def out_of_service(self, states: SlurmStates) -> frozenset[str]:
        return frozenset(name for name, node in states.nodes.items() if node.drained)

    def drain_actions(self, decisions: Sequence[DrainDecision], states: SlurmStates | None) -> list[Action]:
        """One action per decision; skipped (with why) when the node is someone else's or unknown."""
        out = []
        for d in decisions:
            argvs = (drain_argv(d.node, d.reason),)
            if states is None:
                out.append(Action(d.host, d.node, argvs, "state not read: reason ownership unchecked",
                                  unchecked=True))
                continue
            node = states.nodes.get(d.node)
            if node is None:
                out.append(Action(d.host, d.node, (), "not a Slurm node (scontrol does not know it)",
                                  skipped=True))
            elif node.reason and not node.ours:
                out.append(Action(d.host, d.node, (), f"left alone: {node.state} with someone else's "
                                  f"reason {node.reason!r} (set by {node.reason_user or '?'})", skipped=True))
            elif node.ours:
                out.append(Action(d.host, d.node, argvs, f"already drained by healthcheck ({node.state}); "
                                  "reason refreshed"))
            else:
                out.append(Action(d.host, d.node, argvs, f"drain ({node.state})"))
        return out

    def resume_actions(self, candidates: Sequence[NodeRef], states: SlurmStates | None) -> list[Action]:
        """Resume the passing nodes that carry our reason; report those held by someone else."""
        out = []
        for ref in candidates:
            if states is None:
                out.append(Action(ref.host, ref.node, (resume_argv(ref.node),),
                                  "state not read: resumed only if its reason starts with "
                                  f"{REASON_PREFIX!r}", unchecked=True))
                continue
            node = states.nodes.get(ref.node)
            if node is None or not (node.drained or node.reason):
                continue
            if node.ours and node.drained:
                out.append(Action(ref.host, ref.node, (resume_argv(ref.node),),
                                  f"resume: passes now; was {node.state} {node.reason!r}"))
            elif not node.ours:
                out.append(Action(ref.host, ref.node, (), f"left alone: {node.state} with someone else's "
                                  f"reason {node.reason!r}", skipped=True))
        return out


SLURM = SlurmScheduler()
