"""Kubernetes: cordon, ``healthcheck/<category>=failed:NoSchedule`` taints, result labels; and undoing them.

    states = parse_kubectl_nodes_json(run(["kubectl", "get", "nodes", "gpu001", "-o", "json"]).stdout)
    KUBERNETES.drain_actions(plan.decisions, states)
    # kubectl cordon gpu001
    # kubectl taint nodes gpu001 healthcheck/gpu=failed:NoSchedule --overwrite
    # kubectl label nodes gpu001 --overwrite healthcheck/verdict=fail healthcheck/run=ID \
    #     healthcheck/cordoned=true
    # kubectl annotate nodes gpu001 --overwrite 'healthcheck/reason=healthcheck: FAIL gpu.ecc.dbe ...'

Ownership: everything we add is keyed ``healthcheck/``. A node someone else cordoned keeps that
cordon (we add our taint and labels but not ``healthcheck/cordoned``), so resume, which removes
only ``healthcheck/`` taints, labels and annotations, uncordons only what we cordoned.
No API server can run in the test environment: the argv lists and the dry-run are tested; the
JSON reader follows the Node object of the Kubernetes core/v1 API (``spec.unschedulable``,
``spec.taints[{key, value, effect}]``, ``metadata.labels``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from healthcheck.core.spec import ParseError
from healthcheck.ops.drain import DrainDecision
from healthcheck.ops.schedulers.base import Action, NodeRef

KEY_PREFIX = "healthcheck/"
TAINT_VALUE = "failed"
TAINT_EFFECT = "NoSchedule"
CORDONED_LABEL = KEY_PREFIX + "cordoned"
_LABEL_BAD = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class KubeNode:
    name: str
    unschedulable: bool = False
    taints: tuple[tuple[str, str, str], ...] = ()   # (key, value, effect)
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def our_taints(self) -> tuple[tuple[str, str, str], ...]:
        return tuple(t for t in self.taints if t[0].startswith(KEY_PREFIX))

    @property
    def ours(self) -> bool:
        return bool(self.our_taints) or CORDONED_LABEL in self.labels


@dataclass(frozen=True)
class KubeStates:
    nodes: Mapping[str, KubeNode]


def parse_kubectl_nodes_json(text: str) -> KubeStates:
    """Parse ``kubectl get nodes N... -o json``: a ``List`` of ``Node`` objects, or one ``Node``."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(f"kubectl output is not JSON: {exc}", text) from exc
    if not isinstance(doc, dict) or doc.get("kind") not in ("List", "NodeList", "Node"):
        raise ParseError("kubectl output is not a Node or a List of nodes", text)
    items = [doc] if doc["kind"] == "Node" else doc.get("items") or []
    nodes = {}
    for item in items:
        meta, spec = item.get("metadata") or {}, item.get("spec") or {}
        if item.get("kind", "Node") != "Node" or not meta.get("name"):
            raise ParseError("kubectl list item is not a named Node", json.dumps(item)[:200])
        taints = tuple((t.get("key", ""), t.get("value", ""), t.get("effect", ""))
                       for t in spec.get("taints") or [])
        nodes[meta["name"]] = KubeNode(name=meta["name"], unschedulable=bool(spec.get("unschedulable")),
                                       taints=taints, labels=dict(meta.get("labels") or {}),
                                       annotations=dict(meta.get("annotations") or {}))
    return KubeStates(nodes=nodes)


def label_value(text: str) -> str:
    """A valid label value: ``[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?``, at most 63 characters."""
    return _LABEL_BAD.sub("-", text)[:63].strip("-_.") or "unknown"


def taint_key(category: str) -> str:
    return KEY_PREFIX + (label_value(category.lower()) or "check")


def drain_argvs(decision: DrainDecision, node: KubeNode | None) -> tuple[tuple[str, ...], ...]:
    """cordon (unless already cordoned), one taint per category, result labels, the reason annotation."""
    name = decision.node
    we_cordon = node is None or not node.unschedulable or CORDONED_LABEL in node.labels
    taints = [f"{taint_key(c)}={TAINT_VALUE}:{TAINT_EFFECT}" for c in decision.categories]
    labels = [f"{KEY_PREFIX}verdict={label_value(decision.findings[0].status.value.lower())}"]
    if decision.run_id:
        labels.append(f"{KEY_PREFIX}run={label_value(decision.run_id)}")
    if we_cordon:
        labels.append(f"{CORDONED_LABEL}=true")
    argvs = [("kubectl", "cordon", name)] if we_cordon else []
    argvs += [("kubectl", "taint", "nodes", name, *taints, "--overwrite"),
              ("kubectl", "label", "nodes", name, "--overwrite", *labels),
              ("kubectl", "annotate", "nodes", name, "--overwrite", f"{KEY_PREFIX}reason={decision.reason}")]
    return tuple(argvs)


def resume_argvs(node: KubeNode) -> tuple[tuple[str, ...], ...]:
    """Remove only our taints, labels and annotation; uncordon only a node we cordoned."""
    argvs: list[tuple[str, ...]] = []
    if node.our_taints:
        argvs.append(("kubectl", "taint", "nodes", node.name,
                      *(f"{key}:{effect}-" for key, _value, effect in node.our_taints)))
    if CORDONED_LABEL in node.labels:
        argvs.append(("kubectl", "uncordon", node.name))
    labels = sorted(k for k in node.labels if k.startswith(KEY_PREFIX))
    if labels:
        argvs.append(("kubectl", "label", "nodes", node.name, *(f"{k}-" for k in labels)))
    annotations = sorted(k for k in node.annotations if k.startswith(KEY_PREFIX))
    if annotations:
        argvs.append(("kubectl", "annotate", "nodes", node.name, *(f"{k}-" for k in annotations)))
    return tuple(argvs)


class KubernetesScheduler:
    """``Scheduler`` for Kubernetes (see ``healthcheck.ops.schedulers.base``)."""

    name = "kubernetes"

    def query_argv(self, nodes: Sequence[str]) -> list[str]:
        return ["kubectl", "get", "nodes", *sorted(set(nodes)), "-o", "json"]

    def fleet_argv(self) -> list[str]:
        return ["kubectl", "get", "nodes", "-o", "json"]   # every node of the cluster

    def nodes(self, states: KubeStates) -> frozenset[str]:
        return frozenset(states.nodes)

    def parse_state(self, text: str) -> KubeStates:
        return parse_kubectl_nodes_json(text)

    def out_of_service(self, states: KubeStates) -> frozenset[str]:
        return frozenset(name for name, node in states.nodes.items() if node.unschedulable)

    def drain_actions(self, decisions: Sequence[DrainDecision], states: KubeStates | None) -> list[Action]:
        out = []
        for d in decisions:
            if states is None:
                out.append(Action(d.host, d.node, drain_argvs(d, None),
                                  "state not read: existing cordon and taints unchecked", unchecked=True))
                continue
            node = states.nodes.get(d.node)
            if node is None:
                out.append(Action(d.host, d.node, (), "not a Kubernetes node (kubectl does not know it)",
                                  skipped=True))
                continue
            note = "cordon and taint"
            if node.unschedulable and CORDONED_LABEL not in node.labels:
                note = "already cordoned by someone else: cordon kept as theirs; adding our taint and labels"
            elif node.ours:
                note = "already drained by healthcheck; taints and labels refreshed"
            out.append(Action(d.host, d.node, drain_argvs(d, node), note))
        return out

    def resume_actions(self, candidates: Sequence[NodeRef], states: KubeStates | None) -> list[Action]:
        out = []
        for ref in candidates:
            if states is None:
                out.append(Action(ref.host, ref.node, (), "state not read: cannot tell which healthcheck/ "
                                  "taints the node carries; nothing planned", skipped=True, unchecked=True))
                continue
            node = states.nodes.get(ref.node)
            if node is None:
                continue
            if node.ours:
                out.append(Action(ref.host, ref.node, resume_argvs(node),
                                  "resume: passes now; removing healthcheck/ taints and labels"))
            elif node.unschedulable:
                out.append(Action(ref.host, ref.node, (), "left alone: cordoned by someone else",
                                  skipped=True))
        return out


KUBERNETES = KubernetesScheduler()
