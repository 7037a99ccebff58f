"""The values every scheduler back-end shares: a node reference, an action, the ``Scheduler`` protocol.

    action = Action("gpu001", "gpu-a-001", (("scontrol", "update", ...),), "drain (IDLE)")
    action.commands          # ["scontrol update NodeName=gpu-a-001 State=DRAIN 'Reason=healthcheck: ...'"]
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from healthcheck.ops.drain import DrainDecision


@dataclass(frozen=True)
class NodeRef:
    """An inventory host and its name in the scheduler (``slurm_node`` / ``k8s_node`` host vars)."""

    host: str
    node: str


@dataclass(frozen=True)
class Action:
    """What to do to one node: argv lists run in order, and a note saying why.

    ``skipped``: nothing will be done (someone else's node, unknown node); ``argvs`` is empty.
    ``unchecked``: built without reading the scheduler's state (dry-run where the scheduler could
    not be asked); ``--apply`` never runs an unchecked action.
    """

    host: str
    node: str
    argvs: tuple[tuple[str, ...], ...]
    note: str
    skipped: bool = False
    unchecked: bool = False

    @property
    def commands(self) -> list[str]:
        """The argv lists as shell-quoted lines, exactly as a user would type them."""
        return [shlex.join(argv) for argv in self.argvs]


class Scheduler(Protocol):
    """A back-end that drains and resumes nodes.

    ``query_argv`` is a read-only command printing the state of ``nodes``, ``fleet_argv`` the state of
    every node the scheduler knows (the fleet a drain counts, ``healthcheck.ops.fleet``); ``parse_state``
    turns either's stdout into the back-end's state value (raising ``ParseError`` on garbage). The action
    builders are pure; ``states=None`` means the state could not be read, and every action is
    then marked ``unchecked``.
    """

    name: str

    def query_argv(self, nodes: Sequence[str]) -> list[str]: ...

    def fleet_argv(self) -> list[str]: ...

    def nodes(self, states: Any) -> frozenset[str]:
        """Every node name in ``states``."""
        ...

    def parse_state(self, text: str) -> Any: ...

    def out_of_service(self, states: Any) -> frozenset[str]:
        """Nodes already taken out (drained, down, cordoned), by anyone: the circuit breaker counts them."""
        ...

    def drain_actions(self, decisions: Sequence[DrainDecision], states: Any) -> list[Action]: ...

    def resume_actions(self, candidates: Sequence[NodeRef], states: Any) -> list[Action]: ...
