"""The plain values that flow through a sweep: hosts, command results, findings.

    Finding(host="gpu001", check="gpu.count", component="node", status=Status.FAIL,
            value=7, expected="== 8", unit="GPUs", message="7 GPUs visible, expected 8",
            remedy="...", source="nvidia-smi-q-x")

Everything here round-trips through JSON (``to_json``/``from_json``) so any run can be re-graded.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

JSONScalar = str | int | float | bool | None


class Status(str, enum.Enum):
    """Outcome of one check. Order (worst last): PASS < SKIP < WARN < ERROR < FAIL.

    FAIL ranks above ERROR: a host known to be bad is worse than one we could not judge."""

    PASS = "PASS"
    SKIP = "SKIP"
    WARN = "WARN"
    ERROR = "ERROR"
    FAIL = "FAIL"

    @property
    def rank(self) -> int:
        return _RANK[self]

    def __str__(self) -> str:
        return self.value


_RANK = {Status.PASS: 0, Status.SKIP: 1, Status.WARN: 2, Status.ERROR: 3, Status.FAIL: 4}


def worst(statuses: Iterable[Status], default: Status = Status.PASS) -> Status:
    """The worst status of ``statuses`` (``default`` when there are none)."""
    return max(statuses, key=lambda s: s.rank, default=default)


@dataclass(frozen=True)
class Host:
    """One node of the inventory. ``address`` is what we connect to; ``name`` is what we report."""

    name: str
    address: str | None = None
    user: str | None = None
    port: int | None = None
    profile: str | None = None
    group: str | None = None
    transport: str = "ssh"
    vars: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["vars"] = dict(self.vars)
        return out


@dataclass(frozen=True)
class CommandResult:
    """What one command returned on one host.

    ``transport_error`` (could not reach or run on the host), ``timed_out`` (the command ran past
    its timeout) and ``rc`` (the command's own exit code) are three different things: a result
    with a transport error has no rc.
    """

    host: str
    command_id: str
    stdout: bytes = b""
    stderr: bytes = b""
    rc: int | None = None
    duration_s: float = 0.0
    timed_out: bool = False
    transport_error: str | None = None
    stdout_truncated: bool = False
    stderr_truncated: bool = False

    @property
    def text(self) -> str:
        """stdout decoded as UTF-8; undecodable bytes become U+FFFD, never an exception."""
        return self.stdout.decode("utf-8", errors="replace")

    @property
    def err_text(self) -> str:
        return self.stderr.decode("utf-8", errors="replace")

    @property
    def ok(self) -> bool:
        """Ran to completion (any rc) without transport error or timeout."""
        return self.transport_error is None and not self.timed_out and self.rc is not None


@dataclass(frozen=True)
class Finding:
    """One graded measurement. ``check`` is a stable dotted id; its first part is the category."""

    host: str
    check: str
    status: Status
    message: str
    component: str = "node"
    value: JSONScalar = None
    expected: JSONScalar = None
    unit: str | None = None
    remedy: str | None = None
    source: str | None = None

    @property
    def category(self) -> str:
        return self.check.split(".", 1)[0]

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["status"] = self.status.value
        out["value"], out["expected"] = json_safe(self.value), json_safe(self.expected)
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Finding:
        known = {k: obj.get(k) for k in cls.__dataclass_fields__ if k in obj}
        known["status"] = Status(obj["status"])
        return cls(**known)


def json_safe(value: Any) -> Any:
    """``value`` with non-finite floats as the strings ``"nan"``, ``"inf"``, ``"-inf"``: JSON has no
    NaN/Infinity (JavaScript's ``JSON.parse`` rejects Python's bare ``NaN``)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    return value


def host_verdict(findings: Iterable[Finding]) -> Status:
    """A host's verdict is its worst finding, SKIPs aside (a SKIP is "not applicable", not a
    grade): SKIP only when every finding is a SKIP, ERROR when there is no finding at all."""
    statuses = [f.status for f in findings]
    if not statuses:
        return Status.ERROR
    graded = [s for s in statuses if s is not Status.SKIP]
    return worst(graded) if graded else Status.SKIP


@dataclass(frozen=True)
class HostCollection:
    """Everything one host returned in its single exec: per-command results or a transport error.

    ``transport_error`` is set when the host could not be reached or the exec broke off
    (unreachable, auth failure, host key, deadline); ``results`` then holds whatever sections
    finished before that. ``busy`` marks a host left alone because it runs a job (SKIP, not ERROR).
    ``collected_at`` is an ISO-8601 UTC time (the grading clock for replay).
    """

    host: str
    results: Mapping[str, CommandResult]
    transport_error: str | None = None
    duration_s: float = 0.0
    collected_at: str = ""
    busy: bool = False  # deliberately not checked: the node is running someone's job
