"""Fraction-of-expected grading for benchmark metrics (busbw, GFLOPS, bandwidth).

    exp = profile.expect("nccl.all_reduce.node.busbw_gbps")   # value 480, bands {acceptable: 0.6}
    band_finding("gpu001", "nccl.all_reduce.node.busbw", exp, 290.0, source="nccl-...",
                 remedy="...", profile=profile, what="busbw")
    # WARN  "all_reduce node busbw 290.0 GB/s = 60% of 480 GB/s (acceptable >= 60%, warn >= 50%)"

Bands missing from the profile come from ``healthcheck.core.defaults`` (excellent 0.8, acceptable 0.6,
warn 0.5): >= acceptable is PASS (``excellent`` only labels the message), >= warn is WARN, below
is FAIL. An expectation without bands (e.g. a latency ``op: le``) is graded by ``grading.grade``.
"""

from __future__ import annotations

import dataclasses

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.grading import GradingError, finding_from_expectation, grade_bands
from healthcheck.core.model import Finding, Status
from healthcheck.core.profiles import Expectation, Profile

DEFAULT_BANDS = {"excellent": DEFAULTS.busbw_excellent, "acceptable": DEFAULTS.busbw_acceptable,
                 "warn": DEFAULTS.busbw_warn}


def merged_bands(exp: Expectation) -> dict[str, float]:
    return {**DEFAULT_BANDS, **{k: float(v) for k, v in (exp.bands or {}).items()}}


def band_finding(host: str, check: str, exp: Expectation | None, measured: float, *, source: str,
                 remedy: str, profile: Profile, what: str, component: str = "node",
                 key: str | None = None, note: str = "", of: str = "expected") -> Finding:
    """Grade ``measured`` as a fraction of ``exp.value`` (named ``of`` in the message: "expected",
    "Rpeak"); no expectation is SKIP, never PASS."""
    if exp is None:
        return Finding(host=host, check=check, component=component, status=Status.SKIP,
                       value=round(measured, 3), source=source,
                       message=f"{_prefix(component)}{what} {measured:g}: no expectation "
                               f"{key or check} in profile {profile.name}")
    if not exp.bands and exp.op not in ("ge", "gt"):
        return finding_from_expectation(host, check, exp, round(measured, 3), source=source, remedy=remedy,
                                        component=component, profile=profile)
    bands = merged_bands(exp)
    try:
        status = grade_bands(dataclasses.replace(exp, bands=bands), measured)
    except GradingError as exc:
        return Finding(host=host, check=check, component=component, status=Status.ERROR,
                       value=round(measured, 3), unit=exp.unit, source=source,
                       message=f"cannot grade {check}: {exc}")
    unit = f" {exp.unit}" if exp.unit else ""
    ratio = measured / float(exp.value)
    label = ("excellent" if ratio >= bands["excellent"] else "acceptable" if status is Status.PASS
             else "degraded" if status is Status.WARN else "broken")
    message = (f"{_prefix(component)}{what} {measured:.1f}{unit} = {ratio:.0%} of {of} {exp.value}{unit}"
               f" ({label}; pass >= {bands['acceptable']:.0%}, warn >= {bands['warn']:.0%}){note}")
    if status is not Status.PASS:
        message += f" (source: {exp.source})"
    return Finding(host=host, check=check, component=component, status=status, value=round(measured, 3),
                   expected=f">= {bands['acceptable']:.0%} of {exp.value}{unit}", unit=exp.unit,
                   message=message, remedy=remedy if status is not Status.PASS else None, source=source)


def _prefix(component: str) -> str:
    return f"{component}: " if component and component != "node" else ""
