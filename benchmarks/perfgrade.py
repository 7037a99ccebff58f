"""Per-GPU and per-path throughput grading shared by ``gpuperf`` and ``nvbandwidth``: against the profile and
against the node's own GPUs.

    readings = [Reading("gpu0", 702.3), Reading("gpu1", 698.8), Reading("gpu2", 480.1, "(0000:4c:00.0)")]
    grade_readings("gpu001", "gpuperf.gemm", "gpuperf.gemm.bf16_tflops", readings, profile,
                   source="gpuperf.gpuperf.node.gpu001", remedy="...", what="bf16 GEMM", unit="TFLOPS")
    # gpuperf.gemm          per GPU: fraction of the profile's value (bands), or one SKIP "no expectation"
    # gpuperf.gemm.siblings gpu2 FAIL "68% of the median of its 2 sibling GPUs"; else one PASS for the node

Siblings: each reading is divided by the median of the *other* readings of the same kind on the node, so a
GPU 30% slower than its siblings is found without any profile (two GPUs are compared with each other; one
alone is SKIP). The ratio is graded against the profile's ``perf.sibling_ratio`` expectation, else the
defaults in ``healthcheck.core.defaults`` (FAIL below ``sibling_fail_fraction``, WARN below
``sibling_warn_fraction``), whose source says they are a project choice.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from healthcheck.benchmarks.bands import band_finding
from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.grading import GradingError, grade, short_source
from healthcheck.core.model import Finding, Status
from healthcheck.core.profiles import Expectation, Profile

SIBLING_KEY = "perf.sibling_ratio"
DEFAULT_SIBLINGS = Expectation(
    key=SIBLING_KEY, op="ge", value=DEFAULTS.sibling_fail_fraction, warn=DEFAULTS.sibling_warn_fraction,
    unit="ratio", source="healthcheck default (core/defaults.py sibling_fail_fraction/sibling_warn_fraction): a "
    "project choice; identical GPUs of one node measure within a few percent of each other, so a GPU under "
    "80% of its siblings' median is broken or throttled, under 90% worth a look")


@dataclass(frozen=True)
class Reading:
    """One measurement: ``component`` names the GPU or path (``gpu3``, ``gpu0->gpu1``); ``label`` adds its
    model or PCI address for messages."""

    component: str
    value: float
    label: str = ""


def grade_readings(host: str, check: str, key: str, readings: Sequence[Reading], profile: Profile, *,
                   source: str, remedy: str, what: str, unit: str, scale: float = 1.0) -> list[Finding]:
    """Profile findings (per reading) and sibling findings (``<check>.siblings``) for one kind of reading.
    ``scale`` converts a reading to the unit of the profile's expectation (nvbandwidth's local copy x2)."""
    if not readings:
        return []
    return (profile_findings(host, check, key, readings, profile, source=source, remedy=remedy, what=what,
                             unit=unit, scale=scale)
            + sibling_findings(host, f"{check}.siblings", readings, profile, source=source, remedy=remedy,
                               what=what, unit=unit))


def profile_findings(host: str, check: str, key: str, readings: Sequence[Reading], profile: Profile, *,
                     source: str, remedy: str, what: str, unit: str, scale: float = 1.0) -> list[Finding]:
    exp = profile.expect(key)
    if exp is None:
        values = [r.value * scale for r in readings]
        return [Finding(host=host, check=check, status=Status.SKIP, source=source, unit=unit,
                        value=round(statistics.median(values), 2),
                        message=f"{what}: no expectation {key} in profile {profile.name} (measured on "
                                f"{len(values)} {_things(readings)}: min {min(values):.1f}, median "
                                f"{statistics.median(values):.1f} {unit}); graded against the node's own "
                                "GPUs only")]
    return [band_finding(host, check, exp, r.value * scale, source=source, remedy=remedy, profile=profile,
                         what=f"{what}{' ' + r.label if r.label else ''}", component=r.component, key=key)
            for r in readings]


def sibling_findings(host: str, check: str, readings: Sequence[Reading], profile: Profile, *, source: str,
                     remedy: str, what: str, unit: str) -> list[Finding]:
    """Each reading against the median of the others: the non-passing ones, else one PASS for the node."""
    if len(readings) < 2:
        return [Finding(host=host, check=check, status=Status.SKIP, source=source,
                        message=f"{what}: only one {_things(readings)[:-1]} measured, no sibling to compare with")]
    exp = profile.expect(SIBLING_KEY) or DEFAULT_SIBLINGS
    graded = []
    for i, r in enumerate(readings):
        others = [o.value for j, o in enumerate(readings) if j != i]
        median = statistics.median(others)
        ratio = r.value / median if median > 0 else 1.0
        try:
            status = grade(exp, round(ratio, 3))
        except (GradingError, TypeError, ValueError) as exc:
            return [Finding(host=host, check=check, status=Status.ERROR, source=source,
                            message=f"cannot grade {check} against {exp.key}: {exc}")]
        graded.append((r, ratio, median, status, len(others)))
    bad = [g for g in graded if g[3] is not Status.PASS]
    if not bad:
        low = min(graded, key=lambda g: g[1])
        return [Finding(host=host, check=check, status=Status.PASS, source=source, value=round(low[1], 3),
                        unit="ratio", expected=f">= {exp.warn if exp.warn is not None else exp.value}",
                        message=f"{what}: all {len(graded)} {_things(readings)} within "
                                f"{_pct(exp.warn if exp.warn is not None else exp.value)} of their siblings' median "
                                f"(lowest {low[0].component} at {low[1]:.0%})")]
    return [Finding(host=host, check=check, component=r.component, status=status, value=round(ratio, 3), unit="ratio",
                    expected=f">= {exp.value} (WARN below {exp.warn})" if exp.warn is not None else f">= {exp.value}",
                    remedy=remedy, source=source,
                    message=f"{r.component}{' ' + r.label if r.label else ''}: {what} {r.value:.1f} {unit} = "
                            f"{ratio:.0%} of the median of its {n} sibling{'s' if n > 1 else ''} ({median:.1f} "
                            f"{unit}); expected >= {_pct(exp.value)}"
                            f"{f', WARN below {_pct(exp.warn)}' if exp.warn is not None else ''} "
                            f"(source: {short_source(exp.source)})")
            for r, ratio, median, status, n in bad]


def _pct(fraction: object) -> str:
    try:
        return f"{float(fraction):.0%}"  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(fraction)


def _things(readings: Sequence[Reading]) -> str:
    return "paths" if any("->" in r.component for r in readings) else "GPUs"
