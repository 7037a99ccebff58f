"""Pure grading: a measurement against an expectation, against the fleet, with one message builder.

    exp = profile.expect("gpu.count")
    grade(exp, 7)                        # Status.FAIL
    finding_from_expectation("gpu001", "gpu.count", exp, 7, source="nvidia-smi-q-x",
                             remedy="Reseat or replace the missing GPU")

Every finding built here says what was measured, what was expected (with the profile's source)
and what to do, so messages are never copy-pasted per check.
"""

from __future__ import annotations

import fnmatch
import math
import operator
import re
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import date
from typing import Any

from healthcheck.core.model import Finding, JSONScalar, Status
from healthcheck.core.profiles import Expectation, Profile

_OP_TEXT = {"eq": "==", "ne": "!=", "ge": ">=", "gt": ">", "le": "<=", "lt": "<", "in": "in",
            "match": "matches", "between": "between"}
# The helpers below keep their answers per expectation (keyed by its id; each entry holds the expectation,
# so the id is not reused while kept), only for expectations with nothing that can change in place.
_FIXED = (str, int, float, type(None))  # an expectation value (or warn) that cannot change in place
_MEMO_MAX = 4096  # entries per memo; a full memo starts over


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
    if threshold is not None:
        return _expected_text(exp, threshold)
    hit = _TEXTS.get(id(exp))
    if hit is not None and hit[0] is exp:
        return hit[1]
    text = _expected_text(exp, exp.value)
    if isinstance(exp.value, _FIXED):  # a list could change in place: not kept
        if len(_TEXTS) >= _MEMO_MAX:
            _TEXTS.clear()
        _TEXTS[id(exp)] = (exp, text)
    return text


_TEXTS: dict[int, tuple[Expectation, str]] = {}  # id(exp) -> (exp, its expected text): profiles are few


def _expected_text(exp: Expectation, value: Any) -> str:
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
    kind = measured.__class__
    if not (kind is int or kind is bool or (kind is str and len(measured) <= 100)):
        return _grade(exp, measured)
    # Equal ints, bools or (short) strs grade alike (floats may not: -0.0 prints unlike 0.0), and nodes repeat
    # a few values over and over: kept per expectation and value.
    key = (id(exp), kind, measured)
    hit = _GRADES.get(key)
    if hit is not None and hit[0] is exp:
        return hit[1]
    status = _grade(exp, measured)
    if exp.bands is None and isinstance(exp.value, _FIXED) and isinstance(exp.warn, _FIXED):
        if len(_GRADES) >= _MEMO_MAX:
            _GRADES.clear()
        _GRADES[key] = (exp, status)
    return status


_GRADES: dict[tuple[int, type, Any], tuple[Expectation, Status]] = {}  # (id(exp), type, value) -> (exp, status)


def _grade(exp: Expectation, measured: Any) -> Status:
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
    """Whether ``finding_from_expectation`` would give PASS, without building the finding: evaluators
    of hundreds of links or counters per host keep only what did not pass (a missing expectation or
    an ungradable value is not a pass)."""
    if exp is None:
        return False
    kind = measured.__class__
    if kind is int or kind is bool or kind is str:  # grade's memo, looked up here first (one call less)
        hit = _GRADES.get((id(exp), kind, measured))
        if hit is not None and hit[0] is exp:
            return hit[1] is Status.PASS
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
    unit_text = f" {unit}" if unit else ""
    what = _WHAT.get(check) or _what(check)
    prefix = f"{component}: " if component and component != "node" else ""
    verb = "expected" if status is not Status.PASS else "within"
    return f"{prefix}{what} {measured}{unit_text}, {verb} {expected}"


def _what(check: str) -> str:
    """``gpu.ecc.sram_correctable`` -> ``gpu ecc sram correctable``, kept per check id (they are few)."""
    what = check.replace(".", " ").replace("_", " ")
    if len(_WHAT) >= _MEMO_MAX:
        _WHAT.clear()
    _WHAT[check] = what
    return what


_WHAT: dict[str, str] = {}


def finding_from_expectation(host: str, check: str, exp: Expectation | None, measured: Any, *,
                             source: str, remedy: str, component: str = "node",
                             profile: Profile | None = None) -> Finding:
    """Grade ``measured`` against ``exp``; a missing expectation is SKIP (never PASS)."""
    if exp is None:
        name = profile.name if profile else "(none)"
        return Finding(host=host, check=check, component=component, status=Status.SKIP,
                       value=_scalar(measured), message=f"no expectation for {check} in profile {name}",
                       source=source)
    try:
        status = grade(exp, measured)
    except (GradingError, TypeError, ValueError) as exc:
        return Finding(host=host, check=check, component=component, status=Status.ERROR,
                       value=_scalar(measured), expected=expected_text(exp), unit=exp.unit,
                       message=f"cannot grade {check}: {exc}", source=source)
    expected = expected_text(exp)
    if status is Status.WARN and exp.warn is not None and not exp.bands:
        # Only the tighter bound was crossed: show that one, and where FAIL starts.
        expected = f"{expected_text(exp, exp.warn)} (FAIL beyond {exp.value})"
    message = describe(check, component, measured, exp.unit, expected, status)
    if status is not Status.PASS:
        message += f" (source: {short_source(exp.source)})"
    return Finding(host=host, check=check, component=component, status=status,
                   value=_scalar(measured), expected=expected, unit=exp.unit, message=message,
                   remedy=remedy if status is not Status.PASS else None, source=source)


class ComponentGrades:
    """``finding_from_expectation`` of one check on many components of a host (its GPUs, links): each distinct
    value is graded once, and another component with that value gets the same finding under its own name.
    ``describe`` starts a graded message with ``"<component>: "`` and nothing else in it names the
    component (tests compare this with ``finding_from_expectation`` itself); a float, an unhashable value
    or a component named ``node`` is graded anew each time."""

    def __init__(self, host: str, check: str, exp: Expectation | None, *, source: str, remedy: str,
                 profile: Profile) -> None:
        self.host, self.check, self.exp, self.source, self.remedy, self.profile = \
            host, check, exp, source, remedy, profile
        self._graded: dict[tuple[type, Any], Finding] = {}

    def finding(self, component: str, value: Any) -> Finding:
        key = _shared_key(component, value)
        first = self._graded.get(key) if key is not None else None
        if first is None:
            f = finding_from_expectation(self.host, self.check, self.exp, value, source=self.source,
                                         remedy=self.remedy, component=component, profile=self.profile)
            if key is not None:
                self._graded[key] = f
            return f
        prefix = f"{first.component}: "
        message = f"{component}: {first.message[len(prefix):]}" if first.message.startswith(prefix) \
            else first.message
        return Finding(host=first.host, check=first.check, status=first.status, message=message,
                       component=component, value=first.value, expected=first.expected, unit=first.unit,
                       remedy=first.remedy, source=first.source, observe=first.observe)


def _shared_key(component: str, value: Any) -> tuple[type, Any] | None:
    """The key under which ``ComponentGrades`` shares a finding, or None where it cannot."""
    if not component or component == "node" or value.__class__ is float:  # 0.0 and -0.0 print apart
        return None
    key = (value.__class__, value)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def with_note(f: Finding, note: str) -> Finding:
    """``f`` with ``note`` inserted before its ``(source: ...)`` citation (or appended when it has none)."""
    if not note:
        return f
    head, sep, tail = f.message.partition(" (source:")
    return replace(f, message=head + note + sep + tail)


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
