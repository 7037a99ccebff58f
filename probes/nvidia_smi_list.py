"""The short nvidia-smi forms, accepted from capture bundles as fallbacks: ``nvidia-smi -L``
(command id ``nvidia-smi-l``) and the default table of plain ``nvidia-smi`` (``nvidia-smi``).

    parse_nvidia_smi_l("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)")      # SmiLog, 1 GPU
    parse_nvidia_smi_table(text).gpus[0]["temperature"]["gpu_temp"]          # "38 C"

Both return the normalized tree of ``probes/nvidia_smi_log.py`` with the few fields these forms
show, so the same reader and evaluator apply (fields they lack are simply not graded).

``-L``: any driver; one ``GPU N: name (UUID: ...)`` line per GPU, MIG lines ignored.
Table: written against ../shared/corpus/nvidia-smi (driver 375 "0000:00:04.0" bus ids with no MIG
row, 525 narrow and 550-590 wide layouts, "ERR!" in the fan column, MIG-enabled GPUs with the
"MIG devices" and "Processes" tables after it, which are ignored). A truncated name ("NVIDIA
GeForce ...") is kept as printed. Neither a GPU row nor an error line -> ``ParseError``.
"""

from __future__ import annotations

import re
from typing import Any

from healthcheck.core.spec import ParseError
from healthcheck.probes.nvidia_smi_log import SmiLog, find_nvidia_smi_errors, normalize_bus_id

_L_LINE = re.compile(r"^GPU (?P<index>\d+): (?P<name>.+?) \(UUID: (?P<uuid>[^)]*)\)")
_VERSIONS = re.compile(r"Driver Version:\s*(?P<driver>\S+)(?:\s+CUDA Version:\s*(?P<cuda>\S+))?")
_ROW1 = re.compile(r"^\s*(?P<index>\d+)\s+(?P<name>.+?)\s+(?P<pm>On|Off)\s*$")
_BUS = re.compile(r"^\s*(?P<bus>[0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s+(?P<disp>\S+)\s*$")
_ROW2 = re.compile(r"^\s*(?P<fan>\S+)\s+(?P<temp>\d+|N/A)C?\s+(?P<perf>P\d+|N/A)\s+(?P<usage>\S+?)\s*/\s*(?P<cap>\S+)")
_MEMORY = re.compile(r"^\s*(?P<used>\d+)MiB\s*/\s*(?P<total>\d+)MiB\s*$")
_UTIL = re.compile(r"^\s*(?P<util>\d+%|N/A)\s+(?P<mode>.+?)\s*$")


def parse_nvidia_smi_l(text: str) -> SmiLog:
    """``nvidia-smi -L``: GPU names and UUIDs in index order; error lines become errors."""
    gpus: list[dict[str, Any]] = []
    for match in map(_L_LINE.match, text.splitlines()):
        if match:
            gpus.append({"product_name": match["name"], "uuid": match["uuid"], "mig_devices": []})
    errors = find_nvidia_smi_errors(text)
    if not gpus and not errors and text.strip():
        raise ParseError("nvidia-smi -L printed no GPU line", text)
    return SmiLog(driver_version=None, cuda_version=None, attached_gpus=len(gpus), gpus=tuple(gpus),
                  errors=errors)


def parse_nvidia_smi_table(text: str) -> SmiLog:
    """The default ``nvidia-smi`` table: per GPU name, bus id, persistence, fan, temperature,
    performance state, power usage/cap, memory, utilization and MIG mode."""
    versions = _VERSIONS.search(text)
    gpus: list[dict[str, Any]] = []
    rows: list[list[str]] = []
    for line in text.splitlines():
        if re.match(r"^\|\s*(MIG devices|Processes):", line):
            break
        if line.startswith("|") and not line.startswith("|="):
            rows.append(line.strip().strip("|").split("|"))
    for i, cells in enumerate(rows):
        first = _ROW1.match(cells[0]) if len(cells) >= 3 else None
        if first is None:
            continue
        gpu: dict[str, Any] = {"product_name": first["name"], "mig_devices": [],
                               "persistence_mode": "Enabled" if first["pm"] == "On" else "Disabled"}
        bus = _BUS.match(cells[1])
        if bus:
            gpu["@id"] = normalize_bus_id(bus["bus"])
        if i + 1 < len(rows) and len(rows[i + 1]) >= 3:
            _second_row(gpu, rows[i + 1])
        if i + 2 < len(rows) and len(rows[i + 2]) >= 3 and not rows[i + 2][0].strip():
            gpu["mig_mode"] = {"current_mig": rows[i + 2][2].strip()}
        gpus.append(gpu)
    errors = find_nvidia_smi_errors(text)
    if not gpus and not errors:
        raise ParseError("no GPU row in the nvidia-smi table", text)
    return SmiLog(driver_version=versions["driver"] if versions else None,
                  cuda_version=versions["cuda"] if versions else None,
                  attached_gpus=len(gpus), gpus=tuple(gpus), errors=errors)


def _second_row(gpu: dict[str, Any], cells: list[str]) -> None:
    """``| N/A 38C P0 70W / 700W | 1MiB / 81559MiB | 0% Default |``."""
    status = _ROW2.match(cells[0])
    if status:
        gpu["fan_speed"] = status["fan"]
        gpu["temperature"] = {"gpu_temp": f"{status['temp']} C"}
        gpu["performance_state"] = status["perf"]
        gpu["gpu_power_readings"] = {"power_draw": status["usage"].replace("W", " W"),
                                     "current_power_limit": status["cap"].replace("W", " W")}
    memory = _MEMORY.match(cells[1])
    if memory:
        gpu["fb_memory_usage"] = {"total": f"{memory['total']} MiB", "used": f"{memory['used']} MiB"}
    util = _UTIL.match(cells[2])
    if util:
        gpu["utilization"] = {"gpu_util": util["util"].replace("%", " %")}
