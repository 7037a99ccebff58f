"""What Slurm says about its nodes: ``scontrol show node`` and ``sinfo`` parsed into states and reasons.

    states = parse_sinfo_state_reason(run(sinfo_argv(["gpu001", "gpu003"])).stdout)
    states.nodes["gpu003"].drained, states.nodes["gpu003"].ours      # True, True

Read by the Slurm transports (busy nodes are left alone) and by the Slurm drain back-end. A drain
reason that starts with ``REASON_PREFIX`` was written by healthcheck (as LBNL NHC marks its own
with ``NHC:``); any other reason belongs to someone else.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from healthcheck.core.spec import ParseError

REASON_PREFIX = "healthcheck:"
_REASON_STAMP = re.compile(r"^(?P<text>.*?)\s*\[(?P<user>[^@\]]*)@(?P<time>[^\]]*)\]\s*$")
_NOT_FOUND = re.compile(r"^Node (\S+) not found\s*$")
_RECORD_START = re.compile(r"^NodeName=(\S+)")


@dataclass(frozen=True)
class SlurmNode:
    """One node as ``scontrol show node`` reports it. ``state`` keeps the flags: ``IDLE+DRAIN``."""

    name: str
    state: str
    reason: str = ""
    reason_user: str = ""
    reason_time: str = ""

    @property
    def flags(self) -> frozenset[str]:
        return frozenset(self.state.upper().rstrip("*~#!%$@^-").split("+"))

    @property
    def drained(self) -> bool:
        """DRAIN flag set (draining or drained), or a base state that takes it out (DOWN, FAIL)."""
        return bool(self.flags & {"DRAIN", "DRAINED", "DRAINING", "DOWN", "FAIL"})

    @property
    def ours(self) -> bool:
        return self.reason.startswith(REASON_PREFIX)


@dataclass(frozen=True)
class SlurmStates:
    """Parsed ``scontrol show node`` output: the nodes found, and the names Slurm does not know."""

    nodes: Mapping[str, SlurmNode]
    missing: frozenset[str] = frozenset()


def parse_scontrol_show_node(text: str) -> SlurmStates:
    """Parse ``scontrol show node [LIST]`` (multi-line records; Slurm 22.05 layout, later alike).

    Written against tests/fixtures/slurm/scontrol-show-node-22.05.txt (captured from a real
    slurmctld). ``Reason=`` runs to the end of its line and ends with ``[user@time]``, which is
    split off. A ``Node X not found`` line (rc 1) marks X missing. A record without ``State=``
    (truncated) or text with no record at all raises ``ParseError``.
    """
    nodes: dict[str, SlurmNode] = {}
    missing = set()
    records: list[list[str]] = []
    for line in text.splitlines():
        if m := _NOT_FOUND.match(line.strip()):
            missing.add(m.group(1))
        elif _RECORD_START.match(line):
            records.append([line])
        elif records and line.strip():
            records[-1].append(line)
    if not records and not missing:
        raise ParseError("no 'NodeName=' record in scontrol show node output", text)
    for lines in records:
        node = _parse_record(lines)
        nodes[node.name] = node
    return SlurmStates(nodes=nodes, missing=frozenset(missing))


def _parse_record(lines: list[str]) -> SlurmNode:
    name = _RECORD_START.match(lines[0]).group(1)  # type: ignore[union-attr]
    state = reason = user = when = ""
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("Reason="):
            raw = stripped[len("Reason="):]
            m = _REASON_STAMP.match(raw)
            reason, user, when = (m["text"], m["user"], m["time"]) if m else (raw, "", "")
            continue
        for token in stripped.split():
            if token.startswith("State="):
                state = token[len("State="):]
    if not state:
        raise ParseError(f"node {name}: no State= in its scontrol record (truncated?)", "\n".join(lines))
    return SlurmNode(name=name, state=state, reason=reason.strip(), reason_user=user, reason_time=when)


def parse_sinfo_state_reason(text: str) -> SlurmStates:
    """Parse ``sinfo -h -N -o '%N|%T|%E'`` (node, long state, full reason; ``none`` = no reason).

    Written against tests/fixtures/slurm/sinfo-node-state-reason-22.05.txt. The reason is the
    last field, so a ``|`` inside it is kept. A line without two separators raises ``ParseError``.
    """
    nodes = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", 2)
        if len(parts) != 3 or not parts[0]:
            raise ParseError("sinfo line is not 'node|state|reason'", line)
        name, state, reason = parts
        nodes[name] = SlurmNode(name=name, state=state.strip(),
                                reason="" if reason.strip() == "none" else reason.strip())
    return SlurmStates(nodes=nodes)


# What Slurm's clients print when nothing can be asked of Slurm from here (Slurm 22.05: see
# tests/fixtures/slurm/sinfo-no-configuration-22.05.err and sinfo-controller-down-22.05.err).
_UNUSABLE = (
    (re.compile(r"^\w+: fatal: (Could not establish a configuration source)", re.M),
     "no Slurm configuration on this machine", "set SLURM_CONF (or install slurm.conf), or run where srun works"),
    (re.compile(r"^\S*: ?(Unable to contact slurm controller.*)$", re.M), "the Slurm controller does not answer",
     "check slurmctld (scontrol ping) and the network to it"),
    (re.compile(r"^\w+: fatal: (.*)$", re.M), "the Slurm client cannot start", "run where srun works"),
)


def slurm_unusable(stderr: str) -> str | None:
    """Why Slurm cannot be used from this machine at all, from a client's stderr, with what to do
    (None: it answered, or failed for a reason that concerns only some nodes)."""
    for pattern, what, remedy in _UNUSABLE:
        if m := pattern.search(stderr):
            return f"{what} (sinfo: {m[1].strip()}); {remedy}"
    return None

SINFO_FLEET_FORMAT = "%N|%T|%H|%E"   # node, long state, the reason's time, the reason (last: it may hold '|')


def parse_sinfo_fleet(text: str) -> SlurmStates:
    """Parse ``sinfo -h -N -o '%N|%T|%H|%E'`` (node, long state, reason time, full reason): every node
    with its reason and when it was set (``Unknown`` without a reason reads as "").

    Written against tests/fixtures/slurm/sinfo-node-state-time-reason-22.05.txt. The reason is the last
    field, so a ``|`` inside it is kept. A line without three separators raises ``ParseError``.
    """
    nodes = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", 3)
        if len(parts) != 4 or not parts[0]:
            raise ParseError("sinfo line is not 'node|state|reason time|reason'", line)
        name, state, when, reason = (p.strip() for p in parts)
        nodes[name] = SlurmNode(name=name, state=state, reason="" if reason == "none" else reason,
                                reason_time="" if when == "Unknown" else when)
    return SlurmStates(nodes=nodes)


def sinfo_fleet_argv() -> list[str]:
    """Every node of the cluster with its state, reason and reason time (``parse_sinfo_fleet``)."""
    return ["sinfo", "-h", "-N", "-o", SINFO_FLEET_FORMAT]


def show_node_argv(nodes: Iterable[str]) -> list[str]:
    return ["scontrol", "show", "node", ",".join(sorted(set(nodes)))]


def sinfo_argv(nodes: Iterable[str]) -> list[str]:
    return ["sinfo", "-h", "-N", "-n", ",".join(sorted(set(nodes))), "-o", "%N|%T|%E"]
