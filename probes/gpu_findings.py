"""Finding builders shared by the GPU evaluators: one finding per GPU, folded per check.

    at = GpuScope(ctx, obs, gpu)
    f = gpu_finding(at, "gpu.row_remap.pending", Status.FAIL, True, "No", message="row remap pending",
                    remedy=REMEDY)
    collapse(findings, n_gpus=8)   # keeps every non-PASS GPU finding, folds the PASSes into one

Every bad GPU keeps its own finding (component ``gpu3``); GPUs that pass (or skip) the same check
are folded into one node-level finding that states the range of values, so an 8-GPU host does
not produce 8 identical lines per check. A passing or skipped GPU is a light ``FoldableGpu``
until ``collapse`` knows whether it is folded (most are) or left alone (then it becomes the
Finding it stands for).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from healthcheck.probes.gpu_model import GpuObservation, GpuObservations

from healthcheck.core.grading import describe, expected_text, finding_from_expectation, grade, passes
from healthcheck.core.model import Finding, JSONScalar, Status
from healthcheck.core.profiles import Expectation
from healthcheck.core.spec import EvalContext

PASS, SKIP = Status.PASS, Status.SKIP


class GpuScope:
    """One GPU of one host's report, with what each of its findings repeats (worked out once a GPU):
    the host, the source, the component (``gpu3``) and the label (``gpu3 (00000000:9B:00.0)``)."""

    __slots__ = ("component", "ctx", "gpu", "host", "label", "obs", "source")

    def __init__(self, ctx: EvalContext, obs: GpuObservations, gpu: GpuObservation) -> None:
        self.ctx, self.obs, self.gpu = ctx, obs, gpu
        self.host, self.source = ctx.host.name, obs.source
        self.component = f"gpu{gpu.index}"
        self.label = f"gpu{gpu.index} ({gpu.bus_id})" if gpu.bus_id else self.component


class FoldableGpu:
    """A per-GPU PASS or SKIP with the fields ``collapse`` folds; ``finding()`` is the Finding it stands
    for. Its message is built only then: ``text`` after the GPU's label, or (``text`` None) the graded
    value's ``describe`` line followed by ``detail``."""

    __slots__ = ("at", "check", "detail", "expected", "status", "text", "unit", "value")

    def __init__(self, at: GpuScope, check: str, status: Status, value: JSONScalar, expected: JSONScalar,
                 unit: str | None, text: str | None, detail: str = "") -> None:
        self.at, self.check, self.status, self.value, self.expected = at, check, status, value, expected
        self.unit, self.text, self.detail = unit, text, detail

    @property
    def message(self) -> str:
        if self.text is not None:
            return f"{self.at.label}: {self.text}"
        message = describe(self.check, self.at.label, self.value, self.unit, self.expected, PASS)
        return message + (f" ({self.detail})" if self.detail else "")

    def finding(self) -> Finding:
        at = self.at
        return Finding(host=at.host, check=self.check, status=self.status, component=at.component,
                       value=self.value, expected=self.expected, unit=self.unit, message=self.message,
                       source=at.source)


GpuResult = Finding | FoldableGpu


def built(result: GpuResult) -> Finding:
    return result.finding() if result.__class__ is FoldableGpu else result  # type: ignore[union-attr]


def gpu_finding(at: GpuScope, check: str, status: Status, value: JSONScalar, expected: JSONScalar, *,
                message: str, remedy: str | None = None, unit: str | None = None) -> GpuResult:
    """A finding about one GPU; ``message`` is prefixed with the GPU and its bus id."""
    if status is PASS or status is SKIP:
        return FoldableGpu(at, check, status, value, expected, unit, message)
    return Finding(host=at.host, check=check, status=status, component=at.component,
                   value=value, expected=expected, unit=unit, message=f"{at.label}: {message}",
                   remedy=remedy if status in (Status.WARN, Status.FAIL, Status.ERROR) else None,
                   source=at.source)


def graded(at: GpuScope, check: str, measured: Any, remedy: str, exp: Expectation | None = None,
           detail: str = "", optional: bool = False) -> GpuResult | None:
    """``measured`` against the profile expectation ``check`` (SKIP when the profile has none).

    Returns None when the value was not reported and the output is a subset (``obs.partial``) or
    the profile does not ask for it, and when an ``optional`` check has no expectation, so absent
    fields and optional checks do not flood the report with SKIPs.
    """
    exp = exp or at.ctx.profile.expect(check)
    if exp is None:
        if optional:
            return None
        return Finding(host=at.host, check=check, status=SKIP, source=at.source,
                       message=f"no expectation for {check} in profile {at.ctx.profile.name}")
    if measured is None:
        if at.obs.partial:
            return None
        return FoldableGpu(at, check, SKIP, None, expected_text(exp), None,
                           f"{_what(check)} not reported by {at.source}")
    if isinstance(measured, _PLAIN) and passes(exp, measured):
        # What finding_from_expectation would give, its message built only if needed: most GPUs pass.
        return FoldableGpu(at, check, PASS, measured, expected_text(exp), exp.unit, None, detail)
    f = finding_from_expectation(at.host, check, exp, measured, source=at.source, remedy=remedy,
                                 component=at.component, profile=at.ctx.profile)
    message = f.message.replace(f"{at.component}: ", f"{at.label}: ", 1)
    if not message.startswith(at.label):
        message = f"{at.label}: {message}"
    return replace(f, message=message + (f" ({detail})" if detail else ""))


_PLAIN = (str, int, float, bool)


def grade_value(exp: Expectation | None, measured: Any) -> Status | None:
    """The status of ``measured`` against ``exp`` (None without an expectation or a value)."""
    if exp is None or measured is None:
        return None
    return grade(exp, measured)


def collapse(findings: Iterable[GpuResult | None], n_gpus: int) -> list[Finding]:
    """Per check: keep non-PASS findings, fold PASS (and SKIP) findings into one node-level finding."""
    groups: dict[str, list[GpuResult]] = {}
    for f in findings:
        if f is not None:
            group = groups.get(f.check)
            if group is None:
                groups[f.check] = [f]
            else:
                group.append(f)
    out: list[Finding] = []
    for check, group in groups.items():
        if all(f.__class__ is FoldableGpu and f.status is PASS for f in group):  # most checks of most hosts
            out.append(group[0].finding() if len(group) == 1 else _fold(check, PASS, group, n_gpus))
            continue
        node: list[GpuResult] = []
        bad: list[GpuResult] = []
        folded: dict[Status, list[GpuResult]] = {PASS: [], SKIP: []}
        for f in group:
            if f.__class__ is FoldableGpu:
                folded[f.status].append(f)  # type: ignore[union-attr]
            elif f.component == "node":  # type: ignore[union-attr]
                node.append(f)
            else:
                folded.get(f.status, bad).append(f)
        out.extend(dict.fromkeys(map(built, node)))  # identical node-level findings (e.g. "no expectation") once
        out.extend(map(built, bad))
        for status, same in folded.items():
            if len(same) == 1:
                out.append(built(same[0]))
            elif same:
                out.append(_fold(check, status, same, n_gpus))
    return out


def _fold(check: str, status: Status, group: list[GpuResult], n_gpus: int) -> Finding:
    first = group[0]
    values = [f.value for f in group]
    shown = _shown(values)
    if len(group) == n_gpus:
        who = f"all {n_gpus} GPUs"
    else:
        who = ",".join(f.at.component if f.__class__ is FoldableGpu else f.component for f in group)  # type: ignore[union-attr]
    unit = f" {first.unit}" if first.unit else ""
    if status is PASS:
        message = f"{who}: {_what(check)} {shown}{unit}" + (f", within {first.expected}" if first.expected else "")
    else:
        message = f"{who}: {first.message.split(': ', 1)[-1]}"
    at = first.at if first.__class__ is FoldableGpu else first  # type: ignore[union-attr]
    return Finding(host=at.host, check=check, status=status, component="node",
                   value=shown if isinstance(shown, str) else first.value, expected=first.expected,
                   unit=first.unit, message=message, source=at.source)


def _shown(values: list[JSONScalar]) -> JSONScalar:
    """The folded value: the one value, ``min-max`` of differing numbers, else ``mixed``."""
    first = values[0]
    kind = first.__class__
    if (kind is int or kind is str or kind is bool) and all(v.__class__ is kind and v == first for v in values):
        return first  # every GPU alike: what the general rule below gives, sooner
    numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if numbers and len(numbers) == len(values) and min(numbers) != max(numbers):
        return f"{min(numbers):g}-{max(numbers):g}"
    return values[0] if len(set(map(str, values))) == 1 else "mixed"


_WHAT = {"gpu.pcie.replays": "PCIe replay growth since the previous run"}


def _what(check: str) -> str:
    what = _WHAT.get(check)
    if what is None:
        what = _WHAT[check] = check.split(".", 1)[-1].replace(".", " ").replace("_", " ")
    return what
