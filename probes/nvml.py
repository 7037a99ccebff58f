"""Local mode: the same GPU observations from NVML (``pynvml``, package nvidia-ml-py), with
``nvidia-smi -q -x`` as the fallback when NVML cannot be loaded.

    obs = collect_nvml()                    # GpuObservations(source="nvml", gpus=(...), ...)
    findings = evaluate_gpu(obs, ctx)        # graded exactly like the nvidia-smi observations

This is the one module here that does I/O: it calls NVML (and, on fallback, runs nvidia-smi).
NVML errors are values, not exceptions: "Not Supported" leaves a field None; "GPU is lost",
"Unknown Error" and the like on one field list it in ``unreadable``; a device whose handle cannot
be had becomes a ``gpu_lost`` error; ``nvmlInit`` failing (driver not loaded, version mismatch)
becomes a node error. Codes follow NVML's nvmlReturn_t (3 not supported, 9 driver not loaded,
12 library not found, 14 corrupted infoROM, 15 GPU lost, 16 reset required, 18 version mismatch).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import shutil
import subprocess
from collections.abc import Callable
from types import ModuleType
from typing import Any

from healthcheck.probes.gpu_model import EccCounts, GpuObservation, GpuObservations, RowRemap, observations_from_log
from healthcheck.probes.nvidia_smi_log import SmiError, exit_code_error, normalize_bus_id
from healthcheck.probes.nvidia_smi_xml import parse_nvidia_smi_xml
from healthcheck.probes.nvml_fabric import nvml_fabric, nvml_platform

NOT_SUPPORTED, DRIVER_NOT_LOADED, LIBRARY_NOT_FOUND, GPU_IS_LOST, LIB_RM_MISMATCH = 3, 9, 12, 15, 18
_INIT_ERRORS = {DRIVER_NOT_LOADED: "driver_not_loaded", LIB_RM_MISMATCH: "driver_mismatch"}
# NVML clocks event reason bits (nvmlClocksEventReason*), named as nvidia-smi's XML tags.
CLOCK_EVENT_BITS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap",
                    0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal_slowdown",
                    0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown", 0x100: "display_clocks_setting"}
_RECOVERY = {0: "None", 1: "Reset", 2: "Reboot", 3: "Drain P2P", 4: "Drain and Reset"}
_ON_CHIP = ("L1_CACHE", "L2_CACHE", "REGISTER_FILE", "TEXTURE_MEMORY", "TEXTURE_SHM", "CBU")


def collect_nvml(nvml: ModuleType | None = None,
                 fallback: Callable[[], GpuObservations | None] | None = None) -> GpuObservations | None:
    """Observations of this machine's GPUs from NVML; ``fallback`` (default: run ``nvidia-smi -q -x``)
    is used when pynvml is not installed or libnvidia-ml cannot be loaded."""
    fallback = fallback or collect_nvidia_smi
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            return fallback()
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        code = _code(exc)
        if code == LIBRARY_NOT_FOUND:
            return fallback()
        kind = _INIT_ERRORS.get(code, "nvml_init")
        return GpuObservations(source="nvml", count=0, errors=(SmiError(kind, f"NVML: {exc}"),))
    try:
        return _collect(nvml)
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def collect_nvidia_smi(run: Callable[..., Any] = subprocess.run) -> GpuObservations:
    """Run ``nvidia-smi -q -x`` here and parse it (NVML's fallback)."""
    if shutil.which("nvidia-smi") is None and run is subprocess.run:
        return GpuObservations(source="nvidia-smi-q-x", count=0,
                               errors=(SmiError("driver_not_loaded", "nvidia-smi not found on PATH"),))
    done = run(["nvidia-smi", "-q", "-x"], capture_output=True, text=True, timeout=120, check=False)
    text = (done.stdout or "") + "\n" + (done.stderr or "")
    log = parse_nvidia_smi_xml(text)
    obs = observations_from_log(log, "nvidia-smi-q-x")
    if done.returncode and not obs.errors and not obs.gpus:
        error = exit_code_error(done.returncode, text)
        return GpuObservations(source=obs.source, count=0, errors=(error,) if error else ())
    return obs


def _collect(nvml: ModuleType) -> GpuObservations:
    reader = _Calls(nvml)
    driver = reader.text(nvml.nvmlSystemGetDriverVersion)
    cuda_raw = reader.call(nvml.nvmlSystemGetCudaDriverVersion)
    cuda = f"{cuda_raw // 1000}.{cuda_raw % 1000 // 10}" if isinstance(cuda_raw, int) else None
    count = nvml.nvmlDeviceGetCount()
    gpus: list[GpuObservation] = []
    errors: list[SmiError] = []
    for index in range(count):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except nvml.NVMLError as exc:
            errors.append(SmiError("gpu_lost", f"NVML: GPU {index}: {exc}"))
            continue
        gpus.append(_gpu(nvml, index, handle))
    return GpuObservations(source="nvml", gpus=tuple(gpus), count=count, driver_version=driver,
                           cuda_version=cuda, errors=tuple(errors))


class _Calls:
    """Calls NVML getters; NVMLError becomes None (and ``unreadable`` unless "Not Supported")."""

    def __init__(self, nvml: ModuleType) -> None:
        self.nvml = nvml
        self.unreadable: list[str] = []

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            if _code(exc) != NOT_SUPPORTED:
                self.unreadable.append(getattr(fn, "__name__", "nvml").removeprefix("nvmlDeviceGet"))
            return None

    def text(self, fn: Callable[..., Any], *args: Any) -> str | None:
        value = self.call(fn, *args)
        return value.decode() if isinstance(value, bytes) else value

    def field(self, handle: Any, field_id: int | None) -> int | None:
        if field_id is None:
            return None
        values = self.call(self.nvml.nvmlDeviceGetFieldValues, handle, [field_id])
        if not values or getattr(values[0], "nvmlReturn", 1) != 0:
            return None
        return int(values[0].value.uiVal)


def _gpu(nvml: ModuleType, index: int, h: Any) -> GpuObservation:
    c = _Calls(nvml)
    pci = c.call(nvml.nvmlDeviceGetPciInfo, h)
    bus = getattr(pci, "busId", None)
    mig = c.call(nvml.nvmlDeviceGetMigMode, h) or (None, None)
    ecc = c.call(nvml.nvmlDeviceGetEccMode, h) or (None, None)
    memory = c.call(nvml.nvmlDeviceGetMemoryInfo, h)
    limits = c.call(nvml.nvmlDeviceGetPowerManagementLimitConstraints, h) or (None, None)
    reasons = c.call(getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                     or nvml.nvmlDeviceGetCurrentClocksThrottleReasons, h)
    util = c.call(nvml.nvmlDeviceGetUtilizationRates, h)
    pstate = c.call(nvml.nvmlDeviceGetPerformanceState, h)
    threshold = nvml.nvmlDeviceGetTemperatureThreshold
    recovery = c.field(h, getattr(nvml, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None))
    fabric = nvml_fabric(nvml, c.call, h)
    obs = GpuObservation(
        index=index, bus_id=normalize_bus_id(bus.decode() if isinstance(bus, bytes) else bus) if bus else None,
        name=c.text(nvml.nvmlDeviceGetName, h), uuid=c.text(nvml.nvmlDeviceGetUUID, h),
        serial=c.text(nvml.nvmlDeviceGetSerial, h), vbios=c.text(nvml.nvmlDeviceGetVbiosVersion, h),
        persistence_mode=_enabled(c.call(nvml.nvmlDeviceGetPersistenceMode, h)),
        mig_current=_enabled(mig[0]), mig_pending=_enabled(mig[1]),
        memory_total_mib=memory.total // 2**20 if memory else None,
        memory_used_mib=memory.used // 2**20 if memory else None,
        ecc_current=_enabled(ecc[0]), ecc_pending=_enabled(ecc[1]),
        ecc_volatile=_ecc(nvml, c, h, nvml.NVML_VOLATILE_ECC) if ecc[0] else EccCounts(),
        ecc_aggregate=_ecc(nvml, c, h, nvml.NVML_AGGREGATE_ECC) if ecc[0] else EccCounts(),
        remap=_remap(nvml, c, h),
        retired_sbe=_len(c.call(nvml.nvmlDeviceGetRetiredPages, h,
                                nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)),
        retired_dbe=_len(c.call(nvml.nvmlDeviceGetRetiredPages, h,
                                nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)),
        retired_pending=_bool(c.call(nvml.nvmlDeviceGetRetiredPagesPendingStatus, h)),
        temp_c=c.call(nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU),
        shutdown_c=c.call(threshold, h, nvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
        slowdown_c=c.call(threshold, h, nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
        max_operating_c=c.call(threshold, h, nvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX),
        memory_temp_c=c.field(h, getattr(nvml, "NVML_FI_DEV_MEMORY_TEMP", None)),
        memory_max_operating_c=c.call(threshold, h, nvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX),
        power_draw_w=_watts(c.call(nvml.nvmlDeviceGetPowerUsage, h)),
        power_limit_w=_watts(c.call(nvml.nvmlDeviceGetEnforcedPowerLimit, h)),
        power_default_limit_w=_watts(c.call(nvml.nvmlDeviceGetPowerManagementDefaultLimit, h)),
        power_max_limit_w=_watts(limits[1]),
        pcie_gen_current=c.call(nvml.nvmlDeviceGetCurrPcieLinkGeneration, h),
        pcie_gen_max=c.call(nvml.nvmlDeviceGetMaxPcieLinkGeneration, h),
        pcie_width_current=c.call(nvml.nvmlDeviceGetCurrPcieLinkWidth, h),
        pcie_width_max=c.call(nvml.nvmlDeviceGetMaxPcieLinkWidth, h),
        pcie_replays=c.call(nvml.nvmlDeviceGetPcieReplayCounter, h),
        clock_events=tuple(name for bit, name in CLOCK_EVENT_BITS.items() if reasons is not None and reasons & bit),
        sm_clock_mhz=c.call(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM),
        sm_clock_max_mhz=c.call(nvml.nvmlDeviceGetMaxClockInfo, h, nvml.NVML_CLOCK_SM),
        utilization_pct=getattr(util, "gpu", None), performance_state=None if pstate is None else f"P{pstate}",
        fabric_state=fabric.state, fabric_status=fabric.status, fabric_clique_id=fabric.clique_id,
        fabric_cluster_uuid=fabric.cluster_uuid, fabric_health=fabric.health,
        platform=nvml_platform(nvml, c.call, h),
        recovery_action=None if recovery is None else _RECOVERY.get(recovery, str(recovery)),
    )
    return dataclasses.replace(obs, unreadable=tuple(dict.fromkeys(c.unreadable)))


def _ecc(nvml: ModuleType, c: _Calls, h: Any, counter: int) -> EccCounts:
    def count(error_type: int, location: str) -> int | None:
        loc = getattr(nvml, f"NVML_MEMORY_LOCATION_{location}", None)
        return None if loc is None else c.call(nvml.nvmlDeviceGetMemoryErrorCounter, h, error_type, counter, loc)

    def side(error_type: int, new: str, old: tuple[str, ...]) -> int | None:
        value = count(error_type, new)
        if value is not None:
            return value
        values = [v for v in (count(error_type, loc) for loc in old) if v is not None]
        return sum(values) if values else None

    corrected, uncorrected = nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    return EccCounts(side(corrected, "SRAM", _ON_CHIP), side(uncorrected, "SRAM", _ON_CHIP),
                     side(corrected, "DRAM", ("DEVICE_MEMORY",)), side(uncorrected, "DRAM", ("DEVICE_MEMORY",)))


def _remap(nvml: ModuleType, c: _Calls, h: Any) -> RowRemap | None:
    rows = c.call(nvml.nvmlDeviceGetRemappedRows, h)
    if rows is None:
        return None
    hist = c.call(nvml.nvmlDeviceGetRowRemapperHistogram, h)
    corr, unc, pending, failure = rows
    return RowRemap(correctable=corr, uncorrectable=unc, pending=bool(pending), failure=bool(failure),
                    **{f"banks_{k}": getattr(hist, k, None) for k in ("max", "high", "partial", "low", "none")})


def _code(exc: BaseException) -> int | None:
    return getattr(exc, "value", None)


def _enabled(value: Any) -> str | None:
    return None if value is None else "Enabled" if value else "Disabled"


def _bool(value: Any) -> bool | None:
    return None if value is None else bool(value)


def _len(value: Any) -> int | None:
    return None if value is None else len(value)


def _watts(milliwatts: Any) -> float | None:
    return None if milliwatts is None else round(milliwatts / 1000.0, 2)


def local_observations() -> GpuObservations | None:
    """This machine's GPUs from NVML, or None where pynvml or the driver library is missing (the gpu
    probe then reads the script's ``nvidia-smi -q -x``, as on any other host)."""
    return collect_nvml(fallback=lambda: None)
