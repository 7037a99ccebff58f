"""Pure grading of sampled GPU fields: per-GPU summaries, then findings against the profile.

    gpus = summarize(table)                       # FieldTable -> (GpuSummary(gpu="gpu0", ...), ...)
    evaluate_summaries("gpu001", gpus, profile, prefix="dcgm_fields", source="dcgmi-dmon",
                       where="at rest", window_s=4.0)

Shared by the at-rest probe (``probes/dcgm_fields.py``, checks ``dcgm_fields.*``) and the
under-load telemetry (``healthcheck/run/telemetry.py``, checks ``telemetry.*``); both read the profile's
``dcgm_fields.*`` expectations. A check whose quantity was not sampled gives one SKIP saying so;
a check without an expectation gives SKIP; GPUs that pass are folded into one node-level PASS,
every GPU that does not gets its own finding.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from healthcheck.core.grading import grade_value
from healthcheck.core.model import Finding, Status
from healthcheck.core.profiles import Expectation, Profile
from healthcheck.probes.dmon_parse import FieldSample, FieldTable

# NVML clocks event reason bits (nvmlClocksEventReason*, nvml.h in github.com/NVIDIA/DCGM sdk/nvidia/nvml).
REASON_BITS = {"sw_power_cap": 0x4, "hw_slowdown": 0x8, "sw_thermal": 0x20, "hw_thermal": 0x40,
               "hw_power_brake": 0x80}
# nvidia-smi's per-reason time counters (s), when sampled, measure the same reasons exactly.
_REASON_COUNTERS = {"hw_thermal": "hw_thermal_s", "hw_power_brake": "hw_power_brake_s", "sw_thermal": "sw_thermal_s"}
COUNTERS = ("power_violation_s", "thermal_violation_s", "ecc_sbe_volatile", "ecc_dbe_volatile",
            "pcie_replay_count", "nvlink_crc_flit_errors", "nvlink_crc_data_errors", "nvlink_replay_errors",
            "nvlink_recovery_errors", *_REASON_COUNTERS.values())
_LATEST = ("xid_last", "row_remap_pending", "row_remap_failure", "ecc_dbe_volatile", "ecc_sbe_volatile")


@dataclass(frozen=True)
class GpuSummary:
    """One GPU over one sampling window (None: not sampled or N/A throughout)."""

    gpu: str
    samples: int
    gpu_temp_max_c: float | None = None
    memory_temp_max_c: float | None = None
    slowdown_temp_c: float | None = None
    power_max_w: float | None = None
    power_median_w: float | None = None
    sm_clock_median_mhz: float | None = None     # over loaded samples (>= half the GPU's peak power)
    sm_clock_min_mhz: float | None = None
    throttle_s: Mapping[str, float] = field(default_factory=dict)  # reason -> seconds in the window
    growth: Mapping[str, float] = field(default_factory=dict)      # counter -> last - first
    latest: Mapping[str, float] = field(default_factory=dict)      # flags and counters: last value
    peak: Mapping[str, float] = field(default_factory=dict)        # flags: highest value seen
    xid_new: tuple[int, ...] = ()                                  # XIDs that appeared in the window


def _column(samples: Sequence[FieldSample], quantity: str) -> list[float]:
    return [v for s in samples if (v := s.values.get(quantity)) is not None]


def _loaded_clock(samples: Sequence[FieldSample]) -> list[float]:
    """SM clocks of the samples where the GPU draws at least half its peak power (idle edges dropped)."""
    powers = _column(samples, "power_w")
    if not powers:
        return _column(samples, "sm_clock_mhz")
    floor = 0.5 * max(powers)
    return [c for s in samples if (c := s.values.get("sm_clock_mhz")) is not None
            and (s.values.get("power_w") or 0.0) >= floor]


def summarize_gpu(gpu: str, samples: Sequence[FieldSample], interval_s: float) -> GpuSummary:
    def top(q: str) -> float | None:
        values = _column(samples, q)
        return max(values) if values else None

    masks = [int(v) for v in _column(samples, "clock_event_reasons")]
    throttle = {r: sum(interval_s for m in masks if m & bit) for r, bit in REASON_BITS.items()} if masks else {}
    growth = {q: vals[-1] - vals[0] for q in COUNTERS if len(vals := _column(samples, q)) >= 1}
    for reason, counter in _REASON_COUNTERS.items():
        if counter in growth and reason in throttle:
            throttle[reason] = max(throttle[reason], round(growth[counter], 3))
    xids = [int(v) for v in _column(samples, "xid_last")]
    clocks = _loaded_clock(samples)
    powers = _column(samples, "power_w")
    return GpuSummary(
        gpu=gpu, samples=len(samples), gpu_temp_max_c=top("gpu_temp_c"), memory_temp_max_c=top("memory_temp_c"),
        slowdown_temp_c=top("slowdown_temp_c"), power_max_w=top("power_w"),
        power_median_w=statistics.median(powers) if powers else None,
        sm_clock_median_mhz=statistics.median(clocks) if clocks else None,
        sm_clock_min_mhz=min(clocks) if clocks else None, throttle_s=throttle, growth=growth,
        latest={q: vals[-1] for q in _LATEST if (vals := _column(samples, q))},
        peak={q: max(vals) for q in ("row_remap_pending", "row_remap_failure") if (vals := _column(samples, q))},
        xid_new=tuple(dict.fromkeys(x for x in xids if x and x != xids[0])))


def summarize(table: FieldTable) -> tuple[GpuSummary, ...]:
    """Per-GPU summaries of a table (GPU entities only; link and switch rows are not summarized)."""
    interval = table.interval_s or 1.0
    by_gpu: dict[str, list[FieldSample]] = {}
    for s in table.samples:
        if s.entity.startswith("gpu") and s.entity[3:].isdecimal():
            by_gpu.setdefault(s.entity, []).append(s)
    return tuple(summarize_gpu(g, rows, interval) for g, rows in sorted(by_gpu.items(), key=lambda kv: int(kv[0][3:])))


def window_s(table: FieldTable) -> float:
    """Seconds covered by the samples (timestamps when present, else rounds x interval)."""
    stamps = [s.t_s for s in table.samples if s.t_s is not None]
    if len(stamps) >= 2:
        return max(stamps) - min(stamps)
    return max(0, table.rounds() - 1) * (table.interval_s or 1.0)


@dataclass(frozen=True)
class FieldCheck:
    """One graded quantity: how to measure it on a summary, which expectation keys grade it."""

    name: str
    measure: Callable[[GpuSummary, float], float | None]
    keys: tuple[str, ...]
    unit: str
    remedy: str


def _throttle(reason: str) -> Callable[[GpuSummary, float], float | None]:
    return lambda s, _w: s.throttle_s.get(reason) if s.throttle_s else None


def _growth(*counters: str) -> Callable[[GpuSummary, float], float | None]:
    def measure(s: GpuSummary, _w: float) -> float | None:
        present = [s.growth[c] for c in counters if c in s.growth]
        return round(sum(present), 6) if present else None
    return measure


def _pcie_rate(s: GpuSummary, window: float) -> float | None:
    # per minute, over at least a minute: DCGM's health watch needs a minute of samples as well
    grown = s.growth.get("pcie_replay_count")
    return None if grown is None else round(grown * 60.0 / max(window, 60.0), 2)


def _xid_new(s: GpuSummary, _w: float) -> float | None:
    if "xid_last" not in s.latest:
        return None
    return float(s.xid_new[0]) if s.xid_new else 0.0


_COOLING = ("Check this GPU's cooling (airflow, fans, inlet temperature, cold plate or heatsink contact) and "
            "compare with its neighbours; a GPU hotter than its peers under the same load needs service")
_ECC = "Drain the node, reset the GPU and check row remapping (nvidia-smi -q -d ROW_REMAPPER); RMA if it repeats"
_NVLINK = ("Check the NVLink counters per link (nvidia-smi nvlink -e) and the fabric manager log; reseat or replace "
           "the baseboard/NVSwitch tray if the errors keep growing")
CHECKS = (
    FieldCheck("gpu_temp_c", lambda s, _w: s.gpu_temp_max_c, ("dcgm_fields.gpu_temp_c", "gpu.temp_c"), "C", _COOLING),
    FieldCheck("memory_temp_c", lambda s, _w: s.memory_temp_max_c,
               ("dcgm_fields.memory_temp_c", "gpu.memory_temp_c"), "C", _COOLING),
    FieldCheck("clock_event.hw_slowdown", _throttle("hw_slowdown"), ("dcgm_fields.clock_event.hw_slowdown_s",), "s",
               "HW Slowdown cuts the clocks at least in half (temperature, external power brake or over-current): "
               "check cooling and power delivery (PSUs, BMC power-brake events); drain the node if it repeats"),
    FieldCheck("clock_event.hw_thermal", _throttle("hw_thermal"), ("dcgm_fields.clock_event.hw_thermal_s",), "s",
               _COOLING),
    FieldCheck("clock_event.hw_power_brake", _throttle("hw_power_brake"),
               ("dcgm_fields.clock_event.hw_power_brake_s",), "s",
               "An external power brake was asserted: check the PSUs and the chassis power-brake signal (BMC log)"),
    FieldCheck("clock_event.sw_thermal", _throttle("sw_thermal"), ("dcgm_fields.clock_event.sw_thermal_s",), "s",
               _COOLING),
    FieldCheck("power_violation_s", _growth("power_violation_s"), ("dcgm_fields.power_violation_s",), "s",
               "The GPU was held at its power limit: check the limit (nvidia-smi -q -d POWER) matches the SKU "
               "and the node's power budget"),
    FieldCheck("thermal_violation_s", _growth("thermal_violation_s"), ("dcgm_fields.thermal_violation_s",), "s",
               _COOLING),
    FieldCheck("xid.last", lambda s, _w: s.latest.get("xid_last"), ("dcgm_fields.xid_last",), "xid",
               "DCGM recorded this XID since it started watching: look it up in the xid findings (kernel log) and "
               "follow the catalog's action"),
    FieldCheck("xid.new", _xid_new, ("dcgm_fields.xid_new",), "xid",
               "An XID appeared during the window: look it up in the xid findings and follow the catalog's action "
               "(reset the GPU, drain, RMA); collect nvidia-bug-report.sh"),
    FieldCheck("ecc.dbe_growth", _growth("ecc_dbe_volatile"), ("dcgm_fields.ecc_dbe_growth",), "errors", _ECC),
    FieldCheck("ecc.sbe_growth", _growth("ecc_sbe_volatile"), ("dcgm_fields.ecc_sbe_growth",), "errors",
               "Correctable ECC errors appeared: watch the trend; check row remapping and retire the GPU if they grow"),
    FieldCheck("row_remap.pending", lambda s, _w: s.peak.get("row_remap_pending"),
               ("dcgm_fields.row_remap_pending",), "flag",
               "A row remap is pending: drain the node and reset the GPU (or reboot) to apply it"),
    FieldCheck("row_remap.failure", lambda s, _w: s.peak.get("row_remap_failure"),
               ("dcgm_fields.row_remap_failure",), "flag", "Row remapping failed: the GPU needs an RMA"),
    FieldCheck("pcie.replay_rate", _pcie_rate, ("dcgm_fields.pcie_replay_per_min",), "replays/min",
               "PCIe replays are growing: reseat the GPU/riser, check the slot's AER errors (ras findings) and the "
               "link width/generation"),
    FieldCheck("nvlink.crc_growth", _growth("nvlink_crc_flit_errors", "nvlink_crc_data_errors"),
               ("dcgm_fields.nvlink_crc_growth",), "errors", _NVLINK),
    FieldCheck("nvlink.replay_growth", _growth("nvlink_replay_errors"), ("dcgm_fields.nvlink_replay_growth",),
               "errors", _NVLINK),
    FieldCheck("nvlink.recovery_growth", _growth("nvlink_recovery_errors"), ("dcgm_fields.nvlink_recovery_growth",),
               "errors", _NVLINK),
)
# Graded at rest only: the last XID repeats in every window (graded once), and power capping under
# full load is expected (SW Power Cap), so power violation time says something only at rest.
_REST_ONLY = {"xid.last", "power_violation_s"}


def expectation_for(check: FieldCheck, gpu: GpuSummary, profile: Profile) -> Expectation | None:
    """The first expectation of ``check.keys`` in the profile; for temperature the GPU's own slowdown
    limit (DCGM field 158) comes before the profile's generic ``gpu.temp_c``."""
    first = profile.expect(check.keys[0])
    if first is not None:
        return first
    if check.name == "gpu_temp_c" and gpu.slowdown_temp_c:
        return Expectation(key="dcgm_fields.gpu_temp_c", op="lt", value=_tidy(gpu.slowdown_temp_c), unit="C",
                           source="the GPU's own slowdown temperature (DCGM field 158 SDTMP)")
    return next((e for k in check.keys[1:] if (e := profile.expect(k)) is not None), None)


def evaluate_summaries(host: str, gpus: Sequence[GpuSummary], profile: Profile, *, prefix: str, source: str,
                       where: str, window: float, under_load: bool = False) -> list[Finding]:
    """Every check over every GPU: one PASS per check when all pass, else one finding per bad GPU."""
    findings: list[Finding] = []
    for check in CHECKS:
        if under_load and check.name in _REST_ONLY:
            continue
        findings += grade_check(host, check, gpus, profile, prefix, source, where, window)
    return findings


def grade_check(host: str, check: FieldCheck, gpus: Sequence[GpuSummary], profile: Profile, prefix: str,
                 source: str, where: str, window: float) -> list[Finding]:
    """``check`` over every GPU: SKIP when nothing was sampled or no expectation, one PASS naming the
    worst GPU when all pass, else one finding per GPU that does not pass."""
    name = f"{prefix}.{check.name}"
    measured = [(g, v) for g in gpus if (v := check.measure(g, window)) is not None]
    if not measured:
        return [Finding(host=host, check=name, status=Status.SKIP, source=source, unit=check.unit,
                        message=f"{name}: not sampled {where} (the field is absent or N/A on every GPU)")]
    graded = [(g, v, grade_value(name, expectation_for(check, g, profile), _tidy(v), remedy=check.remedy,
                                 profile=profile)) for g, v in measured]
    bad = [(g, grade) for g, _, grade in graded if grade.status is not Status.PASS]
    if bad and all(grade.status is Status.SKIP for _, grade in bad):
        why = f"no expectation {' or '.join(check.keys)} in profile {profile.name}"
        return [Finding(host=host, check=name, status=Status.SKIP, component="node", value=bad[0][1].value,
                        message=f"{name}: {why} ({where})", source=source)]
    if bad:
        return [grade.finding(host, g.gpu, source, detail=f" ({where})") for g, grade in bad
                if grade.status is not Status.SKIP]
    exp = expectation_for(check, graded[0][0], profile)
    pick = min if exp is not None and exp.op in ("ge", "gt") else max  # the worst GPU: lowest of a floor
    worst_gpu, worst, first = pick(graded, key=lambda t: t[1])
    return [Finding(host=host, check=name, status=Status.PASS, component="node", value=_tidy(worst),
                    expected=first.expected, unit=first.unit, source=source,
                    message=f"all {len(graded)} GPUs within {first.expected} {where}: worst "
                            f"{_tidy(worst)} {check.unit} on {worst_gpu.gpu}")]


def _tidy(v: float) -> float | int:
    return int(v) if float(v).is_integer() else round(v, 3)
