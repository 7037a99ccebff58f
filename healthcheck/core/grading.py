"""Pure grading: a measurement against an expectation, against the fleet, with one message builder.

    exp = profile.expect("gpu.count")
    grade(exp, 7)                        # Status.FAIL
    finding_from_expectation("gpu001", "gpu.count", exp, 7, source="nvidia-smi-q-x",
                             remedy="Reseat or replace the missing GPU")
    temps = ValueGrades("gpu001", "gpu.temp_c", profile.expect("gpu.temp_c"), source="nvidia-smi-q-x",
                        remedy=REMEDY)
    temps.finding("gpu3", 91)            # one check on many components: each distinct value graded once
    fold("gpu001", "nvidia-smi-q-x", outcomes, total=8, noun="GPUs")   # "all 8 GPUs: ..." per check

Every finding built here says what was measured, what was expected (with the profile's source)
and what to do, so messages are never copy-pasted per check: a message is built from its parts
(``Grade.message``), never edited afterwards.
"""

from __future__ import annotations

import fnmatch
import math
import operator
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import date
from typing import Any, NamedTuple

from healthcheck.core.model import Finding, JSONScalar, Status
from healthcheck.core.profiles import Expectation, Profile

_OP_TEXT = {"eq": "==", "ne": "!=", "ge": ">=", "gt": ">", "le": "<=", "lt": "<", "in": "in",
            "match": "matches", "between": "between"}


class GradingError(ValueError):
    """An expectation cannot be applied to a measurement (wrong type or unit)."""


def compare(op: str, measured: Any, value: Any) -> bool:
    """True when ``measured`` satisfies ``op value``."""
    order = _ORDER.get(op)  # the thresholds first: most expectations are one
    if order is not None:
        try:
            return order(float(measured), float(value))
        except (TypeError, ValueError) as exc:
            raise GradingError(f"cannot compare {measured!r} {op} {value!r}") from exc
    if op == "eq":
        return _norm(measured) == _norm(value)
    if op == "ne":
        return _norm(measured) != _norm(value)
    if op == "in":
        return _norm(measured) in [_norm(v) for v in value]
    if op == "match":
        return re.search(str(value), str(measured)) is not None
    if op == "between":
        low, high = value
        return float(low) <= float(measured) <= float(high)
    try:
        float(measured), float(value)
    except (TypeError, ValueError) as exc:
        raise GradingError(f"cannot compare {measured!r} {op} {value!r}") from exc
    raise KeyError(op)  # an unknown op, as before


_ORDER = {"ge": operator.ge, "gt": operator.gt, "le": operator.le, "lt": operator.lt}


def _norm(x: Any) -> Any:
    if isinstance(x, str):
        return x.strip().lower()
    if isinstance(x, float) and x.is_integer():
        return int(x)
    return x


def expected_text(exp: Expectation, threshold: Any = None) -> str:
    """Human form of the expectation: ``>= 80000 MiB``."""
    value = exp.value if threshold is None else threshold
    if exp.op == "between":
        text = f"between {value[0]} and {value[1]}"
    elif exp.op == "in":
        text = "one of " + ", ".join(str(v) for v in value)
    else:
        text = f"{_OP_TEXT[exp.op]} {value}"
    return f"{text} {exp.unit}" if exp.unit else text


def grade(exp: Expectation, measured: Any) -> Status:
    """PASS, WARN (only ``warn`` threshold violated) or the expectation's severity. A non-finite
    number (``nan``/``inf`` printed by a tool) is no measurement: ``GradingError``, graded ERROR."""
    if isinstance(measured, float) and not math.isfinite(measured):
        raise GradingError(f"the node reported {measured}, not a measurement")
    if exp.bands:
        return grade_bands(exp, float(measured))
    if not compare(exp.op, measured, exp.value):
        return Status(exp.severity)
    if exp.warn is not None and not compare(exp.op, measured, exp.warn):
        return Status.WARN
    return Status.PASS


def passes(exp: Expectation | None, measured: Any) -> bool:
    """Whether ``finding_from_expectation`` would give PASS, without building the finding (a missing
    expectation or an ungradable value is not a pass)."""
    if exp is None:
        return False
    try:
        return grade(exp, measured) is Status.PASS
    except (GradingError, TypeError, ValueError):
        return False


def grade_bands(exp: Expectation, measured: float) -> Status:
    """Fraction-of-expected grading (busbw, GFLOPS): >= acceptable PASS, >= warn WARN, else FAIL."""
    bands = dict(exp.bands or {})
    expected = float(exp.value)
    if expected <= 0:
        raise GradingError(f"{exp.key}: band grading needs a positive expected value")
    ratio = measured / expected
    if ratio >= bands.get("acceptable", 0.6):
        return Status.PASS
    if ratio >= bands.get("warn", 0.5):
        return Status.WARN
    return Status.FAIL


def describe(check: str, component: str, measured: Any, unit: str | None, expected: str,
             status: Status) -> str:
    """The one message builder: ``gpu3: temperature 91 C, expected <= 87 C``."""
    prefix = f"{component}: " if component and component != "node" else ""
    return prefix + _graded_text(_what(check), measured, unit, expected, status)


def _graded_text(what: str, measured: Any, unit: str | None, expected: str, status: Status) -> str:
    """A graded message without its component: ``temperature 91 C, expected <= 87 C``."""
    unit_text = f" {unit}" if unit else ""
    verb = "expected" if status is not Status.PASS else "within"
    return f"{what} {measured}{unit_text}, {verb} {expected}"


def _what(check: str) -> str:
    """``gpu.ecc.sram_correctable`` -> ``gpu ecc sram correctable``."""
    return check.replace(".", " ").replace("_", " ")


class Grade(NamedTuple):
    """One check's outcome on one measurement: a finding but for whom it is about. Its message is the
    component's name, ``text``, then ``citation`` (``message`` says where the caller's parts go)."""

    check: str
    status: Status
    value: JSONScalar
    expected: JSONScalar
    unit: str | None
    text: str                  # the message after the component's name
    citation: str = ""         # " (source: ...)" of a graded value that did not pass; on a PASS, the rule's note
    remedy: str | None = None
    named: bool = True         # False: the message names no component (no expectation, cannot grade)

    def message(self, component: str, *, label: str | None = None, lead: str = "", note: str = "",
                detail: str = "") -> str:
        """``lead``, ``"<name>: "``, the text, ``note``, the citation, ``detail``. The name is ``label`` when
        given (then in every message), else the component where the message names one (not ``node``)."""
        name = label if label is not None else component if self.named and component != "node" else ""
        prefix = f"{name}: " if name else ""
        return f"{lead}{prefix}{self.text}{note}{self.citation}{detail}"

    def finding(self, host: str, component: str, source: str | None, *, label: str | None = None,
                lead: str = "", note: str = "", detail: str = "") -> Finding:
        """This grade as ``component``'s finding (the message's parts as in ``message``)."""
        return Finding(host=host, check=self.check, status=self.status, component=component, value=self.value,
                       expected=self.expected, unit=self.unit, remedy=self.remedy, source=source,
                       message=self.message(component, label=label, lead=lead, note=note, detail=detail))


def grade_value(check: str, exp: Expectation | None, measured: Any, *, remedy: str,
                profile: Profile | None = None, what: str | None = None) -> Grade:
    """``measured`` against ``exp``: SKIP without an expectation (never PASS), ERROR when it cannot be
    graded. ``what`` names the measurement in the message (default: the check's words)."""
    return _graded(check, exp, measured, remedy, profile, what, expected_text(exp) if exp is not None else None)


def _graded(check: str, exp: Expectation | None, measured: Any, remedy: str, profile: Profile | None,
            what: str | None, expected: str | None) -> Grade:
    """``grade_value``, given ``expected_text(exp)``."""
    value = _scalar(measured)
    if exp is None or expected is None:
        name = profile.name if profile else "(none)"
        return Grade(check, Status.SKIP, value, None, None, f"no expectation for {check} in profile {name}",
                     named=False)
    try:
        status = grade(exp, measured)
    except (GradingError, TypeError, ValueError) as exc:
        return Grade(check, Status.ERROR, value, expected, exp.unit, f"cannot grade {check}: {exc}", named=False)
    what = what or _what(check)
    if status is Status.PASS:
        return Grade(check, status, value, expected, exp.unit, _graded_text(what, measured, exp.unit, expected, status))
    if status is Status.WARN and exp.warn is not None and not exp.bands:
        # Only the tighter bound was crossed: show that one, and where FAIL starts.
        expected = f"{expected_text(exp, exp.warn)} (FAIL beyond {exp.value})"
    return Grade(check, status, value, expected, exp.unit, _graded_text(what, measured, exp.unit, expected, status),
                 f" (source: {short_source(exp.source)})", remedy)


def finding_from_expectation(host: str, check: str, exp: Expectation | None, measured: Any, *,
                             source: str, remedy: str, component: str = "node",
                             profile: Profile | None = None) -> Finding:
    """Grade ``measured`` against ``exp``; a missing expectation is SKIP (never PASS)."""
    return grade_value(check, exp, measured, remedy=remedy, profile=profile).finding(host, component, source)


class ValueGrades:
    """One check on many components of a host (its GPUs, links, ports): each distinct value is graded
    once (``grade``), and each component's finding is built from that grade (``finding``).

    Values are shared by type and value (``1``, ``1.0`` and ``True`` are graded apart); an unhashable
    value, and a zero float (``0.0`` and ``-0.0`` are equal but print apart), is graded each time."""

    __slots__ = ("_grades", "_passed", "check", "exp", "expected", "host", "profile", "remedy", "source", "what")

    def __init__(self, host: str, check: str, exp: Expectation | None, *, source: str | None, remedy: str,
                 profile: Profile | None = None, what: str | None = None) -> None:
        self.host, self.check, self.exp, self.source = host, check, exp, source
        self.remedy, self.profile, self.what = remedy, profile, what
        self.expected = expected_text(exp) if exp is not None else None  # the expectation's text
        self._grades: dict[tuple[type, Any], Grade] = {}
        self._passed: dict[tuple[type, Any], bool] = {}  # what ``passes`` found, where no grade was needed

    def grade(self, measured: Any) -> Grade:
        kind = measured.__class__
        if kind not in _SHARED or (kind is float and not measured):
            return self._grade(measured)
        key = (kind, measured)
        found = self._grades.get(key)
        if found is None:
            found = self._grades[key] = self._grade(measured)
        return found

    def _grade(self, measured: Any) -> Grade:
        return _graded(self.check, self.exp, measured, self.remedy, self.profile, self.what, self.expected)

    def passes(self, measured: Any) -> bool:
        """Whether ``measured`` grades PASS (without an expectation, or ungradable: no), once per value."""
        kind = measured.__class__
        if kind not in _SHARED or (kind is float and not measured):
            return passes(self.exp, measured)
        key = (kind, measured)
        graded = self._grades.get(key)
        if graded is not None:
            return graded.status is Status.PASS
        ok = self._passed.get(key)
        if ok is None:
            ok = self._passed[key] = passes(self.exp, measured)
        return ok

    def all_pass(self, values: Sequence[Any]) -> bool:
        """Whether every value that is not None passes: values of one plain type are looked at once each."""
        kinds = set(map(type, values))
        kinds.discard(type(None))
        if len(kinds) == 1 and kinds <= _SETTABLE:
            distinct = set(values)
            distinct.discard(None)
            return all(map(self.passes, distinct))
        return all(self.passes(v) for v in values if v is not None)

    def finding(self, component: str, measured: Any, *, label: str | None = None, lead: str = "",
                note: str = "", detail: str = "") -> Finding:
        """``component``'s finding for ``measured`` (the message's parts as in ``Grade.message``)."""
        return self.grade(measured).finding(self.host, component, self.source, label=label, lead=lead, note=note,
                                            detail=detail)


_SHARED = frozenset({str, int, bool, float, type(None)})  # types whose equal values print alike (zero floats aside)
_SETTABLE = frozenset({str, int, bool, float})  # one of these alone: a set of the values keeps each value once


class Outcome(NamedTuple):
    """One check's grade on one component, kept until ``fold`` knows whether it is folded."""

    component: str
    grade: Grade
    label: str | None = None   # the name the message starts with (``Grade.message``)
    detail: str = ""

    def finding(self, host: str, source: str | None) -> Finding:
        return self.grade.finding(host, self.component, source, label=self.label, detail=self.detail)


def fold(host: str, source: str | None, outcomes: Iterable[Outcome | None], total: int, noun: str,
         names: Mapping[str, str] | None = None) -> list[Finding]:
    """The findings of ``outcomes`` (None: nothing to say), check by check in order of first appearance:
    node-level ones (identical ones once), every other that is not a PASS or SKIP, then the PASSes and the
    SKIPs each folded into one node-level finding (``all 8 GPUs: ...``; one alone stays as it is).
    ``names`` words a check in a folded PASS (default: the check without its category)."""
    buckets: dict[str, tuple[list[Outcome], ...]] = {}  # check -> node-level, others, PASSes, SKIPs
    for o in outcomes:
        if o is not None:
            lists = buckets.get(o.grade.check)
            if lists is None:
                lists = buckets[o.grade.check] = ([], [], [], [])
            lists[0 if o.component == "node" else _BUCKET.get(o.grade.status, 1)].append(o)
    out: list[Finding] = []
    for check, (node, bad, passed, skipped) in buckets.items():
        if node:
            out.extend(dict.fromkeys([o.finding(host, source) for o in node]))
        if bad:
            out.extend([o.finding(host, source) for o in bad])
        for alike in (passed, skipped):
            if len(alike) == 1:
                out.append(alike[0].finding(host, source))
            elif alike:
                out.append(_folded(host, source, alike, total, noun, (names or {}).get(check)))
    return out


_BUCKET = {Status.PASS: 2, Status.SKIP: 3}  # fold's list of an outcome by its status (others: 1)


def _folded(host: str, source: str | None, group: list[Outcome], total: int, noun: str,
            what: str | None) -> Finding:
    """One node-level finding for a check's PASSes (or SKIPs) on several components."""
    first = group[0].grade
    who = f"all {total} {noun}" if len(group) == total else ",".join(o.component for o in group)
    shown = shown_value([o.grade.value for o in group])
    if first.status is Status.PASS:
        unit = f" {first.unit}" if first.unit else ""
        within = f", within {first.expected}" if first.expected else ""
        message = f"{who}: {what or _what(first.check.split('.', 1)[-1])} {shown}{unit}{within}{first.citation}"
    else:
        message = f"{who}: {first.text}{first.citation}{group[0].detail}"
    return Finding(host=host, check=first.check, status=first.status, component="node",
                   value=shown if isinstance(shown, str) else first.value, expected=first.expected,
                   unit=first.unit, message=message, source=source)


def shown_value(values: Sequence[JSONScalar]) -> JSONScalar:
    """A folded value: the one value, ``min-max`` of differing numbers, else ``mixed``."""
    first = values[0]
    if type(first) in (int, str, bool) and values.count(first) == len(values) and len(set(map(type, values))) == 1:
        return first  # optimization: every component alike (the usual case), as the rule below finds
    numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if numbers and len(numbers) == len(values) and min(numbers) != max(numbers):
        return f"{min(numbers):g}-{max(numbers):g}"
    return values[0] if len(set(map(str, values))) == 1 else "mixed"


def short_source(source: str, limit: int = 100) -> str:
    """The first clause of an expectation's source, for messages (the profile keeps the full text)."""
    first = source.split(";")[0].strip()
    return first if len(first) <= limit else first[:limit - 3].rstrip() + "..."


def _scalar(x: Any) -> JSONScalar:
    if x is None or isinstance(x, str | int | float | bool):
        return x
    return str(x)


def apply_known_issues(findings: Iterable[Finding], profile: Profile, today: date) -> list[Finding]:
    """Downgrade FAIL/ERROR findings covered by an active known issue to WARN, saying why."""
    out = []
    for f in findings:
        issue = next((k for k in profile.known_issues
                      if k.active(today) and f.check.startswith(k.check)
                      and (not k.hosts or f.host in k.hosts)), None)
        if issue and f.status in (Status.FAIL, Status.ERROR, Status.WARN):
            until = f" until {issue.expires}" if issue.expires else ""
            f = replace(f, status=Status.WARN, message=f"{f.message} [known issue{until}: {issue.reason}]")
        out.append(f)
    return out


def observed(check: str, patterns: Iterable[str]) -> bool:
    """True when ``check`` is observe-only: it equals a pattern, lies under it (``ib.counter`` covers
    ``ib.counter.symbol_error``) or matches it as a glob (``rate.*``)."""
    return any(check == p or check.startswith(p + ".") or fnmatch.fnmatchcase(check, p) for p in patterns)


def apply_observe(findings: Iterable[Finding], profile: Profile) -> list[Finding]:
    """Mark findings of the profile's observe-only checks: still graded and reported, but never in a
    host verdict, a drain or the exit code. Non-PASS ones say so in their message. Idempotent."""
    if not profile.observe:
        return list(findings)
    out = []
    for f in findings:
        if not f.observe and observed(f.check, profile.observe):
            note = "" if f.status in (Status.PASS, Status.SKIP) else \
                " [observe-only: not counted in the verdict, never drains]"
            f = replace(f, observe=True, message=f.message + note)
        out.append(f)
    return out


def fleet_outliers(values: Mapping[str, float], low_fraction: float = 0.9,
                   min_hosts: int = 3) -> dict[str, float]:
    """Hosts whose value is below ``low_fraction`` of the fleet median: host -> median."""
    if len(values) < min_hosts:
        return {}
    median = statistics.median(values.values())
    return {h: median for h, v in values.items() if median > 0 and v < low_fraction * median}


def majority(values: Mapping[str, JSONScalar]) -> tuple[JSONScalar, dict[str, JSONScalar]]:
    """The most common value and the hosts that differ from it (ties: the smaller value wins)."""
    counts: dict[JSONScalar, int] = {}
    for v in values.values():
        counts[v] = counts.get(v, 0) + 1
    if not counts:
        return None, {}
    top = sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0])))[0][0]
    return top, {h: v for h, v in values.items() if v != top}
