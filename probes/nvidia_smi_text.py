"""Parser for text ``nvidia-smi -q`` (command id ``nvidia-smi-q``, from capture bundles and
nvidia-bug-report logs) into the same normalized tree as the XML parser.

    log = parse_nvidia_smi_q(text)
    log.gpus[0]["remapped_rows"]["remapped_row_pending"]     # "Yes"

Written against ../shared/corpus/nvidia-smi-q: drivers 510 to 610 (525 "Clocks Throttle
Reasons" and "Power Readings", 535+ "Clocks Event Reasons", 550+ "SRAM Uncorrectable Parity /
SEC-DED", 565+ "T.Limit" temperatures, 610 "Driver Version ... [Deprecated ...]"), ``-q -d``
subsets, MIG devices, and excerpts pasted without the "GPU <bus id>" header (those become one
GPU with no bus id, ``fragment=True``). The layout is an indented ``Label : value`` tree; a label
never contains ":", values may ("00000000:07:00.0"). Labels are matched case-insensitively
("Ecc Mode" on 525, "Retired pages" in a snippet). A trailing annotation after a Yes/No value
("Yes   <===") is left to the reader, which looks at the first word only. "[...]" elisions, the
NVSMI LOG banner and prompt lines are skipped. Output with no GPU data and no error line raises
``ParseError``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from healthcheck.core.spec import ParseError
from healthcheck.probes.nvidia_smi_log import SmiLog, find_nvidia_smi_errors, normalize_bus_id, tree_set

# ``Label : value``: the first colon followed by whitespace or the end of the line. Found with one linear
# search: the former ``^(\S.*?)\s*:(?:\s+(.*))?$`` backtracked quadratically on long colon-less lines.
_KV_COLON = re.compile(r":(?=\s|$)")
_GPU_HEADER = re.compile(r"^GPU\s+(?P<bus>[0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])$")
# banner, elision, comments, shell prompts (user@host:path$); [^\s@]+@[^\s:]+ cannot backtrack like \S+@\S+
_SKIP = re.compile(r"^(=+NVSMI LOG=+|\[\.\.\.\]|#.*|(\(\S+\)\s+)?[^\s@]+@[^\s:]+:\S*[#$](\s.*)?)$")
_GLOBAL = {"timestamp", "driver version", "cuda version", "kmd version", "cuda umd version",
           "attached gpus", "hic info", "attached units"}

_CLOCK_REASONS = {"idle": "gpu_idle", "applications clocks setting": "applications_clocks_setting",
                  "sw power cap": "sw_power_cap", "hw slowdown": "hw_slowdown",
                  "hw thermal slowdown": "hw_thermal_slowdown",
                  "hw power brake slowdown": "hw_power_brake_slowdown", "sync boost": "sync_boost",
                  "sw thermal slowdown": "sw_thermal_slowdown",
                  "display clock setting": "display_clocks_setting"}
_ECC_COUNTERS = {"sram correctable": "sram_correctable", "sram uncorrectable": "sram_uncorrectable",
                 "sram uncorrectable parity": "sram_uncorrectable_parity",
                 "sram uncorrectable sec-ded": "sram_uncorrectable_secded",
                 "dram correctable": "dram_correctable", "dram uncorrectable": "dram_uncorrectable",
                 "sram threshold exceeded": "sram_threshold_exceeded",
                 "device memory": "device_memory", "register file": "register_file",
                 "l1 cache": "l1_cache", "l2 cache": "l2_cache", "texture memory": "texture_memory",
                 "texture shared": "texture_shm", "cbu": "cbu", "total": "total"}
_POWER = {"power draw": "power_draw", "average power draw": "average_power_draw",
          "instantaneous power draw": "instant_power_draw", "power limit": "power_limit",
          "current power limit": "current_power_limit", "enforced power limit": "enforced_power_limit",
          "default power limit": "default_power_limit", "min power limit": "min_power_limit",
          "max power limit": "max_power_limit", "power management": "power_management"}
_CLOCKS = {"graphics": "graphics_clock", "sm": "sm_clock", "memory": "mem_clock", "video": "video_clock"}

# text section path (lowercase labels joined by "/") -> (tree path, {label: tag})
_SECTIONS: dict[str, tuple[str, dict[str, str]]] = {
    "": ("", {"product name": "product_name", "product architecture": "product_architecture",
              "persistence mode": "persistence_mode", "serial number": "serial", "gpu uuid": "uuid",
              "minor number": "minor_number", "vbios version": "vbios_version",
              "module id": "gpu_module_id", "fan speed": "fan_speed",
              "performance state": "performance_state", "gpu recovery action": "gpu_recovery_action",
              "remapped rows": "remapped_rows"}),
    "mig mode": ("mig_mode", {"current": "current_mig", "pending": "pending_mig"}),
    "platform info": ("platformInfo", {"module id": "module_id"}),
    "inforom version": ("inforom_version", {"image version": "img_version"}),
    "gpu reset status": ("gpu_reset_status", {"reset required": "reset_required",
                                              "drain and reset recommended": "drain_and_reset_recommended"}),
    "pci": ("pci", {"bus id": "pci_bus_id", "device id": "pci_device_id",
                    "replays since reset": "replay_counter", "replay number rollovers": "replay_rollover_counter"}),
    "pci/gpu link info": ("pci/pci_gpu_link_info", {}),
    "pci/gpu link info/pcie generation": ("pci/pci_gpu_link_info/pcie_gen", {
        "max": "max_link_gen", "current": "current_link_gen", "device current": "device_current_link_gen",
        "device max": "max_device_link_gen", "host max": "max_host_link_gen"}),
    "pci/gpu link info/link width": ("pci/pci_gpu_link_info/link_widths",
                                     {"max": "max_link_width", "current": "current_link_width"}),
    "clocks event reasons": ("clocks_event_reasons", _CLOCK_REASONS),
    "clocks event reasons/hw slowdown": ("clocks_event_reasons", _CLOCK_REASONS),
    "clocks throttle reasons": ("clocks_event_reasons", _CLOCK_REASONS),
    "clocks throttle reasons/hw slowdown": ("clocks_event_reasons", _CLOCK_REASONS),
    "fb memory usage": ("fb_memory_usage", {"total": "total", "reserved": "reserved", "used": "used",
                                            "free": "free"}),
    "utilization": ("utilization", {"gpu": "gpu_util", "memory": "memory_util"}),
    "ecc mode": ("ecc_mode", {"current": "current_ecc", "pending": "pending_ecc"}),
    "ecc errors": ("ecc_errors", {"channel repair pending": "channel_repair_pending",
                                  "tpc repair pending": "tpc_repair_pending",
                                  "unrepairable memory": "unrepairable_memory"}),
    "ecc errors/volatile": ("ecc_errors/volatile", _ECC_COUNTERS),
    "ecc errors/aggregate": ("ecc_errors/aggregate", _ECC_COUNTERS),
    "ecc errors/volatile/single bit": ("ecc_errors/volatile/single_bit", _ECC_COUNTERS),
    "ecc errors/volatile/double bit": ("ecc_errors/volatile/double_bit", _ECC_COUNTERS),
    "ecc errors/aggregate/single bit": ("ecc_errors/aggregate/single_bit", _ECC_COUNTERS),
    "ecc errors/aggregate/double bit": ("ecc_errors/aggregate/double_bit", _ECC_COUNTERS),
    "retired pages": ("retired_pages", {
        "single bit ecc": "multiple_single_bit_retirement/retired_count",
        "double bit ecc": "double_bit_retirement/retired_count",
        "pending page blacklist": "pending_blacklist", "pending page retirement": "pending_retirement"}),
    "remapped rows": ("remapped_rows", {
        "correctable error": "remapped_row_corr", "uncorrectable error": "remapped_row_unc",
        "pending": "remapped_row_pending", "remapping failure occurred": "remapped_row_failure"}),
    "remapped rows/bank remap availability histogram": ("remapped_rows/row_remapper_histogram", {
        name: f"row_remapper_histogram_{name}" for name in ("max", "high", "partial", "low", "none")}),
    "temperature": ("temperature", {
        "gpu current temp": "gpu_temp", "gpu t.limit temp": "gpu_temp_tlimit",
        "gpu shutdown temp": "gpu_temp_max_threshold", "gpu slowdown temp": "gpu_temp_slow_threshold",
        "gpu max operating temp": "gpu_temp_max_gpu_threshold",
        "gpu shutdown t.limit temp": "gpu_temp_max_tlimit_threshold",
        "gpu slowdown t.limit temp": "gpu_temp_slow_tlimit_threshold",
        "gpu max operating t.limit temp": "gpu_temp_max_gpu_tlimit_threshold",
        "gpu target temperature": "gpu_target_temperature", "memory current temp": "memory_temp",
        "memory max operating temp": "gpu_temp_max_mem_threshold",
        "memory max operating t.limit temp": "gpu_temp_max_mem_tlimit_threshold"}),
    "power readings": ("gpu_power_readings", _POWER),
    "gpu power readings": ("gpu_power_readings", _POWER),
    "clocks": ("clocks", _CLOCKS),
    "max clocks": ("max_clocks", _CLOCKS),
    "fabric": ("fabric", {"state": "state", "status": "status"}),
}


@dataclass
class _Node:
    label: str
    value: str | None
    children: list[_Node] = field(default_factory=list)


def parse_nvidia_smi_q(text: str) -> SmiLog:
    """Parse text ``nvidia-smi -q`` (whole report, ``-d`` subset or excerpt) into an ``SmiLog``."""
    root = _indent_tree(text)
    top: dict[str, str] = {}
    gpus: list[dict[str, Any]] = []
    loose: list[_Node] = []
    for node in root.children:
        header = _GPU_HEADER.match(node.label) if node.value is None else None
        if header:
            gpus.append(_gpu_tree(node, normalize_bus_id(header["bus"])))
        elif node.value is not None and node.label.lower() in _GLOBAL:
            top[node.label.lower()] = node.value
        else:
            loose.append(node)
    fragment = not gpus and any(n.children or n.label.lower() in _SECTIONS[""][1] for n in loose)
    if fragment:
        gpus.append(_gpu_tree(_Node("", None, loose), None))
    errors = find_nvidia_smi_errors(text)
    if not gpus and not errors:
        raise ParseError("no GPU section in nvidia-smi -q output", text)
    return SmiLog(
        driver_version=_first_word(top.get("kmd version") or top.get("driver version")),
        cuda_version=_first_word(top.get("cuda umd version") or top.get("cuda version")),
        attached_gpus=int(top["attached gpus"]) if top.get("attached gpus", "").isdecimal() else None,
        gpus=tuple(gpus),
        errors=errors,
        fragment=fragment,
    )


def _indent_tree(text: str) -> _Node:
    """``Label : value`` lines -> a tree by indentation (tabs count as 4 spaces)."""
    root = _Node("", None)
    stack: list[tuple[int, _Node]] = [(-1, root)]
    for raw in text.splitlines():
        line = raw.expandtabs(4).rstrip()
        content = line.strip()
        if not content or _SKIP.match(content):
            continue
        indent = len(line) - len(line.lstrip())
        colon = _KV_COLON.search(content)
        label = content[:colon.start()].strip() if colon else ""
        node = _Node(label, content[colon.end():].strip()) if colon and label else _Node(content, None)
        while stack[-1][0] >= indent:
            stack.pop()
        stack[-1][1].children.append(node)
        stack.append((indent, node))
    return root


def _gpu_tree(gpu: _Node, bus_id: str | None) -> dict[str, Any]:
    tree: dict[str, Any] = {"mig_devices": []}
    if bus_id:
        tree["@id"] = bus_id
    _translate(gpu.children, "", tree)
    return tree


def _translate(nodes: list[_Node], section: str, tree: dict[str, Any]) -> None:
    """Copy the labels this section maps onto tree paths; recurse into known sub-sections."""
    target, labels = _SECTIONS[section]
    for node in nodes:
        label = " ".join(node.label.lower().split())
        if section == "" and label == "mig device":
            tree["mig_devices"].append({"index": _child_value(node, "index")})
            continue
        tag = labels.get(label)
        if node.value is not None and tag is not None:
            tree_set(tree, f"{target}/{tag}" if target else tag, node.value)
        sub = f"{section}/{label}" if section else label
        if node.children and sub in _SECTIONS:
            _translate(node.children, sub, tree)


def _child_value(node: _Node, label: str) -> str | None:
    return next((c.value for c in node.children if c.label.lower() == label), None)


def _first_word(value: str | None) -> str | None:
    """"610.57.04 [Deprecated; ...]" -> "610.57.04"."""
    return value.split()[0] if value and value.split() else None
