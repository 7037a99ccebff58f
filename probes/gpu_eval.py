"""Grade GPU observations: nvidia-smi errors, inventory, configuration, PCIe, power, reset.

    findings = evaluate_gpu(observations, ctx)   # every check, every GPU; PASSes folded per check

Memory health, thermals and clock events are in ``probes/gpu_eval_health.py``. Thresholds come
from the host's profile (``gpu.*`` expectations, each with its source); a check whose
expectation is missing is SKIP. Profile-free rules use only what the GPU itself reports
(its own max PCIe width, the driver's reset/recovery flags). The NVSwitch fabric state is graded
by the fabric probe (``fabric.state``/``fabric.status``), which reads the same report.
Driver, CUDA and VBIOS versions are recorded in the observations but graded only by the versions
probe (``version.driver``/``version.cuda``/``version.vbios``, dotted-number compare), which reads
the same ``nvidia-smi -q -x``: one pinned version gives one finding, never two.
"""

from __future__ import annotations

from collections.abc import Mapping

from healthcheck.core.grading import Outcome, ValueGrades, expected_text, finding_from_expectation
from healthcheck.core.model import Finding, Status
from healthcheck.core.spec import EvalContext
from healthcheck.probes.gpu_eval_health import evaluate_gpu_health
from healthcheck.probes.gpu_findings import GpuScope, collapse, gpu_finding, graded
from healthcheck.probes.gpu_model import GpuObservation, GpuObservations
from healthcheck.probes.nvidia_smi_log import SmiError

_ERROR_CHECKS = {"gpu_lost": "gpu.lost", "inforom_corrupted": "gpu.inforom"}
_ERROR_REMEDY = {
    "driver_not_loaded": "The NVIDIA kernel module is not loaded: check `lsmod | grep nvidia`, `dmesg | grep "
                         "NVRM` and DKMS for the running kernel; reinstall the driver or reboot",
    "driver_mismatch": "The driver libraries were upgraded but the old kernel module is still loaded: drain "
                       "the node and reboot (or reload the nvidia modules)",
    "nvml_init": "NVML could not start: check `dmesg | grep NVRM`, the driver install and /dev/nvidia*",
    "no_devices": "The driver sees no GPU: check `lspci | grep -i nvidia` and `dmesg | grep NVRM` "
                  "(RmInitAdapter failed); reseat the GPUs or check BIOS (Above 4G decoding)",
    "exit_code": "nvidia-smi failed: run it by hand on the node and check `dmesg | grep NVRM`",
    "gpu_lost": "The GPU fell off the bus or stopped responding: drain the node, check the kernel log for "
                "Xid 79/119, reboot; if it recurs, reseat or replace the GPU",
    "inforom_corrupted": "The GPU's InfoROM is corrupted (ECC and retirement records cannot be trusted): "
                         "drain, run `dcgmi diag -r 1`, and open an RMA with the vendor",
}
REMEDY_MISSING = "A GPU is missing: check `lspci | grep -i nvidia` and the kernel log for Xid 79; reseat or replace"
REMEDY_MODEL = "The GPU model differs from the profile: check the inventory's profile for this host"
REMEDY_MEMORY = "The GPU reports less memory than its model has: check for a wrong SKU or a faulty GPU (RMA)"
REMEDY_PERSISTENCE = "Enable persistence mode (`nvidia-smi -pm 1`, or the nvidia-persistenced service)"
REMEDY_MIG = "Set the MIG mode the profile expects (`nvidia-smi -mig 0|1`) and reset the GPU"
REMEDY_ECC_MODE = "Enable ECC (`nvidia-smi -e 1`) and reboot; a pending change needs a reboot to apply"
REMEDY_WIDTH = ("The PCIe link trained below its width: reseat the GPU or its riser/cable, check the slot and "
                "BIOS; if it persists after a cold boot, replace the riser or the GPU")
REMEDY_GEN = ("The PCIe link runs below its generation under load: check BIOS PCIe settings, risers and "
              "retimers; reseat the GPU")
REMEDY_GEN_MAX = "The slot or BIOS limits the PCIe generation: check the BIOS link-speed setting and the riser"
REMEDY_REPLAYS = "PCIe replays indicate a marginal link: check `dmesg` for AER errors, reseat the GPU/riser"
REMEDY_POWER = "The GPU power limit is below the profile: reset it (`nvidia-smi -pl`), check BMC power capping"
REMEDY_RESET = "The driver says this GPU needs a reset: drain the node and run `nvidia-smi -r -i N`, or reboot"
REMEDY_UNREADABLE = ("nvidia-smi could not read this GPU (\"Unknown Error\"): it is in an error state; check "
                     "the kernel log for Xid 48/79/119, drain and reset the GPU or reboot")
REMEDY_FAN = "A fan reports an error: check the fan and the chassis airflow"


def evaluate_gpu(obs: GpuObservations, ctx: EvalContext) -> list[Finding]:
    """Every GPU finding for one host: errors first, then node-level, then per-GPU checks folded."""
    findings = [_error_finding(e, obs, ctx) for e in obs.errors]
    if obs.count is not None:
        findings.append(finding_from_expectation(
            ctx.host.name, "gpu.count", ctx.profile.expect("gpu.count"), obs.count, source=obs.source,
            profile=ctx.profile, remedy=REMEDY_MISSING))
    per_gpu: list[Outcome | None] = []
    grades: dict[str, ValueGrades] = {}  # per check, shared by the host's GPUs
    for gpu in obs.gpus:
        at = GpuScope(ctx, obs, gpu, grades)
        per_gpu += _inventory(at) + _pcie(at) + _state(at)
        per_gpu += evaluate_gpu_health(at)
    return findings + collapse(per_gpu, len(obs.gpus), ctx.host.name, obs.source)


def _error_finding(error: SmiError, obs: GpuObservations, ctx: EvalContext) -> Finding:
    """A FAIL for one nvidia-smi/NVML error; the component is ``gpuN`` when the bus id is among the
    GPUs listed, else ``gpu <bus id>`` (a lost GPU is usually missing from the list)."""
    check = _ERROR_CHECKS.get(error.kind, "gpu.driver")
    where = f"GPU {error.bus_id}" if error.bus_id else "node"
    index = next((g.index for g in obs.gpus if error.bus_id and g.bus_id == error.bus_id), None)
    component = f"gpu{index}" if index is not None else f"gpu {error.bus_id}" if error.bus_id else "node"
    return Finding(host=ctx.host.name, check=check, status=Status.FAIL, component=component, value=error.message,
                   expected="no nvidia-smi error", message=f"{where}: nvidia-smi reports: {error.message}",
                   remedy=_ERROR_REMEDY[error.kind], source=obs.source)


def _inventory(at: GpuScope) -> list[Outcome | None]:
    gpu = at.gpu
    out = [graded(at, "gpu.model", gpu.name, REMEDY_MODEL),
           graded(at, "gpu.memory_mib", gpu.memory_total_mib, REMEDY_MEMORY),
           graded(at, "gpu.persistence_mode", gpu.persistence_mode, REMEDY_PERSISTENCE),
           graded(at, "gpu.mig_mode", gpu.mig_current, REMEDY_MIG,
                  detail=f"{gpu.mig_devices} MIG devices" if gpu.mig_devices else ""),
           graded(at, "gpu.ecc_mode", gpu.ecc_current, REMEDY_ECC_MODE),
           graded(at, "gpu.power_limit_w", gpu.power_limit_w, REMEDY_POWER),
           graded(at, "gpu.power_draw_w", gpu.power_draw_w, REMEDY_POWER, optional=True)]
    for check, current, pending, remedy in (("gpu.mig_mode.pending", gpu.mig_current, gpu.mig_pending, REMEDY_MIG),
                                            ("gpu.ecc_mode.pending", gpu.ecc_current, gpu.ecc_pending,
                                             REMEDY_ECC_MODE)):
        if current is not None and pending is not None and current != pending:
            out.append(gpu_finding(at, check, Status.WARN, pending, current, remedy=remedy,
                                   message=f"mode change pending: {current} now, {pending} after reset/reboot"))
    return out


def _pcie(at: GpuScope) -> list[Outcome | None]:
    gpu, ctx = at.gpu, at.ctx
    out: list[Outcome | None] = [
        graded(at, "gpu.pcie.gen_max", gpu.pcie_gen_max, REMEDY_GEN_MAX),
        _replays(at)]
    width_exp = ctx.profile.expect("gpu.pcie.width")
    if width_exp is not None:
        out.append(graded(at, "gpu.pcie.width", gpu.pcie_width_current, REMEDY_WIDTH, width_exp,
                          detail=f"max x{gpu.pcie_width_max}" if gpu.pcie_width_max else ""))
    elif gpu.pcie_width_current is not None and gpu.pcie_width_max is not None:
        bad = gpu.pcie_width_current < gpu.pcie_width_max
        out.append(gpu_finding(
            at, "gpu.pcie.width", Status.FAIL if bad else Status.PASS, gpu.pcie_width_current,
            f"== {gpu.pcie_width_max} (the GPU's max width)", unit="lanes", remedy=REMEDY_WIDTH,
            message=(f"PCIe link downtrained to x{gpu.pcie_width_current} of x{gpu.pcie_width_max}" if bad
                     else f"PCIe x{gpu.pcie_width_current}")))
    if gpu.pcie_gen_current is not None and gpu.pcie_gen_max is not None:
        loaded = (gpu.utilization_pct or 0) > 0
        if not loaded:
            status, message = Status.SKIP, (f"PCIe Gen{gpu.pcie_gen_current} of Gen{gpu.pcie_gen_max} at idle "
                                            "(not graded: idle links drop their generation to save power)")
        elif gpu.pcie_gen_current < gpu.pcie_gen_max:
            status, message = Status.FAIL, (f"PCIe Gen{gpu.pcie_gen_current} of Gen{gpu.pcie_gen_max} at "
                                            f"{gpu.utilization_pct}% utilization")
        else:
            status, message = Status.PASS, f"PCIe Gen{gpu.pcie_gen_current} under load"
        out.append(gpu_finding(at, "gpu.pcie.gen", status, gpu.pcie_gen_current,
                               f"== {gpu.pcie_gen_max} under load", remedy=REMEDY_GEN, message=message))
    return out


def _previous_replays(ctx: EvalContext, gpu: GpuObservation) -> int | None:
    """This GPU's replay counter in the previous run (matched by bus id, else by index)."""
    prev = ctx.previous.get("gpu") if isinstance(ctx.previous, Mapping) else None
    gpus = [g for g in (prev or {}).get("gpus") or () if isinstance(g, Mapping)] if isinstance(prev, Mapping) else []
    match = next((g for g in gpus if gpu.bus_id and g.get("bus_id") == gpu.bus_id), None)
    if match is None and not gpu.bus_id:
        match = next((g for g in gpus if g.get("index") == gpu.index), None)
    value = (match or {}).get("pcie_replays")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _replays(at: GpuScope) -> Outcome | None:
    """PCIe replays graded by their growth since the previous run (``gpu.pcie.replays.growth``).

    The counter accumulates from driver load: healthy HGX H100s in the corpus (gpud captures,
    driver 535) show 43-120 on every GPU, so an absolute bar would flag good nodes. Without a
    previous run the count is recorded (SKIP, not graded); a smaller count than before means the
    counter was reset (reboot, GPU reset) and the whole count is the growth.
    """
    gpu, ctx = at.gpu, at.ctx
    if gpu.pcie_replays is None:
        return None
    exp, before = ctx.profile.expect("gpu.pcie.replays.growth"), _previous_replays(ctx, gpu)
    if exp is None or before is None:
        why = (f"no expectation gpu.pcie.replays.growth in profile {ctx.profile.name}" if exp is None else
               "no previous run to measure growth against")
        return gpu_finding(at, "gpu.pcie.replays", Status.SKIP, gpu.pcie_replays,
                           expected_text(exp) if exp else None, unit="replays",
                           message=f"PCIe replay counter since driver load (value) not graded: {why}")
    growth, note = ((gpu.pcie_replays - before, f"{before} -> {gpu.pcie_replays} since the previous run")
                    if gpu.pcie_replays >= before else
                    (gpu.pcie_replays, f"counter reset since the previous run ({before} before)"))
    return graded(at, "gpu.pcie.replays", growth, REMEDY_REPLAYS, exp, detail=note, what="PCIe replay growth")


def _state(at: GpuScope) -> list[Outcome | None]:
    """The driver's reset/recovery flags, unreadable fields, fan errors (fabric: the fabric probe)."""
    gpu = at.gpu
    out: list[Outcome | None] = []
    flags = [name for name, on in (("reset required", gpu.reset_required),
                                   ("drain and reset recommended", gpu.drain_and_reset_recommended)) if on]
    if gpu.reset_required is not None or flags:
        out.append(gpu_finding(at, "gpu.reset_required", Status.FAIL if flags else Status.PASS,
                               ", ".join(flags) or "No", "No", remedy=REMEDY_RESET,
                               message=f"driver flags: {', '.join(flags)}" if flags else "no reset required"))
    if gpu.recovery_action is not None:
        bad = gpu.recovery_action.lower() != "none"
        out.append(gpu_finding(at, "gpu.recovery_action", Status.FAIL if bad else Status.PASS,
                               gpu.recovery_action, "None", remedy=REMEDY_RESET,
                               message=f"GPU recovery action: {gpu.recovery_action}"))
    if gpu.unreadable:
        out.append(gpu_finding(at, "gpu.unreadable", Status.FAIL, ", ".join(gpu.unreadable),
                               "readable", remedy=REMEDY_UNREADABLE,
                               message=f"nvidia-smi printed an error instead of {', '.join(gpu.unreadable)}"))
    if gpu.fan_speed is not None and gpu.fan_speed.upper().startswith("ERR"):
        out.append(gpu_finding(at, "gpu.fan", Status.FAIL, gpu.fan_speed, "a fan speed",
                               remedy=REMEDY_FAN, message=f"fan reports {gpu.fan_speed}"))
    return out
