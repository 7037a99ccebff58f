"""Fabric probe: on NVSwitch systems, the Fabric Manager service and each GPU's fabric state.

    fabricmanager-status  systemctl is-active nvidia-fabricmanager  -> active  (rc 0; inactive/failed: rc 3)
    nvidia-smi-q-x        the gpu probe's ``nvidia-smi -q -x``: <fabric><state>Completed</state>
                          <status>Success</status></fabric> per GPU (run once for every probe reading it)

This probe owns the per-GPU fabric checks (``fabric.state``, ``fabric.status``, graded against the
profile); the gpu probe reads the same field but does not grade it. NVSwitch SXid lines of the
kernel log are graded by the xid probe (check ``fabric.sxid.<code>``), which reads the kernel log
once for both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from healthcheck.core.grading import ValueGrades, finding_from_expectation
from healthcheck.core.model import CommandResult, Finding, Status
from healthcheck.core.spec import EvalContext, ParseError, ProbeSpec
from healthcheck.probes import register
from healthcheck.probes.gpu import BUNDLE_SOURCES, GPU_ID, parse_gpu_sources
from healthcheck.probes.gpu import COMMAND_TOOLS as GPU_TOOLS
from healthcheck.probes.gpu import COMMANDS as GPU_COMMANDS
from healthcheck.probes.gpu_model import GpuObservation, GpuObservations

FM_ID = "fabricmanager-status"
_UNIT_STATES = {"active", "inactive", "failed", "activating", "deactivating", "reloading", "unknown",
                "maintenance", "refreshing"}


@dataclass(frozen=True)
class GpuFabric:
    index: int
    state: str   # Completed / In Progress / Not Started / Not Supported / N/A
    status: str  # Success or the driver's error text


@dataclass(frozen=True)
class FabricObservation:
    manager: str | None = None             # systemctl is-active word; None when not collected
    gpus: tuple[GpuFabric, ...] = ()
    state_error: str | None = None         # why no GPU fabric state was read (old driver, ...)
    manager_error: str | None = None       # systemctl printed no unit state (no systemd, no bus)


def parse_systemctl_is_active(text: str) -> str:
    """``systemctl is-active UNIT``: one state word (any rc); anything else raises."""
    word = text.strip().splitlines()[0].strip() if text.strip() else ""
    if word not in _UNIT_STATES:
        raise ParseError(f"systemctl is-active printed {word!r}, not a unit state", text)
    return word


def _fabric_word(gpu: GpuObservation, field: str) -> str:
    """The printed state/status; nvidia-smi's "N/A" (kept as None by the GPU model) or its error."""
    value = getattr(gpu, f"fabric_{field}")
    if value is not None:
        return value
    return "Unknown Error" if f"fabric/{field}" in gpu.unreadable else "N/A"


def fabric_states(gpus: GpuObservations) -> tuple[tuple[GpuFabric, ...], str | None]:
    """Each GPU's fabric state and status, or () and why none was reported."""
    if not any(g.fabric_state is not None for g in gpus.gpus):
        if gpus.errors and not gpus.gpus:
            return (), f"nvidia-smi reports: {gpus.errors[0].message}"
        return (), (f"no GPU reports a fabric state in {gpus.source} (driver older than R530, or GPUs "
                    "without NVSwitch fabric support)" if gpus.gpus else f"{gpus.source} lists no GPU")
    return tuple(GpuFabric(g.index, _fabric_word(g, "state"), _fabric_word(g, "status")) for g in gpus.gpus), None


def parse_fabric(outputs: Mapping[str, CommandResult]) -> FabricObservation:
    fm, manager, manager_error = outputs.get(FM_ID), None, None
    if fm is not None:
        try:
            manager = parse_systemctl_is_active(fm.text)
        except ParseError as exc:  # graded by the profile: ERROR where FM is expected, else SKIP
            manager_error = f"{exc}: {(fm.err_text or fm.text).strip()[:160]}"
    try:
        gpus = parse_gpu_sources(outputs)
        states, why = fabric_states(gpus) if gpus is not None else ((), "nvidia-smi output not collected")
    except ParseError as exc:  # the gpu probe reports the parse ERROR; here the state is just unknown
        states, why = (), f"nvidia-smi output unreadable: {exc}"
    return FabricObservation(manager=manager, manager_error=manager_error, gpus=states, state_error=why)


REMEDY_FM = ("Start the Fabric Manager (systemctl enable --now nvidia-fabricmanager); its version must match "
             "the driver's exactly; read /var/log/fabricmanager.log if it does not stay active")
REMEDY_STATE = ("The GPU did not join the NVLink fabric: restart nvidia-fabricmanager, check "
                "/var/log/fabricmanager.log and the kernel log for SXid lines, then reset the GPUs or reboot")


def evaluate_fabric(obs: FabricObservation, ctx: EvalContext) -> list[Finding]:
    """Fabric Manager active and every GPU's fabric state Completed/Success (NVSwitch profiles only)."""
    host, out = ctx.host.name, []
    if obs.manager_error is not None:
        status = Status.SKIP if ctx.profile.expect("fabric.manager") is None else Status.ERROR
        out.append(Finding(host=host, check="fabric.manager", status=status, source=FM_ID,
                           message=f"Fabric Manager state unknown: {obs.manager_error}"))
    if obs.manager is not None:
        out.append(finding_from_expectation(host, "fabric.manager", ctx.profile.expect("fabric.manager"),
                                            obs.manager, source=FM_ID, remedy=REMEDY_FM, profile=ctx.profile))
    state_exp, status_exp = ctx.profile.expect("fabric.state"), ctx.profile.expect("fabric.status")
    if obs.state_error is not None:
        status = Status.SKIP if state_exp is None else Status.ERROR
        out.append(Finding(host=host, check="fabric.state", status=status, source=GPU_ID,
                           message=f"GPU fabric state not available: {obs.state_error}"))
    grades = {check: ValueGrades(host, check, exp, source=GPU_ID, remedy=REMEDY_STATE, profile=ctx.profile)
              for check, exp in (("fabric.state", state_exp), ("fabric.status", status_exp))}
    for gpu in obs.gpus:
        comp = f"gpu{gpu.index}"
        for check, exp, value in (("fabric.state", state_exp, gpu.state),
                                  ("fabric.status", status_exp, gpu.status)):
            own = not_joined(gpu) if exp is None and check == "fabric.state" else None
            if own is not None:  # the GPU says so itself: no profile needed, like a pending row remap
                out.append(Finding(host=host, check=check, status=Status.WARN, component=comp, value=value,
                                   expected="Completed / Success", source=GPU_ID, remedy=REMEDY_STATE,
                                   message=f"{comp} {own} (graded without a fabric expectation in profile "
                                           f"{ctx.profile.name}: the GPU reports it itself)"))
                continue
            out.append(grades[check].finding(comp, value))
    return out


_PENDING = {"In Progress": "has not finished joining", "Not Started": "has not started joining"}
_NO_STATUS = {"Success", "N/A", "Not Supported"}


def not_joined(gpu: GpuFabric) -> str | None:
    """What a GPU reports about itself when it is not (yet) in the NVLink fabric, or None.

    NVML's GPU fabric state is Not Started / In Progress until registration with the Fabric Manager
    completes, and the status then carries the result (Success, or the error)."""
    if gpu.state in _PENDING:
        return f"reports fabric state {gpu.state!r}: it {_PENDING[gpu.state]} the NVLink fabric"
    if gpu.state == "Completed" and gpu.status not in _NO_STATUS:
        return f"finished fabric registration with status {gpu.status!r}: it failed to join the NVLink fabric"
    return None


PROBE = register(ProbeSpec(
    name="fabric",
    description="NVSwitch fabric: nvidia-fabricmanager active, every GPU's fabric state Completed/Success",
    command_map={FM_ID: "systemctl is-active nvidia-fabricmanager", GPU_ID: GPU_COMMANDS[GPU_ID]},
    command_tools={FM_ID: ("systemctl",), **GPU_TOOLS},
    parse_fn=parse_fabric,
    evaluate_fn=evaluate_fabric,
    accepts=BUNDLE_SOURCES,
))
