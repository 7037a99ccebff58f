"""The plain values that flow through a sweep: hosts, command results, findings.

    Finding(host="gpu001", check="gpu.count", component="node", status=Status.FAIL,
            value=7, expected="== 8", unit="GPUs", message="7 GPUs visible, expected 8",
            remedy="...", source="nvidia-smi-q-x")

Everything here round-trips through JSON (``to_json``/``from_json``) so any run can be re-graded.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
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
    with a transport error has no rc. ``not_run`` says why the node did not start the command
    (``not run: nvidia-smi hung for 20 s in nvidia-smi-q-x``); ``timeout_s`` is the time it was given.
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
    not_run: str | None = None
    timeout_s: float | None = None

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


@dataclass(frozen=True, slots=True)
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
    observe: bool = False   # an observe-only check (profile ``observe``): reported, never in a verdict or drain

    @property
    def category(self) -> str:
        return self.check.split(".", 1)[0]

    def to_json(self) -> dict[str, Any]:
        """The finding as a JSON object (a non-finite number null: ``json_safe``); ``observe`` only when set."""
        value, expected = self.value, self.expected
        out = {"host": self.host, "check": self.check, "status": self.status.value, "message": self.message,
               "component": self.component,
               "value": value if type(value) in _JSON_AS_IS else json_safe(value),
               "expected": expected if type(expected) in _JSON_AS_IS else json_safe(expected),
               "unit": self.unit, "remedy": self.remedy, "source": self.source}
        if self.observe:
            out["observe"] = True
        return out

    def to_row(self) -> tuple[JSONScalar, ...]:
        """The fields in ``FINDING_FIELDS`` order, status as its text (the findings table's row)."""
        return (self.host, self.check, self.status.value, self.message, self.component, self.value,
                self.expected, self.unit, self.remedy, self.source)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Finding:
        known = {k: obj.get(k) for k in cls.__dataclass_fields__ if k in obj}
        known["status"] = Status(obj["status"])
        return cls(**known)


def findings_from_columns(columns: Sequence[Sequence[Any]]) -> list[Finding]:
    """``Finding(*row)`` for each row of ``columns`` (one sequence per field, in field order; trailing
    fields left out take their defaults)."""
    return [Finding(*row) for row in zip(*columns, strict=True)]


_JSON_AS_IS = frozenset({str, int, bool, type(None)})  # the types json_safe returns unchanged


BOOKKEEPING_CATEGORY = "host"  # host.reachable, host.swept, host.checked: about the sweep, not the node


def is_evidence(finding: Finding) -> bool:
    """A graded check on real output from the host: PASS, WARN or FAIL of a probe or benchmark.

    SKIP (not applicable), ERROR (could not be evaluated) and the sweep's own bookkeeping
    (``host.reachable`` PASS says only that a session completed) are not evidence."""
    return (finding.status in (Status.PASS, Status.WARN, Status.FAIL) and finding.category != BOOKKEEPING_CATEGORY
            and not finding.observe)  # an observe-only check never decides a verdict


FINDING_FIELDS = ("host", "check", "status", "message", "component", "value", "expected", "unit", "remedy",
                  "source")


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float as ``None`` (JSON ``null``): JSON has no NaN or Infinity, and
    a node that printed "nan" measured nothing (the finding's message still says what it printed)."""
    if isinstance(value, float):
        return finite_or_none(value)
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    return value


def finite_or_none(value: float) -> float | None:
    """A finite float as itself, NaN and the infinities as None: the one NaN rule of everything we write."""
    return value if math.isfinite(value) else None


def host_verdict(findings: Iterable[Finding]) -> Status:
    """A host's verdict is its worst finding, SKIPs and observe-only findings aside (a SKIP is "not
    applicable", not a grade; an observe-only check is reported but never decides).

    Nothing checked is never PASS: PASS or WARN needs at least one finding that is evidence
    (``is_evidence``); without one the verdict is ERROR. SKIP only when every finding is a SKIP
    (a node left alone because it runs a job), ERROR when there is no finding at all."""
    found = [f for f in findings if not f.observe]
    if not found:
        return Status.ERROR
    graded = {f.status for f in found} - {Status.SKIP}
    if not graded:
        return Status.SKIP
    verdict = worst(graded)
    if verdict in (Status.PASS, Status.WARN) and not any(is_evidence(f) for f in found):
        return Status.ERROR
    return verdict


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
