"""Grade one GPU's health: ECC counters, row remapping, retired pages, thermals, clock events.

    evaluate_gpu_health(GpuScope(ctx, obs, obs.gpus[3]))   # per-GPU findings, folded later by gpu_eval

Rules (thresholds from the profile where they are numbers; see docs/gpu.md for sources):

* ECC: ``gpu.ecc.<sram|dram>_<correctable|uncorrectable>`` grades the larger of the volatile and
  aggregate counters (as AzNHC's check_gpu_ecc does). The driver's own "SRAM Threshold
  Exceeded", "Unrepairable Memory" and "Channel Repair Pending" flags FAIL without a profile.
* Row remapping (Ampere+): pending -> FAIL, reset the GPU; failure occurred -> FAIL, RMA
  (NVIDIA's RMA criterion); uncorrectable remaps graded by ``gpu.row_remap.uncorrectable``;
  banks with no spare row left (histogram "None" > 0) -> WARN.
* Retired pages (pre-Ampere): pending -> FAIL; SBE+DBE count graded by ``gpu.retired_pages.count``.
* Thermals: against the GPU's own limits, absolute ("GPU Slowdown Temp 89 C") or as T.Limit
  margins ("GPU Slowdown T.Limit Temp -2 C" with "GPU T.Limit Temp 26 C" = 28 C of margin):
  at/above slowdown or shutdown -> FAIL, at/above max operating -> WARN; the profile's
  ``gpu.temp_c`` / ``gpu.memory_temp_c`` grade GPUs that report no limits.
* Clock events: HW Slowdown, HW Thermal Slowdown, HW Power Brake -> FAIL; SW Thermal -> WARN;
  Idle, application clocks, SW power cap, sync boost and display clocks are not faults. A flag is
  not a fault until the clocks agree: FAIL needs the SM clock below 90 % of its maximum (or, with
  the maximum unknown, the GPU under load); flags at full clock are at most WARN (NVML reports
  them during P-state and clock changes). Persistence across samples is graded by dcgm_fields.
"""

from __future__ import annotations

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.grading import Outcome
from healthcheck.core.model import Status
from healthcheck.core.verdicts import flag_vs_measurement
from healthcheck.probes.gpu_findings import GpuScope, gpu_finding, graded
from healthcheck.probes.gpu_model import GpuObservation, GpuObservations

CLOCK_EVENT_STATUS = {"hw_slowdown": Status.FAIL, "hw_thermal_slowdown": Status.FAIL,
                      "hw_power_brake_slowdown": Status.FAIL, "sw_thermal_slowdown": Status.WARN}
_CLOCK_REMEDY = {
    "hw_power_brake_slowdown": "the external power-brake signal is asserted: check PSUs, the BMC power "
                               "policy and power cabling",
    "hw_thermal_slowdown": "the GPU is too hot: check fans, airflow, inlet temperature and heatsink seating",
    "hw_slowdown": "hardware slowdown (thermal or power): check cooling and power delivery, then re-run to "
                   "confirm it persists",
    "sw_thermal_slowdown": "the driver holds clocks down to stay under max operating temperature: check cooling",
}
REMEDY_ECC = ("ECC errors above the profile's threshold: check the kernel log for Xid 48/63/94/95, run "
              "`dcgmi diag -r 3`; drain and reset the GPU, and RMA it if errors keep growing")
REMEDY_SRAM_RMA = ("The driver flags this GPU for SRAM errors / unrepairable memory (NVIDIA's RMA criterion): "
                   "drain the node, run the field diagnostic and open an RMA")
REMEDY_CHANNEL = "An HBM channel repair is pending: drain the node and reset the GPU to apply it"
REMEDY_REMAP_PENDING = ("A row remap is pending and applies at the next GPU reset: drain the node and reset the "
                        "GPU (`nvidia-smi -r -i N`) or reboot")
REMEDY_REMAP_FAILURE = ("Row remapping failed (no spare row left for an uncorrectable error): this is NVIDIA's "
                        "RMA criterion; drain the node, run the field diagnostic and RMA the GPU")
REMEDY_REMAP_COUNT = "Many uncorrectable remaps: run `dcgmi diag -r 3` and plan an RMA"
REMEDY_BANKS = "Some memory banks have no spare rows left: the next uncorrectable error there fails the remap"
REMEDY_RETIRED = ("Pages are pending retirement: reboot (or reload the driver) to retire them; RMA when the "
                  "retirement count approaches its limit")
REMEDY_THERMAL = "Check fans, airflow, inlet temperature and heatsink seating; re-run under the same load"


def evaluate_gpu_health(at: GpuScope) -> list[Outcome | None]:
    return [*_ecc(at), *_memory_repair(at), *_thermal(at), _clock_events(at)]


def _ecc(at: GpuScope) -> list[Outcome | None]:
    gpu = at.gpu
    out: list[Outcome | None] = []
    for counter in ("sram_uncorrectable", "sram_correctable", "dram_uncorrectable", "dram_correctable"):
        volatile, aggregate = getattr(gpu.ecc_volatile, counter), getattr(gpu.ecc_aggregate, counter)
        present = [v for v in (volatile, aggregate) if v is not None]
        out.append(graded(at, f"gpu.ecc.{counter}", max(present) if present else None, REMEDY_ECC,
                          detail=f"volatile {_show(volatile)}, aggregate {_show(aggregate)}"))
    for check, flag, remedy in (("gpu.ecc.sram_threshold_exceeded", gpu.sram_threshold_exceeded, REMEDY_SRAM_RMA),
                                ("gpu.ecc.unrepairable_memory", gpu.unrepairable_memory, REMEDY_SRAM_RMA),
                                ("gpu.ecc.channel_repair_pending", gpu.channel_repair_pending, REMEDY_CHANNEL)):
        if flag is not None:
            out.append(gpu_finding(at, check, Status.FAIL if flag else Status.PASS,
                                   "Yes" if flag else "No", "No", remedy=remedy,
                                   message=f"{check.rsplit('.', 1)[-1].replace('_', ' ')}: {'Yes' if flag else 'No'}"))
    return out


def _memory_repair(at: GpuScope) -> list[Outcome | None]:
    gpu, obs = at.gpu, at.obs
    out: list[Outcome | None] = []
    remap = gpu.remap
    if remap is not None:
        hist = (f"bank histogram max {_show(remap.banks_max)}, high {_show(remap.banks_high)}, partial "
                f"{_show(remap.banks_partial)}, low {_show(remap.banks_low)}, none {_show(remap.banks_none)}")
        counts = f"{_show(remap.correctable)} correctable, {_show(remap.uncorrectable)} uncorrectable remaps"
        for check, flag, remedy, what in (
                ("gpu.row_remap.pending", remap.pending, REMEDY_REMAP_PENDING, "row remap pending"),
                ("gpu.row_remap.failure", remap.failure, REMEDY_REMAP_FAILURE, "row remapping failure occurred")):
            if flag is not None:
                out.append(gpu_finding(at, check, Status.FAIL if flag else Status.PASS,
                                       "Yes" if flag else "No", "No", remedy=remedy,
                                       message=f"{what}: {'Yes' if flag else 'No'} ({counts}; {hist})"))
        out.append(graded(at, "gpu.row_remap.uncorrectable", remap.uncorrectable,
                          REMEDY_REMAP_COUNT, detail=hist))
        if remap.banks_none is not None:
            out.append(gpu_finding(at, "gpu.row_remap.banks_exhausted",
                                   Status.WARN if remap.banks_none > 0 else Status.PASS, remap.banks_none, 0,
                                   unit="banks", remedy=REMEDY_BANKS,
                                   message=f"{remap.banks_none} banks without a spare row ({hist})"))
    elif gpu.mig_current == "Enabled" and not obs.partial:
        out.append(gpu_finding(at, "gpu.row_remap.pending", Status.SKIP, None, "No",
                               message="row remapper state is not reported while MIG is enabled"))
    if gpu.retired_pending is not None:
        out.append(gpu_finding(at, "gpu.retired_pages.pending",
                               Status.FAIL if gpu.retired_pending else Status.PASS,
                               "Yes" if gpu.retired_pending else "No", "No", remedy=REMEDY_RETIRED,
                               message=f"pages pending retirement: {'Yes' if gpu.retired_pending else 'No'} "
                                       f"(retired SBE {_show(gpu.retired_sbe)}, DBE {_show(gpu.retired_dbe)})"))
    retired = None if gpu.retired_sbe is None and gpu.retired_dbe is None else (
        (gpu.retired_sbe or 0) + (gpu.retired_dbe or 0))
    out.append(graded(at, "gpu.retired_pages.count", retired, REMEDY_RETIRED, optional=True,
                      detail=f"SBE {_show(gpu.retired_sbe)}, DBE {_show(gpu.retired_dbe)}"))
    return out


def _thermal(at: GpuScope) -> list[Outcome | None]:
    """GPU core against its own limits (absolute or T.Limit), then HBM against its max operating."""
    gpu = at.gpu
    out: list[Outcome | None] = []
    limits = _core_limits(gpu)
    if limits is not None:
        margin_slow, margin_op, expected, mode, limit = limits
        status = Status.FAIL if margin_slow <= 0 else Status.WARN if margin_op is not None and margin_op <= 0 \
            else Status.PASS
        temp = f"{gpu.temp_c:g} C" if gpu.temp_c is not None else "temperature"
        out.append(gpu_finding(at, "gpu.temp", status, gpu.temp_c, expected, unit="C",
                               remedy=REMEDY_THERMAL,
                               message=f"{temp}, {_margin(margin_slow, limit)} ({mode})"
                                       + (f", {_margin(margin_op, 'max operating')}" if margin_op is not None
                                          else "")))
    else:
        out.append(graded(at, "gpu.temp_c", gpu.temp_c, REMEDY_THERMAL, optional=True))
    if gpu.memory_temp_c is not None and gpu.memory_max_operating_c is not None:
        margin = gpu.memory_max_operating_c - gpu.memory_temp_c
        out.append(gpu_finding(at, "gpu.memory_temp", Status.WARN if margin <= 0 else Status.PASS,
                               gpu.memory_temp_c, f"< {gpu.memory_max_operating_c:g} C (memory max operating)",
                               unit="C", remedy=REMEDY_THERMAL,
                               message=f"memory {gpu.memory_temp_c:g} C, {margin:g} C below its max operating"))
    else:
        out.append(graded(at, "gpu.memory_temp_c", gpu.memory_temp_c, REMEDY_THERMAL,
                          optional=True))
    return out


def _margin(margin: float, limit: str) -> str:
    """``28 C below slowdown``, ``at slowdown`` or ``1 C past slowdown``."""
    if margin > 0:
        return f"{margin:g} C below {limit}"
    return f"at {limit}" if margin == 0 else f"{-margin:g} C past {limit}"


def _core_limits(gpu: GpuObservation) -> tuple[float, float | None, str, str, str] | None:
    """(margin to the first hard limit, margin to max operating, expected text, mode, limit name) or
    None without limits. The hard limit is slowdown, or shutdown where the GPU reports only that."""
    if gpu.temp_c is not None and (gpu.slowdown_c is not None or gpu.shutdown_c is not None):
        slow, name = min((v, n) for v, n in ((gpu.slowdown_c, "slowdown"), (gpu.shutdown_c, "shutdown"))
                         if v is not None)
        margin_op = None if gpu.max_operating_c is None else gpu.max_operating_c - gpu.temp_c
        extra = f", max operating {gpu.max_operating_c:g} C" if gpu.max_operating_c is not None else ""
        return slow - gpu.temp_c, margin_op, f"< {slow:g} C ({name}{extra})", "absolute limits", name
    if gpu.tlimit_c is not None and (gpu.slowdown_tlimit_c is not None or gpu.shutdown_tlimit_c is not None):
        slow, name = max((v, n) for v, n in ((gpu.slowdown_tlimit_c, "slowdown"), (gpu.shutdown_tlimit_c,
                                                                                    "shutdown")) if v is not None)
        op = gpu.max_operating_tlimit_c
        return (gpu.tlimit_c - slow, None if op is None else gpu.tlimit_c - op,
                f"T.Limit reading > {slow:g} C ({name})", "T.Limit", name)
    return None


def _clock_events(at: GpuScope) -> Outcome | None:
    gpu, obs = at.gpu, at.obs
    if not gpu.clock_events and not _reports_reasons(obs, gpu):
        return None
    faults = [r for r in gpu.clock_events if r in CLOCK_EVENT_STATUS]
    flagged = max((CLOCK_EVENT_STATUS[r] for r in faults), key=lambda s: s.rank, default=Status.PASS)
    evidence, said = clock_evidence(gpu)
    status = flag_vs_measurement(flagged, evidence)
    active = ", ".join(gpu.clock_events) or "none"
    remedy = "; ".join(_CLOCK_REMEDY[r] for r in faults) or None
    if status is not flagged:
        remedy = (f"{remedy}; the flag alone is not a fault (NVML reports it during P-state or clock changes): "
                  "re-check under load or with dcgm_fields samples")
    return gpu_finding(at, "gpu.clock_events", status, active,
                       "no HW slowdown, HW thermal, HW power brake or SW thermal slowdown",
                       remedy=remedy, message=f"active clock event reasons: {active}{said}")


def clock_evidence(gpu: GpuObservation) -> tuple[bool | None, str]:
    """Do the clocks confirm a slowdown flag? (True reduced / under load, False at max, None unknown)
    and the measurement as text for the finding."""
    util = f", {gpu.utilization_pct}% utilization" if gpu.utilization_pct is not None else ""
    if gpu.sm_clock_mhz and gpu.sm_clock_max_mhz:
        share = gpu.sm_clock_mhz / gpu.sm_clock_max_mhz
        reduced = share < DEFAULTS.clock_event_max_fraction
        verdict = "reduced" if reduced else "not reduced"
        return reduced, f"; SM {gpu.sm_clock_mhz} of {gpu.sm_clock_max_mhz} MHz ({share:.0%}: clocks {verdict}){util}"
    if gpu.utilization_pct is not None and gpu.utilization_pct >= DEFAULTS.clock_event_load_pct:
        return True, f"; SM clock maximum not reported, but under load{util}"
    clock = f"SM {gpu.sm_clock_mhz} MHz, " if gpu.sm_clock_mhz else ""
    return None, f"; {clock}SM clock maximum not reported and not under load{util}: the clocks cannot confirm it"


def _reports_reasons(obs: GpuObservations, gpu: GpuObservation) -> bool:
    """True when the source lists clock event reasons at all (none active is then a PASS)."""
    return not obs.partial and gpu.performance_state is not None


def _show(value: int | None) -> str:
    return "N/A" if value is None else str(value)

