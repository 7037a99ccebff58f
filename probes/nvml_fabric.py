"""NVML's GPU fabric info and platform info, in the words ``nvidia-smi -q -x`` prints (local mode).

    fabric = nvml_fabric(nvml, call, handle)
    fabric.state, fabric.clique_id, fabric.health["bandwidth"]    # "Completed", 32766, "Full"
    nvml_platform(nvml, call, handle)                             # {"chassis_serial_number": ..., "tray_index": "3"}

``nvmlDeviceGetGpuFabricInfoV`` with ``nvmlGpuFabricInfo_v3_t`` (its ``version`` set to
``nvmlGpuFabricInfo_v3``; health mask and summary, R570+) when the installed pynvml has it, else
``nvmlDeviceGetGpuFabricInfo`` (state, status, clique, cluster UUID only).
The health mask is decoded with NVML's own field layout (NVML API reference, Fabric definitions:
docs.nvidia.com/deploy/nvml-api/group__nvmlFabricDefs.html, ``NVML_GPU_FABRIC_HEALTH_MASK_*``): two bits
per condition, 0 not supported, 1 true, 2 false; four bits for the incorrect-configuration reason. A
condition reported "not supported" is left out, as nvidia-smi's N/A is.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

STATES = {1: "Not Started", 2: "In Progress", 3: "Completed"}  # 0: not supported
SUMMARIES = {1: "Healthy", 2: "Unhealthy", 3: "Limited Capacity"}
# leaf -> (shift, width, {value: word}); nvidia-smi's words for the two-state conditions
_TRUE_FALSE = {1: "True", 2: "False"}
MASK = {"bandwidth": (0, 0x3, {1: "Degraded", 2: "Full"}),
        "route_recovery_in_progress": (2, 0x3, _TRUE_FALSE),
        "route_unhealthy": (4, 0x3, _TRUE_FALSE),
        "access_timeout_recovery": (6, 0x3, _TRUE_FALSE),
        "incorrect_configuration": (8, 0xF, {1: "None", 2: "Incorrect SysGUID", 3: "Incorrect Chassis SN",
                                             4: "No Partition", 5: "Insufficient NVLinks",
                                             6: "Incompatible GPU Firmware", 7: "Invalid Location",
                                             8: "GPU State Invalid"})}
Call = Callable[..., Any]


@dataclass(frozen=True)
class NvmlFabric:
    state: str | None = None
    status: str | None = None
    clique_id: int | None = None
    cluster_uuid: str | None = None
    health: dict[str, str] = field(default_factory=dict)


def decode_health(mask: int, summary: int | None = None) -> dict[str, str]:
    """A fabric health mask (and summary) as nvidia-smi's words; unknown codes kept as ``code N``."""
    out = {}
    if summary in SUMMARIES:
        out["summary"] = SUMMARIES[summary]
    for leaf, (shift, width, words) in MASK.items():
        code = (mask >> shift) & width
        if code:
            out[leaf] = words.get(code, f"code {code}")
    return out


def uuid_text(raw: Any) -> str | None:
    """16 bytes -> ``xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`` (all zeros outside an NVLink domain)."""
    data = bytes(raw)
    if len(data) != 16:
        return None
    hexed = data.hex()
    return f"{hexed[:8]}-{hexed[8:12]}-{hexed[12:16]}-{hexed[16:20]}-{hexed[20:]}"


def nvml_fabric(nvml: ModuleType, call: Call, handle: Any) -> NvmlFabric:
    """One GPU's fabric info (``call`` returns None where NVML reports an error, as ``_Calls.call`` does)."""
    v3, version = getattr(nvml, "c_nvmlGpuFabricInfo_v3_t", None), getattr(nvml, "nvmlGpuFabricInfo_v3", None)
    if v3 is not None and version is not None and hasattr(nvml, "nvmlDeviceGetGpuFabricInfoV"):
        info = v3()
        info.version = version  # a versioned struct: NVML refuses one without its version
        if call(nvml.nvmlDeviceGetGpuFabricInfoV, handle, ctypes.byref(info)) is not None:
            return _fabric(info, decode_health(int(info.healthMask), int(info.healthSummary)))
    v1 = getattr(nvml, "c_nvmlGpuFabricInfo_t", None)
    if v1 is None:
        return NvmlFabric()
    info = v1()
    if call(nvml.nvmlDeviceGetGpuFabricInfo, handle, ctypes.byref(info)) is None:
        return NvmlFabric()
    return _fabric(info, {})


def _fabric(info: Any, health: dict[str, str]) -> NvmlFabric:
    state = STATES.get(int(info.state))
    if state is None:
        return NvmlFabric()
    status = "Success" if int(info.status) == 0 else f"NVML error {info.status}"
    clique, uuid = getattr(info, "cliqueId", None), getattr(info, "clusterUuid", None)  # absent from old structs
    return NvmlFabric(state=state, status=status, clique_id=None if clique is None else int(clique),
                      cluster_uuid=None if uuid is None else uuid_text(uuid), health=health)


def nvml_platform(nvml: ModuleType, call: Call, handle: Any) -> dict[str, str]:
    """``nvmlDeviceGetPlatformInfo`` (v2) as nvidia-smi's ``<platformInfo>`` leaves; {} where unsupported."""
    struct, version = getattr(nvml, "c_nvmlPlatformInfo_v2_t", None), getattr(nvml, "nvmlPlatformInfo_v2", None)
    if struct is None or version is None or not hasattr(nvml, "nvmlDeviceGetPlatformInfo"):
        return {}
    info = struct()
    info.version = version
    if call(nvml.nvmlDeviceGetPlatformInfo, handle, ctypes.byref(info)) is None:
        return {}
    serial = _text(info.chassisSerialNumber)
    out = {"chassis_serial_number": serial} if serial else {}
    for leaf, name in (("slot_number", "slotNumber"), ("tray_index", "trayIndex"), ("host_id", "hostId"),
                       ("module_id", "moduleId")):
        out[leaf] = str(_byte(getattr(info, name)))
    return out


def _byte(raw: Any) -> int:
    """A ``c_char`` field (ctypes gives one byte, b'\\x03'; pynvml's structures may decode it to str) or an
    integer field as a number."""
    if isinstance(raw, bytes | bytearray | str):
        return (raw[0] if isinstance(raw, bytes | bytearray) else ord(raw[0])) if raw else 0
    return int(raw)


def _text(raw: Any) -> str:
    """A ``c_char`` array as text: bytes from ctypes, or str where pynvml's structures decode it."""
    if isinstance(raw, str):
        return raw.split("\0", 1)[0].strip()
    return bytes(raw).split(b"\0", 1)[0].decode("ascii", "replace").strip()
