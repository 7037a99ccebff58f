"""probes/nvml_fabric.py against the installed pynvml's own structs and constants (no GPU: NVML calls faked)."""

from __future__ import annotations

import ctypes
from typing import Any

import pytest

from healthcheck.probes.nvml_fabric import MASK, nvml_fabric, nvml_platform

pynvml = pytest.importorskip("pynvml")
if not hasattr(pynvml, "c_nvmlGpuFabricInfo_v3_t"):
    pytest.skip("pynvml without nvmlGpuFabricInfo_v3", allow_module_level=True)


def call(fn: Any, *args: Any) -> Any:
    """As ``nvml._Calls.call``: None where NVML reports an error."""
    try:
        return fn(*args)
    except pynvml.NVMLError:
        return None


def test_mask_layout_is_nvmls():
    names = {"bandwidth": "DEGRADED_BW", "route_recovery_in_progress": "ROUTE_RECOVERY",
             "route_unhealthy": "ROUTE_UNHEALTHY", "access_timeout_recovery": "ACCESS_TIMEOUT_RECOVERY",
             "incorrect_configuration": "INCORRECT_CONFIGURATION"}
    for leaf, (shift, width, _) in MASK.items():
        name = names[leaf]
        assert shift == getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_{name}")
        assert width == getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_{name}")
    assert MASK["bandwidth"][2][pynvml.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE] == "Degraded"
    assert MASK["incorrect_configuration"][2][
        pynvml.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_INSUFFICIENT_NVLINKS] == "Insufficient NVLinks"


class FakeNvml:
    """pynvml's structs and constants, with the two device calls answered here (version checked as NVML does)."""

    def __init__(self, mask: int, summary: int) -> None:
        for name in ("c_nvmlGpuFabricInfo_v3_t", "nvmlGpuFabricInfo_v3", "c_nvmlGpuFabricInfo_t",
                     "c_nvmlPlatformInfo_v2_t", "nvmlPlatformInfo_v2"):
            setattr(self, name, getattr(pynvml, name))
        self.mask, self.summary = mask, summary

    def nvmlDeviceGetGpuFabricInfoV(self, handle: Any, pointer: Any) -> int:
        info = pointer._obj
        if info.version != pynvml.nvmlGpuFabricInfo_v3:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        info.state, info.status, info.cliqueId = 3, 0, 32766
        ctypes.memmove(info.clusterUuid, bytes(range(16)), 16)
        info.healthMask, info.healthSummary = self.mask, self.summary
        return 0

    def nvmlDeviceGetGpuFabricInfo(self, handle: Any, pointer: Any) -> int:
        raise AssertionError("v1 is only the fallback")

    def nvmlDeviceGetPlatformInfo(self, handle: Any, pointer: Any) -> int:
        info = pointer._obj
        if info.version != pynvml.nvmlPlatformInfo_v2:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        info.chassisSerialNumber = b"1821025000117"
        info.slotNumber, info.trayIndex, info.hostId, info.moduleId = b"\x07", b"\x03", b"\x01", b"\x02"
        return 0


def test_v3_fabric_info_with_degraded_bandwidth_and_platform_position():
    degraded = (pynvml.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE
                | pynvml.NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_FALSE << 4
                | pynvml.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NONE << 8)
    fake = FakeNvml(degraded, pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY)
    fabric = nvml_fabric(fake, call, 0)
    assert (fabric.state, fabric.status, fabric.clique_id) == ("Completed", "Success", 32766)
    assert fabric.cluster_uuid == "00010203-0405-0607-0809-0a0b0c0d0e0f"
    assert fabric.health == {"summary": "Limited Capacity", "bandwidth": "Degraded", "route_unhealthy": "False",
                             "incorrect_configuration": "None"}
    assert nvml_platform(fake, call, 0) == {"chassis_serial_number": "1821025000117", "slot_number": "7",
                                            "tray_index": "3", "host_id": "1", "module_id": "2"}
