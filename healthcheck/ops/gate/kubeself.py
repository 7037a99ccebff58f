"""A Kubernetes node tainting and labelling itself after ``healthcheck gate`` (the gate as an init container).

    outcome = kube_self(findings, node="gpu-node-7", policy=SelfDrainPolicy(), controller=Controller())
    outcome.action     # "taint", "refresh", "clear", "pass", "none", "refused", "failed"

On a failing gate (FAIL; ERROR too with ``drain_on_error``)::

    kubectl taint nodes gpu-node-7 healthcheck/gate=failed:NoSchedule --overwrite
    kubectl label nodes gpu-node-7 --overwrite healthcheck/gate=fail
    kubectl annotate nodes gpu-node-7 --overwrite 'healthcheck/gate-reason=healthcheck: gpuperf.gemm.siblings gpu3: ...'

On a clean gate: the label becomes ``healthcheck/gate=pass``; our taint and reason are removed when present.
Nothing else is touched: other taints, a cordon, labels and annotations outside ``healthcheck/``. The taint
keeps new pods off the node; pods already bound (the one whose init container failed) are the Job controller's
to replace, elsewhere. A circuit breaker (one ``kubectl get nodes -o json``) refuses a new taint when the gate
taint already holds ``max_fraction`` of the nodes. Every outcome is a value; nothing raises.
"""

from __future__ import annotations

from collections.abc import Sequence

from healthcheck.core.model import Finding
from healthcheck.core.spec import ParseError
from healthcheck.ops.drain import drain_limit, passes, triggers
from healthcheck.ops.schedulers.controller import Controller, failure_text, read_states
from healthcheck.ops.schedulers.kubernetes import KUBERNETES, KubeNode, parse_kubectl_nodes_json
from healthcheck.ops.selfdrain import SelfDrainOutcome, SelfDrainPolicy, self_reason

GATE_KEY = "healthcheck/gate"
REASON_KEY = "healthcheck/gate-reason"
TAINT = f"{GATE_KEY}=failed:NoSchedule"


def _tainted(node: KubeNode) -> bool:
    return any(key == GATE_KEY for key, _value, _effect in node.taints)


def taint_argvs(node: str, reason: str) -> tuple[tuple[str, ...], ...]:
    return (("kubectl", "taint", "nodes", node, TAINT, "--overwrite"),
            ("kubectl", "label", "nodes", node, "--overwrite", f"{GATE_KEY}=fail"),
            ("kubectl", "annotate", "nodes", node, "--overwrite", f"{REASON_KEY}={reason}"))


def clear_argvs(node: KubeNode) -> tuple[tuple[str, ...], ...]:
    argvs: list[tuple[str, ...]] = []
    if _tainted(node):
        argvs.append(("kubectl", "taint", "nodes", node.name, f"{GATE_KEY}:NoSchedule-"))
    if REASON_KEY in node.annotations:
        argvs.append(("kubectl", "annotate", "nodes", node.name, f"{REASON_KEY}-"))
    if node.labels.get(GATE_KEY) != "pass":
        argvs.append(("kubectl", "label", "nodes", node.name, "--overwrite", f"{GATE_KEY}=pass"))
    return tuple(argvs)


def kube_self(findings: Sequence[Finding], node: str, policy: SelfDrainPolicy,
              controller: Controller | None = None) -> SelfDrainOutcome:
    """Taint, refresh, clear or leave ``node`` according to this gate's ``findings``."""
    controller = controller or Controller()
    rules = policy.drain_policy
    bad = [f for f in findings if triggers(f, rules)]
    if not bad and not passes(findings, rules):
        return SelfDrainOutcome("none", "not tainted, not cleared: the gate has ERROR findings (the checks could "
                                "not judge the node; --on-error closed taints on them)")
    states, error = read_states(KUBERNETES, controller, [node])
    if states is None:
        return SelfDrainOutcome("refused", f"cannot read the node ({error}): nothing changed")
    current = states.nodes.get(node)
    if current is None:
        return SelfDrainOutcome("refused", f"kubectl does not know node {node} (give --kube-node)")
    if bad:
        reason = self_reason(bad)
        if _tainted(current) and current.annotations.get(REASON_KEY) == reason:
            return SelfDrainOutcome("none", "already tainted by the gate for the same reason", reason)
        if not _tainted(current) and (refusal := _breaker(controller, node, policy.max_fraction)):
            return SelfDrainOutcome("refused", refusal, reason)
        argvs, kind, note = taint_argvs(node, reason), ("refresh" if _tainted(current) else "taint"), TAINT
    else:
        reason, argvs = "", clear_argvs(current)
        kind, note = ("clear", "gate passes: our taint removed") if _tainted(current) else ("pass", "gate passes")
        if not argvs:
            return SelfDrainOutcome("none", "gate passes; already labelled healthcheck/gate=pass")
    for argv in argvs:
        why = failure_text(controller.run(argv, command_id="kubernetes-update"))
        if why is not None:
            return SelfDrainOutcome("failed", f"{' '.join(argv[:4])}: {why}", reason)
    return SelfDrainOutcome(kind, note, reason)


def _breaker(controller: Controller, node: str, max_fraction: float) -> str | None:
    """Why a new gate taint is refused (the gate already holds too many nodes), or None."""
    result = controller.run(["kubectl", "get", "nodes", "-o", "json"], command_id="kubernetes-nodes")
    why = failure_text(result)
    if why is not None:
        return f"circuit breaker: cannot count tainted nodes (kubectl: {why}); nothing changed"
    try:
        nodes = parse_kubectl_nodes_json(result.text).nodes
    except ParseError as exc:
        return f"circuit breaker: cannot read kubectl output ({exc}); nothing changed"
    ours = sorted(n for n, s in nodes.items() if n != node and _tainted(s))
    limit = drain_limit(max(1, len(nodes)), max_fraction)
    if len(ours) + 1 > limit:
        return (f"circuit breaker: the gate already tainted {len(ours)} of {len(nodes)} nodes; tainting {node} "
                f"too would exceed {limit} ({max_fraction:.0%}): a fault this wide is more likely the software")
    return None
