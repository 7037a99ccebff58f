"""Fabric probe: on NVSwitch systems, the Fabric Manager service and each GPU's fabric state.

    systemctl is-active nvidia-fabricmanager     -> active            (rc 0; inactive/failed: rc 3)
    nvidia-smi --query-gpu=index,fabric.state,fabric.status --format=csv,noheader
                                                 -> 0, Completed, Success

NVSwitch SXid lines of the kernel log are graded by the xid probe (check ``fabric.sxid.<code>``),
which reads the kernel log once for both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from healthcheck.grading import finding_from_expectation
from healthcheck.model import CommandResult, Finding, Status
from healthcheck.spec import EvalContext, ParseError, ProbeSpec
from probes import register

FM_ID, STATE_ID = "fabricmanager-status", "nvidia-smi-fabric"
_UNIT_STATES = {"active", "inactive", "failed", "activating", "deactivating", "reloading", "unknown",
                "maintenance", "refreshing"}
_ROW = re.compile(r"^\s*(?P<index>\d+),\s*(?P<state>[^,]+?),\s*(?P<status>[^,]+?)\s*$")


@dataclass(frozen=True)
class GpuFabric:
    index: int
    state: str   # Completed / In Progress / Not Started / Not Supported / N/A
    status: str  # Success or the driver's error text


@dataclass(frozen=True)
class FabricObservation:
    manager: str | None = None             # systemctl is-active word; None when not collected
    gpus: tuple[GpuFabric, ...] = ()
    state_error: str | None = None         # why the fabric query gave no rows (old driver, ...)
    manager_error: str | None = None       # systemctl printed no unit state (no systemd, no bus)


def parse_systemctl_is_active(text: str) -> str:
    """``systemctl is-active UNIT``: one state word (any rc); anything else raises."""
    word = text.strip().splitlines()[0].strip() if text.strip() else ""
    if word not in _UNIT_STATES:
        raise ParseError(f"systemctl is-active printed {word!r}, not a unit state", text)
    return word


def parse_fabric_query(text: str) -> tuple[GpuFabric, ...]:
    """``--query-gpu=index,fabric.state,fabric.status --format=csv,noheader`` (corpus
    ``nvidia-smi/h100-query-gpu-allfields-csv-load``: ``Completed``/``Success``; ``[N/A]`` kept)."""
    rows = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("index"):
            continue
        m = _ROW.match(line)
        if not m:
            raise ParseError(f"fabric query: unexpected line {line!r}", text)
        rows.append(GpuFabric(int(m["index"]), m["state"].strip("[]"), m["status"].strip("[]")))
    return tuple(rows)


def parse_fabric(outputs: Mapping[str, CommandResult]) -> FabricObservation:
    fm, manager, manager_error = outputs.get(FM_ID), None, None
    if fm is not None:
        try:
            manager = parse_systemctl_is_active(fm.text)
        except ParseError as exc:  # graded by the profile: ERROR where FM is expected, else SKIP
            manager_error = f"{exc}: {(fm.err_text or fm.text).strip()[:160]}"
    query = outputs.get(STATE_ID)
    if query is None:
        return FabricObservation(manager=manager, manager_error=manager_error,
                                 state_error="nvidia-smi fabric query not collected")
    if query.rc != 0:
        first = (query.text + query.err_text).strip().splitlines()
        return FabricObservation(manager=manager, manager_error=manager_error,
                                 state_error=first[0] if first else f"rc {query.rc}")
    return FabricObservation(manager=manager, manager_error=manager_error, gpus=parse_fabric_query(query.text))


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
        out.append(Finding(host=host, check="fabric.state", status=status, source=STATE_ID,
                           message=f"GPU fabric state not available: {obs.state_error}"))
    for gpu in obs.gpus:
        comp = f"gpu{gpu.index}"
        for check, exp, value in (("fabric.state", state_exp, gpu.state),
                                  ("fabric.status", status_exp, gpu.status)):
            out.append(finding_from_expectation(host, check, exp, value, source=STATE_ID, remedy=REMEDY_STATE,
                                                component=comp, profile=ctx.profile))
    return out


PROBE = register(ProbeSpec(
    name="fabric",
    description="NVSwitch fabric: nvidia-fabricmanager active, every GPU's fabric state Completed/Success",
    command_map={FM_ID: "systemctl is-active nvidia-fabricmanager",
                 STATE_ID: "nvidia-smi --query-gpu=index,fabric.state,fabric.status --format=csv,noheader"},
    parse_fn=parse_fabric,
    evaluate_fn=evaluate_fabric,
))
