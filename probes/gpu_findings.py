"""Finding builders shared by the GPU evaluators: one finding per GPU, folded per check.

    f = gpu_finding(ctx, obs, gpu, "gpu.row_remap.pending", Status.FAIL, True, "No",
                    message="row remap pending", remedy=REMEDY)
    collapse(findings, n_gpus=8)   # keeps every non-PASS GPU finding, folds the PASSes into one

Every bad GPU keeps its own finding (component ``gpu3``); GPUs that pass the same check are
folded into one node-level PASS that states the range of values, so an 8-GPU host does not
produce 8 identical lines per check. A passing GPU is a light ``PassingGpu`` until ``collapse``
knows whether it is folded (most are) or left alone (then it becomes the Finding it stands for).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from healthcheck.probes.gpu_model import GpuObservation, GpuObservations

from healthcheck.grading import describe, expected_text, finding_from_expectation, grade, passes
from healthcheck.model import Finding, JSONScalar, Status
from healthcheck.profiles import Expectation
from healthcheck.spec import EvalContext


class PassingGpu:
    """A per-GPU PASS with the fields ``collapse`` folds; ``finding()`` is the Finding it stands for,
    its message built only then (``message`` may be a function that builds it)."""

    __slots__ = ("_message", "check", "component", "expected", "host", "source", "unit", "value")
    status = Status.PASS

    def __init__(self, host: str, check: str, component: str, value: JSONScalar, expected: JSONScalar,
                 unit: str | None, source: str, message: str | Callable[[], str]) -> None:
        self.host, self.check, self.component, self.value = host, check, component, value
        self.expected, self.unit, self.source, self._message = expected, unit, source, message

    def finding(self) -> Finding:
        message = self._message if isinstance(self._message, str) else self._message()
        return Finding(host=self.host, check=self.check, status=Status.PASS, component=self.component,
                       value=self.value, expected=self.expected, unit=self.unit, message=message,
                       source=self.source)


GpuResult = Finding | PassingGpu


def built(result: GpuResult) -> Finding:
    return result.finding() if isinstance(result, PassingGpu) else result


def component(gpu: GpuObservation) -> str:
    return f"gpu{gpu.index}"


def label(gpu: GpuObservation) -> str:
    """``gpu3 (00000000:9B:00.0)`` for messages."""
    return f"gpu{gpu.index} ({gpu.bus_id})" if gpu.bus_id else f"gpu{gpu.index}"


def gpu_finding(ctx: EvalContext, obs: GpuObservations, gpu: GpuObservation, check: str, status: Status,
                value: JSONScalar, expected: JSONScalar, *, message: str, remedy: str | None = None,
                unit: str | None = None) -> GpuResult:
    """A finding about one GPU; ``message`` is prefixed with the GPU and its bus id."""
    if status is Status.PASS:
        return PassingGpu(ctx.host.name, check, component(gpu), value, expected, unit, obs.source,
                          f"{label(gpu)}: {message}")
    return Finding(host=ctx.host.name, check=check, status=status, component=component(gpu),
                   value=value, expected=expected, unit=unit, message=f"{label(gpu)}: {message}",
                   remedy=remedy if status in (Status.WARN, Status.FAIL, Status.ERROR) else None,
                   source=obs.source)


def graded(ctx: EvalContext, obs: GpuObservations, gpu: GpuObservation, check: str, measured: Any,
           remedy: str, exp: Expectation | None = None, detail: str = "",
           optional: bool = False) -> GpuResult | None:
    """``measured`` against the profile expectation ``check`` (SKIP when the profile has none).

    Returns None when the value was not reported and the output is a subset (``obs.partial``) or
    the profile does not ask for it, and when an ``optional`` check has no expectation, so absent
    fields and optional checks do not flood the report with SKIPs.
    """
    exp = exp or ctx.profile.expect(check)
    if exp is None and optional:
        return None
    if exp is None:
        return Finding(host=ctx.host.name, check=check, status=Status.SKIP, source=obs.source,
                       message=f"no expectation for {check} in profile {ctx.profile.name}")
    if measured is None:
        if obs.partial or exp is None:
            return None
        return gpu_finding(ctx, obs, gpu, check, Status.SKIP, None, expected_text(exp),
                           message=f"{_what(check)} not reported by {obs.source}")
    if passes(exp, measured) and isinstance(measured, (str, int, float, bool)):
        # What finding_from_expectation would give, built once: most GPUs pass most checks.
        expected, unit, who = expected_text(exp), exp.unit, label(gpu)
        return PassingGpu(ctx.host.name, check, component(gpu), measured, expected, unit, obs.source,
                          lambda: describe(check, who, measured, unit, expected, Status.PASS)
                          + (f" ({detail})" if detail else ""))
    f = finding_from_expectation(ctx.host.name, check, exp, measured, source=obs.source, remedy=remedy,
                                 component=component(gpu), profile=ctx.profile)
    message = f.message.replace(f"{component(gpu)}: ", f"{label(gpu)}: ", 1)
    if not message.startswith(label(gpu)):
        message = f"{label(gpu)}: {message}"
    return replace(f, message=message + (f" ({detail})" if detail else ""))


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
            groups.setdefault(f.check, []).append(f)
    out: list[Finding] = []
    for check, group in groups.items():
        node: list[GpuResult] = []
        bad: list[GpuResult] = []
        folded: dict[Status, list[GpuResult]] = {Status.PASS: [], Status.SKIP: []}
        for f in group:
            if f.component == "node":
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
    numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if numbers and len(numbers) == len(values) and min(numbers) != max(numbers):
        shown: JSONScalar = f"{min(numbers):g}-{max(numbers):g}"
    else:
        shown = values[0] if len(set(map(str, values))) == 1 else "mixed"
    who = f"all {n_gpus} GPUs" if len(group) == n_gpus else ",".join(f.component for f in group)
    unit = f" {first.unit}" if first.unit else ""
    if status is Status.PASS:
        message = f"{who}: {_what(check)} {shown}{unit}" + (f", within {first.expected}" if first.expected else "")
    else:
        message = f"{who}: {first.message.split(': ', 1)[-1]}"
    return Finding(host=first.host, check=check, status=status, component="node",
                   value=shown if isinstance(shown, str) else first.value, expected=first.expected,
                   unit=first.unit, message=message, source=first.source)


_WHAT = {"gpu.pcie.replays": "PCIe replay growth since the previous run"}


def _what(check: str) -> str:
    return _WHAT.get(check) or check.split(".", 1)[-1].replace(".", " ").replace("_", " ")
