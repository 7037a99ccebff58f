"""Fabric probe: on NVSwitch systems, the Fabric Manager service and each GPU's fabric state.

    fabricmanager-status  systemctl is-active nvidia-fabricmanager  -> active  (rc 0; inactive/failed: rc 3)
    nvidia-smi-q-x        the gpu probe's ``nvidia-smi -q -x``: <fabric><state>Completed</state>
                          <status>Success</status><cliqueId>, <clusterUuid>, <health>...</fabric> per GPU,
                          and <platformInfo> (rack serial, slot, tray, module) (run once for every reader)

This probe owns the per-GPU fabric checks (``fabric.state``, ``fabric.status``, graded against the
profile; the R570+ identity and health block, ``fabric.health.*``, ``fabric.cluster_uuid`` and
``fabric.clique.consistent``, in ``probes/fabric_health.py``); the gpu probe reads the same field but
does not grade it. GPUs that pass a check fold into one finding (``all 8 GPUs: fabric state Completed``);
a GPU that does not keeps its own. The clique, cluster UUID and tray position of each GPU are what the
NVLink domain check (``probes/nvl_domain.py``) groups hosts by. On GB200/GB300 NVL72 compute trays the Fabric
Manager runs on the NVLink switch trays, not on the tray: their profiles expect no ``fabric.manager``.
NVSwitch SXid lines of the kernel log are graded by the xid probe (check ``fabric.sxid.<code>``),
which reads the kernel log once for both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from healthcheck.core.grading import Outcome, ValueGrades, finding_from_expectation, fold
from healthcheck.core.model import CommandResult, Finding, Status
from healthcheck.core.spec import EvalContext, ParseError, ProbeSpec
from healthcheck.probes import register
from healthcheck.probes.fabric_health import Identity, health_outcomes, identity_findings
from healthcheck.probes.gpu import BUNDLE_SOURCES, GPU_ID, parse_gpu_sources
from healthcheck.probes.gpu import COMMAND_TOOLS as GPU_TOOLS
from healthcheck.probes.gpu import COMMANDS as GPU_COMMANDS
from healthcheck.probes.gpu_model import GpuObservation, GpuObservations

FM_ID = "fabricmanager-status"
_UNIT_STATES = {"active", "inactive", "failed", "activating", "deactivating", "reloading", "unknown",
                "maintenance", "refreshing"}


POSITION = ("chassis_serial_number", "slot_number", "tray_index", "host_id", "module_id")  # platformInfo leaves kept


@dataclass(frozen=True)
class GpuFabric:
    index: int
    state: str   # Completed / In Progress / Not Started / Not Supported / N/A
    status: str  # Success or the driver's error text
    clique_id: int | None = None               # None: not reported (driver before R570, text without it)
    cluster_uuid: str | None = None
    health: Mapping[str, str] = field(default_factory=dict)    # summary, bandwidth, ... (N/A left out)
    uuid: str | None = None
    position: Mapping[str, str] = field(default_factory=dict)  # rack serial, slot, tray index, module id


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
    return tuple(_gpu_fabric(g) for g in gpus.gpus), None


def _gpu_fabric(g: GpuObservation) -> GpuFabric:
    position = {k: v for k, v in g.platform.items() if k in POSITION}
    if g.module_id is not None:
        position.setdefault("module_id", str(g.module_id))
    return GpuFabric(g.index, _fabric_word(g, "state"), _fabric_word(g, "status"), clique_id=g.fabric_clique_id,
                     cluster_uuid=g.fabric_cluster_uuid, health=dict(g.fabric_health), uuid=g.uuid,
                     position=position)


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
    outcomes: list[Outcome] = []
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
            outcomes.append(Outcome(comp, grades[check].grade(value)))
    # every GPU that is not in its expected state keeps its own finding; the others fold into one a check
    out += fold(host, GPU_ID, outcomes, total=len(obs.gpus), noun="GPUs", names=_STATE_NAMES)
    return out + _health_and_identity(host, obs.gpus, ctx)


_STATE_NAMES = {"fabric.state": "fabric state", "fabric.status": "fabric status"}


def _health_and_identity(host: str, gpus: tuple[GpuFabric, ...], ctx: EvalContext) -> list[Finding]:
    """The R570+ health block per GPU (folded: one line for all healthy GPUs) and the domain identity."""
    outcomes, missing = health_outcomes(host, [(f"gpu{g.index}", g.health) for g in gpus], ctx.profile, GPU_ID)
    names = {f"fabric.health.{leaf}": f"fabric health {leaf.replace('_', ' ')}" for leaf in
             ("bandwidth", "route_unhealthy", "route_recovery_in_progress", "access_timeout_recovery",
              "incorrect_configuration", "summary")}
    identities = [Identity(f"gpu{g.index}", g.cluster_uuid, g.clique_id) for g in gpus]
    return (fold(host, GPU_ID, outcomes, total=len(gpus), noun="GPUs", names=names) + missing
            + identity_findings(host, identities, ctx.profile, GPU_ID))


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
