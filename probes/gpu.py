"""GPU probe (spine version): how many GPUs the node sees, graded against its profile.

    nvidia-smi -L  ->  GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from healthcheck.grading import finding_from_expectation
from healthcheck.model import CommandResult, Finding, Status
from healthcheck.spec import EvalContext, ParseError, ProbeSpec
from probes import register

_GPU_LINE = re.compile(r"^GPU (?P<index>\d+): (?P<name>.+?) \(UUID: (?P<uuid>[^)]*)\)")


@dataclass(frozen=True)
class GpuListObservation:
    count: int
    names: tuple[str, ...]
    error: str | None = None  # what nvidia-smi said when it could not list GPUs


def parse_nvidia_smi_l(text: str, rc: int | None) -> GpuListObservation:
    """``nvidia-smi -L`` (any driver): one ``GPU N: name (UUID: ...)`` line per GPU; MIG lines ignored."""
    names = tuple(m["name"] for m in map(_GPU_LINE.match, text.splitlines()) if m)
    if rc != 0 or (not names and text.strip()):
        reason = text.strip().splitlines()[0] if text.strip() else f"exit code {rc}"
        if rc == 0:
            raise ParseError("nvidia-smi -L printed no GPU lines", text)
        return GpuListObservation(count=len(names), names=names, error=reason)
    return GpuListObservation(count=len(names), names=names)


def parse_gpu(outputs: Mapping[str, CommandResult]) -> GpuListObservation:
    result = outputs["nvidia-smi-l"]
    return parse_nvidia_smi_l(result.text + result.err_text, result.rc)


def evaluate_gpu(obs: GpuListObservation, ctx: EvalContext) -> list[Finding]:
    host = ctx.host.name
    if obs.error:
        return [Finding(host=host, check="gpu.driver", status=Status.FAIL, value=obs.error,
                        message=f"nvidia-smi failed: {obs.error}", source="nvidia-smi-l",
                        remedy="Check that the NVIDIA driver is loaded (lsmod | grep nvidia) and "
                               "the GPUs are on the bus (lspci); reboot or reseat if not")]
    return [finding_from_expectation(
        host, "gpu.count", ctx.profile.expect("gpu.count"), obs.count, source="nvidia-smi-l",
        profile=ctx.profile, remedy="A GPU is missing from the bus: check lspci and the kernel log "
                                    "for Xid 79; reseat or replace the GPU")]


PROBE = register(ProbeSpec(
    name="gpu",
    description="GPU count from nvidia-smi -L against the profile",
    command_map={"nvidia-smi-l": "nvidia-smi -L"},
    parse_fn=parse_gpu,
    evaluate_fn=evaluate_gpu,
    missing_tool_status=Status.FAIL,
))
