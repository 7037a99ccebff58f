"""Outcome builders shared by the GPU evaluators: one outcome per GPU and check, folded per check.

    at = GpuScope(ctx, obs, gpu, grades)     # grades: one dict per host, shared by its GPUs
    o = gpu_finding(at, "gpu.row_remap.pending", Status.FAIL, True, "No", message="row remap pending",
                    remedy=REMEDY)
    collapse(outcomes, 8, "gpu001", obs.source)   # every non-PASS GPU finding; the PASSes folded into one

Every bad GPU keeps its own finding (component ``gpu3``, its message naming the GPU and its bus id);
GPUs that pass (or skip) the same check are folded into one node-level finding that states the range
of values (``grading.fold``), so an 8-GPU host does not produce 8 identical lines per check. A check
graded against the profile is graded once per distinct value on a host (``grading.ValueGrades``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from healthcheck.core.grading import Grade, Outcome, ValueGrades, expected_text, fold
from healthcheck.core.model import Finding, JSONScalar, Status
from healthcheck.core.profiles import Expectation
from healthcheck.core.spec import EvalContext
from healthcheck.probes.gpu_model import GpuObservation, GpuObservations

SKIP = Status.SKIP
_REMEDIED = (Status.WARN, Status.FAIL, Status.ERROR)
# How a folded PASS words a check whose name alone would not say it (default: the check's words)
FOLDED_NAMES = {"gpu.pcie.replays": "PCIe replay growth since the previous run"}


class GpuScope:
    """One GPU of one host's report, with what each of its outcomes repeats (worked out once a GPU):
    the host, the source, the component (``gpu3``) and the label (``gpu3 (00000000:9B:00.0)``).
    ``grades`` (one per check) is shared by the host's GPUs."""

    __slots__ = ("component", "ctx", "gpu", "grades", "host", "label", "obs", "source")

    def __init__(self, ctx: EvalContext, obs: GpuObservations, gpu: GpuObservation,
                 grades: dict[str, ValueGrades] | None = None) -> None:
        self.ctx, self.obs, self.gpu = ctx, obs, gpu
        self.grades = {} if grades is None else grades
        self.host, self.source = ctx.host.name, obs.source
        self.component = f"gpu{gpu.index}"
        self.label = f"gpu{gpu.index} ({gpu.bus_id})" if gpu.bus_id else self.component

    def grades_of(self, check: str, remedy: str, exp: Expectation | None = None,
                  what: str | None = None) -> ValueGrades:
        """The host's grades of ``check`` (against ``exp``, else the profile's expectation)."""
        grades = self.grades.get(check)
        if grades is None:
            grades = self.grades[check] = ValueGrades(
                self.host, check, exp or self.ctx.profile.expect(check), source=self.source, remedy=remedy,
                profile=self.ctx.profile, what=what)
        return grades


def gpu_finding(at: GpuScope, check: str, status: Status, value: JSONScalar, expected: JSONScalar, *,
                message: str, remedy: str | None = None, unit: str | None = None) -> Outcome:
    """One GPU's outcome of a rule of its own; the message follows the GPU and its bus id."""
    return Outcome(at.component, Grade(check, status, value, expected, unit, message,
                                       remedy=remedy if status in _REMEDIED else None), at.label)


def graded(at: GpuScope, check: str, measured: Any, remedy: str, exp: Expectation | None = None,
           detail: str = "", optional: bool = False, what: str | None = None) -> Outcome | None:
    """``measured`` against the profile expectation ``check`` (SKIP when the profile has none).

    Returns None when the value was not reported and the output is a subset (``obs.partial``) or
    the profile does not ask for it, and when an ``optional`` check has no expectation, so absent
    fields and optional checks do not flood the report with SKIPs. ``what`` words the measurement.
    """
    grades = at.grades_of(check, remedy, exp, what)
    if grades.exp is None:
        return None if optional else Outcome("node", grades.grade(None))
    if measured is None:
        if at.obs.partial:
            return None
        return Outcome(at.component, Grade(check, SKIP, None, expected_text(grades.exp), None,
                                           f"{_what(check)} not reported by {at.source}"), at.label)
    return Outcome(at.component, grades.grade(measured), at.label, f" ({detail})" if detail else "")


def collapse(outcomes: Iterable[Outcome | None], n_gpus: int, host: str, source: str) -> list[Finding]:
    """Per check: keep non-PASS findings, fold PASS (and SKIP) outcomes into one node-level finding."""
    return fold(host, source, outcomes, n_gpus, "GPUs", FOLDED_NAMES)


def _what(check: str) -> str:
    return FOLDED_NAMES.get(check) or check.split(".", 1)[-1].replace(".", " ").replace("_", " ")
