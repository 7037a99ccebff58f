"""NVML collector against a fake ``pynvml`` module (the pynvml boundary), NVMLError cases included."""

from __future__ import annotations

import ctypes
import sys
import types
from typing import Any

import pytest

from healthcheck.core.model import Host, Status
from healthcheck.core.profiles import load_profile
from healthcheck.core.spec import EvalContext
from healthcheck.probes.gpu_eval import evaluate_gpu
from healthcheck.probes.gpu_model import GpuObservations
from healthcheck.probes.nvml import collect_nvidia_smi, collect_nvml
from healthcheck.store.results import load_results
from tests.conftest import fixture_text


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__({3: "Not Supported", 9: "Driver Not Loaded", 12: "NVML Shared Library Not Found",
                          15: "GPU is lost", 18: "RM has detected an NVML/RM version mismatch.",
                          999: "Unknown Error"}.get(value, "error"))
        self.value = value


class FabricInfo(ctypes.Structure):
    _fields_ = [("status", ctypes.c_uint), ("cliqueId", ctypes.c_uint), ("state", ctypes.c_uint)]


def _ns(**kw: Any) -> types.SimpleNamespace:
    return types.SimpleNamespace(**kw)


def h100(index: int, **overrides: Any) -> dict[str, Any]:
    """One fake H100 as NVML returns it (milliwatts, bytes, enum ints)."""
    spec: dict[str, Any] = {
        "Name": b"NVIDIA H100 80GB HBM3", "UUID": f"GPU-0000-{index}", "Serial": "1652323004110",
        "VbiosVersion": "96.00.99.00.01", "PciInfo": _ns(busId=f"00000000:{0x19 + index:02X}:00.0"),
        "PersistenceMode": 1, "MigMode": (0, 0), "EccMode": (1, 1),
        "MemoryInfo": _ns(total=81559 * 2**20, used=2**20),
        "MemoryErrorCounter": lambda err, counter, loc: 0,
        "RemappedRows": (0, 0, 0, 0), "RowRemapperHistogram": _ns(max=2560, high=0, partial=0, low=0, none=0),
        "RetiredPages": NVMLError(3), "RetiredPagesPendingStatus": NVMLError(3),
        "Temperature": 31, "TemperatureThreshold": {4: 92, 1: 89, 3: 87, 5: 95, 0: 92},
        "PowerUsage": 71420, "EnforcedPowerLimit": 700000, "PowerManagementDefaultLimit": 700000,
        "PowerManagementLimitConstraints": (200000, 700000),
        "CurrPcieLinkGeneration": 5, "MaxPcieLinkGeneration": 5, "CurrPcieLinkWidth": 16, "MaxPcieLinkWidth": 16,
        "PcieReplayCounter": 0, "CurrentClocksEventReasons": 0x1, "ClockInfo": 1980, "MaxClockInfo": 1980,
        "UtilizationRates": _ns(gpu=0, memory=0), "PerformanceState": 0,
        "fields": {230: 0, 140: 40}, "fabric": (3, 0),
    }
    spec.update(overrides)
    return spec


def fake_pynvml(gpus: list[dict[str, Any]], init_error: int | None = None,
                handle_errors: dict[int, int] | None = None) -> types.ModuleType:
    """A module with pynvml's names; each getter reads the GPU's spec (an exception value is raised)."""
    nvml = types.ModuleType("pynvml")
    nvml.NVMLError = NVMLError
    nvml.calls = []
    consts = {"NVML_VOLATILE_ECC": 0, "NVML_AGGREGATE_ECC": 1, "NVML_MEMORY_ERROR_TYPE_CORRECTED": 0,
              "NVML_MEMORY_ERROR_TYPE_UNCORRECTED": 1, "NVML_MEMORY_LOCATION_DRAM": 8,
              "NVML_MEMORY_LOCATION_SRAM": 7, "NVML_MEMORY_LOCATION_DEVICE_MEMORY": 5,
              "NVML_TEMPERATURE_GPU": 0, "NVML_TEMPERATURE_THRESHOLD_SHUTDOWN": 0,
              "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN": 1, "NVML_TEMPERATURE_THRESHOLD_GPU_MAX": 3,
              "NVML_TEMPERATURE_THRESHOLD_MEM_MAX": 5, "NVML_CLOCK_SM": 1, "NVML_FI_DEV_MEMORY_TEMP": 140,
              "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION": 230,
              "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS": 0,
              "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR": 1}
    for name, value in consts.items():
        setattr(nvml, name, value)
    nvml.c_nvmlGpuFabricInfo_t = FabricInfo

    def init() -> None:
        nvml.calls.append("init")
        if init_error is not None:
            raise NVMLError(init_error)

    def handle(index: int) -> int:
        if handle_errors and index in handle_errors:
            raise NVMLError(handle_errors[index])
        return index

    def getter(name: str):
        def fn(h: int, *args: Any) -> Any:
            value = gpus[h].get(name, NVMLError(3))
            if callable(value):
                value = value(*args)
            elif isinstance(value, dict):
                value = value.get(args[0], NVMLError(3))
            if isinstance(value, Exception):
                raise value
            return value
        fn.__name__ = f"nvmlDeviceGet{name}"
        return fn

    for name in {k for g in gpus for k in g} | {"RetiredPages", "Serial"}:
        setattr(nvml, f"nvmlDeviceGet{name}", getter(name))

    def field_values(h: int, ids: list[int]) -> list[Any]:
        value = gpus[h]["fields"].get(ids[0])
        return [_ns(nvmlReturn=0 if value is not None else 3, value=_ns(uiVal=value or 0))]

    def fabric(h: int, pointer: Any) -> int:
        state, status = gpus[h]["fabric"]
        pointer._obj.state, pointer._obj.status = state, status
        return 0

    nvml.nvmlInit, nvml.nvmlShutdown = init, lambda: nvml.calls.append("shutdown")
    nvml.nvmlSystemGetDriverVersion = lambda: "535.183.01"
    nvml.nvmlSystemGetCudaDriverVersion = lambda: 12020
    nvml.nvmlDeviceGetCount = lambda: len(gpus) + len(handle_errors or {})
    nvml.nvmlDeviceGetHandleByIndex = handle
    nvml.nvmlDeviceGetFieldValues = field_values
    nvml.nvmlDeviceGetGpuFabricInfo = fabric
    return nvml


def _ctx() -> EvalContext:
    return EvalContext(host=Host("localhost"), profile=load_profile("h100-sxm5-8x"))


def test_healthy_gpus_through_the_real_import_path(monkeypatch):
    fake = fake_pynvml([h100(0), h100(1)])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    obs = collect_nvml()
    assert (obs.source, obs.count, obs.driver_version, obs.cuda_version) == ("nvml", 2, "535.183.01", "12.2")
    g = obs.gpus[1]
    assert (g.name, g.bus_id, g.memory_total_mib, g.persistence_mode) == (
        "NVIDIA H100 80GB HBM3", "00000000:1A:00.0", 81559, "Enabled")
    assert (g.temp_c, g.slowdown_c, g.shutdown_c, g.max_operating_c, g.memory_temp_c) == (31, 89, 92, 87, 40)
    assert (g.power_draw_w, g.power_limit_w, g.power_max_limit_w) == (71.42, 700.0, 700.0)
    assert (g.clock_events, g.performance_state, g.recovery_action) == (("gpu_idle",), "P0", "None")
    assert (g.fabric_state, g.fabric_status, g.remap.banks_max) == ("Completed", "Success", 2560)
    assert g.ecc_aggregate.dram_uncorrectable == 0 and g.retired_pending is None and g.unreadable == ()
    assert fake.calls == ["init", "shutdown"]


def test_nvml_faults_grade_like_nvidia_smi_ones():
    faulty = h100(1, RemappedRows=(0, 1, 1, 0), CurrPcieLinkWidth=8, CurrentClocksEventReasons=0x8 | 0x80,
                  ClockInfo=86,  # the slowdown shows in the clocks (86 of 1980 MHz): a fault, not a bare flag
                  MemoryErrorCounter=lambda err, counter, loc: 3 if (err, loc) == (1, 7) else 0)
    obs = collect_nvml(fake_pynvml([h100(0), faulty]))
    bad = {(f.check, f.component, f.status) for f in evaluate_gpu(obs, _ctx()) if f.status is not Status.PASS}
    assert {("gpu.row_remap.pending", "gpu1", Status.FAIL), ("gpu.pcie.width", "gpu1", Status.FAIL),
            ("gpu.clock_events", "gpu1", Status.FAIL), ("gpu.ecc.sram_uncorrectable", "gpu1", Status.FAIL)} <= bad
    assert obs.gpus[1].clock_events == ("hw_slowdown", "hw_power_brake_slowdown")
    at_max = h100(1, CurrentClocksEventReasons=0x8 | 0x80)  # same flags, SM clock at its 1980 MHz maximum
    flags = [f for f in evaluate_gpu(collect_nvml(fake_pynvml([h100(0), at_max])), _ctx())
             if f.check == "gpu.clock_events" and f.component == "gpu1"]
    assert [f.status for f in flags] == [Status.WARN]


def test_driver_not_loaded_at_init_is_a_node_error():
    obs = collect_nvml(fake_pynvml([], init_error=9), fallback=pytest.fail)
    assert (obs.count, [e.kind for e in obs.errors]) == (0, ["driver_not_loaded"])
    findings = evaluate_gpu(obs, _ctx())
    assert {(f.check, f.status) for f in findings} >= {("gpu.driver", Status.FAIL), ("gpu.count", Status.FAIL)}


def test_version_mismatch_at_init():
    obs = collect_nvml(fake_pynvml([], init_error=18), fallback=pytest.fail)
    assert [e.kind for e in obs.errors] == ["driver_mismatch"]


def test_missing_library_or_module_falls_back_to_nvidia_smi(monkeypatch):
    marker = GpuObservations(source="nvidia-smi-q-x", count=0)
    assert collect_nvml(fake_pynvml([], init_error=12), fallback=lambda: marker) is marker
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    assert collect_nvml(fallback=lambda: marker) is marker


def test_lost_gpu_handle_and_unreadable_fields():
    broken = h100(0, Temperature=NVMLError(999), EccMode=NVMLError(15))
    obs = collect_nvml(fake_pynvml([broken], handle_errors={1: 15}))
    assert [(e.kind, e.message) for e in obs.errors] == [("gpu_lost", "NVML: GPU 1: GPU is lost")]
    g = obs.gpus[0]
    assert g.temp_c is None and g.ecc_current is None
    assert g.unreadable == ("EccMode", "Temperature")
    assert g.retired_sbe is None  # Not Supported is not "unreadable"
    checks = {(f.check, f.status) for f in evaluate_gpu(obs, _ctx())}
    assert {("gpu.lost", Status.FAIL), ("gpu.unreadable", Status.FAIL), ("gpu.count", Status.FAIL)} <= checks


def test_nvidia_smi_fallback_runs_and_parses():
    def run(argv, **kw):
        assert argv == ["nvidia-smi", "-q", "-x"]
        return _ns(stdout=fixture_text("nvidia-smi-xml/h100-8x-faulty.xml"), stderr="", returncode=0)

    obs = collect_nvidia_smi(run)
    assert (obs.source, obs.count, obs.gpus[2].remap.pending) == ("nvidia-smi-q-x", 8, True)

    def fail(argv, **kw):
        return _ns(stdout=fixture_text("nvidia-smi-errors/driver-not-loaded.txt"), stderr="", returncode=9)

    assert [e.kind for e in collect_nvidia_smi(fail).errors] == ["driver_not_loaded"]


def test_local_run_grades_nvml_observations(monkeypatch, tmp_path):
    """``healthcheck run --local`` takes GPU observations from NVML when libnvidia-ml loads."""
    from healthcheck.run.execute import execute_run
    from healthcheck.run.options import OutputOptions, RunOptions, SelectionOptions, TargetOptions

    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([h100(i) for i in range(7)]))
    outcome = execute_run(RunOptions(target=TargetOptions(local=True, profile="h100-sxm5-8x"),
                                     selection=SelectionOptions(probes=["gpu"]),
                                     outputs=OutputOptions(run_dir=tmp_path / "run")))
    [host] = outcome.results.hosts.values()
    count = next(f for f in host.findings if f.check == "gpu.count")
    assert (count.status, count.value, count.source) == (Status.FAIL, 7, "nvml")
    assert host.observations["gpu"]["source"] == "nvml"  # in memory: the key observations
    full = load_results(tmp_path / "run", observations=True).hosts[host.name].observations
    assert len(full["gpu"]["gpus"]) == 7
