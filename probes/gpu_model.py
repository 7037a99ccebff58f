"""Typed GPU observations, built from a normalized nvidia-smi tree (or by the NVML collector).

    obs = observations_from_log(parse_nvidia_smi_xml(text), source="nvidia-smi-q-x")
    obs.gpus[3].pcie_width_current          # 8
    obs.gpus[3].remap.pending               # True

Units are converted here, once (``_leaf``): "81920 MiB" -> 81920, "67.03 W" -> 67.03, "-8 C" -> -8,
"16x" -> 16. "N/A", "[N/A]", "Not Supported" become None. A value of "Unknown Error" (the driver
asked the GPU and failed) also becomes None, and the field's path is listed in ``unreadable`` so the
evaluator can say so instead of treating it as absent. Every field is read by its path in the tree.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from healthcheck.probes.nvidia_smi_log import (
    NOT_AVAILABLE,
    UNREADABLE,
    IndexedTree,
    SmiError,
    SmiLog,
    indexed_value,
)
from healthcheck.probes.parse_memo import memoized

FAULT_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")


@dataclass(frozen=True)
class EccCounts:
    """ECC error counters. Pre-Ampere layouts map device memory to DRAM and the on-chip
    memories (register file, L1/L2, texture) to SRAM; Blackwell's parity + SEC-DED are summed."""

    sram_correctable: int | None = None
    sram_uncorrectable: int | None = None
    dram_correctable: int | None = None
    dram_uncorrectable: int | None = None


@dataclass(frozen=True)
class RowRemap:
    """Row-remapper state (Ampere and newer); histogram values are bank counts."""

    correctable: int | None = None
    uncorrectable: int | None = None
    pending: bool | None = None
    failure: bool | None = None
    banks_max: int | None = None
    banks_high: int | None = None
    banks_partial: int | None = None
    banks_low: int | None = None
    banks_none: int | None = None


@dataclass(frozen=True)
class GpuObservation:
    """One GPU as nvidia-smi or NVML saw it. None means "not reported" (N/A, or not in the output)."""

    index: int
    bus_id: str | None = None
    name: str | None = None
    uuid: str | None = None
    serial: str | None = None
    architecture: str | None = None
    vbios: str | None = None
    module_id: int | None = None
    board_part_number: str | None = None     # assets: <board_part_number>, else <gpu_part_number>
    inforom: Mapping[str, str] = field(default_factory=dict)    # assets: img_version, oem/ecc/pwr_object
    platform: Mapping[str, str] = field(default_factory=dict)   # assets: platformInfo (chassis serial, slot)
    board_id: str | None = None
    persistence_mode: str | None = None
    mig_current: str | None = None
    mig_pending: str | None = None
    mig_devices: int = 0
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    ecc_current: str | None = None
    ecc_pending: str | None = None
    ecc_volatile: EccCounts = field(default_factory=EccCounts)
    ecc_aggregate: EccCounts = field(default_factory=EccCounts)
    sram_threshold_exceeded: bool | None = None
    channel_repair_pending: bool | None = None
    unrepairable_memory: bool | None = None
    remap: RowRemap | None = None
    retired_sbe: int | None = None
    retired_dbe: int | None = None
    retired_pending: bool | None = None
    temp_c: float | None = None
    shutdown_c: float | None = None
    slowdown_c: float | None = None
    max_operating_c: float | None = None
    tlimit_c: float | None = None            # degrees of headroom below max operating (T.Limit)
    shutdown_tlimit_c: float | None = None   # T.Limit reading at which the GPU shuts down (e.g. -8)
    slowdown_tlimit_c: float | None = None
    max_operating_tlimit_c: float | None = None
    memory_temp_c: float | None = None
    memory_max_operating_c: float | None = None
    memory_max_operating_tlimit_c: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None       # the enforced/current limit
    power_default_limit_w: float | None = None
    power_max_limit_w: float | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    pcie_replays: int | None = None
    clock_events: tuple[str, ...] = ()       # active reasons, e.g. ("gpu_idle",), ("hw_slowdown", ...)
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    utilization_pct: int | None = None
    performance_state: str | None = None
    fan_speed: str | None = None
    fabric_state: str | None = None
    fabric_status: str | None = None
    fabric_clique_id: int | None = None      # NVLink clique (partition) the GPU joined; 0 outside a multi-node domain
    fabric_cluster_uuid: str | None = None   # NVLink domain the GPU joined; all zeros outside one
    fabric_health: Mapping[str, str] = field(default_factory=dict)  # <fabric><health>: summary, bandwidth, ...
    reset_required: bool | None = None
    drain_and_reset_recommended: bool | None = None
    recovery_action: str | None = None
    unreadable: tuple[str, ...] = ()         # fields printed as "Unknown Error" / "GPU is lost"


@dataclass(frozen=True)
class GpuObservations:
    """Everything the gpu probe knows about one host. ``count`` is None when unknown (an excerpt)."""

    source: str
    gpus: tuple[GpuObservation, ...] = ()
    count: int | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    errors: tuple[SmiError, ...] = ()
    partial: bool = False                    # a subset (-L, -q -d, excerpt): absent fields not graded


def observations_from_log(log: SmiLog, source: str) -> GpuObservations:
    """Normalized tree -> typed observations, GPUs numbered in the order nvidia-smi printed them."""
    gpus = tuple(_gpu(i, _Reader(tree)) for i, tree in enumerate(log.gpus))
    # A subset (-d, -i, an excerpt) lists fewer fields or GPUs than the node has: trust "Attached GPUs".
    partial = (log.fragment or any("product_name" not in tree for tree in log.gpus)
               or (log.attached_gpus or 0) > len(gpus))
    count = log.attached_gpus if partial and log.attached_gpus is not None else len(gpus)
    return GpuObservations(source=source, gpus=gpus, count=None if log.fragment else count,
                           driver_version=log.driver_version, cuda_version=log.cuda_version,
                           errors=log.errors, partial=partial)


_NUMBER = re.compile(r"^[+-]?\d+(?:\.\d+)?")


class _Leaf(NamedTuple):
    """Every reading of one leaf's printed text, computed once (``_leaf``)."""

    text: str | None         # stripped; None for N/A and for unreadable
    number: float | None     # the number the text starts with ("700.00 W" -> 700)
    integer: int | None      # ``number`` as an int, None when not finite
    yes: bool | None         # "Yes ..." -> True, "No ..." -> False
    unreadable: bool         # nvidia-smi could not read it ("Unknown Error")


# Leaf texts repeat across GPUs and hosts ("0", "N/A", "No", "35 C"): each is read once (pure, immutable).
@memoized(4096, typed=False)  # one str argument
def _leaf(value: str) -> _Leaf:
    text = value.strip()
    low = text.lower()
    if low in UNREADABLE:
        return _Leaf(None, None, None, None, True)
    if low in NOT_AVAILABLE:
        return _Leaf(None, None, None, None, False)
    match = _NUMBER.match(text)
    number = float(match.group()) if match else None
    if number is not None and number.is_integer():
        number = int(number)
    integer = None if number is None or not math.isfinite(number) else int(number)
    word = low.split()[0] if low else ""
    return _Leaf(text, number, integer, _YES.get(word), False)


_YES = {"yes": True, "no": False}
_NONE = _Leaf(None, None, None, None, False)  # not a leaf: absent, or a section


@memoized(256, typed=False)
def _steps(path: str) -> tuple[str, ...]:
    return tuple(path.split("/"))


class _Reader:
    """Reads typed leaves of one GPU's tree (or of a section of it, ``at``) by path, and records the
    paths nvidia-smi printed as unreadable (in the order read; a section shares its GPU's record). An
    ``IndexedTree`` is read through its layout: each leaf read is looked up in its texts (``texts``)."""

    __slots__ = ("prefix", "texts", "tree", "unreadable")

    def __init__(self, tree: Any, prefix: str = "", unreadable: list[str] | None = None,
                 texts: list[str] | None = None) -> None:
        if type(tree) is IndexedTree:
            tree, texts = tree.tree, tree.texts
        self.tree: Mapping[str, Any] = tree if isinstance(tree, dict) else {}
        self.texts = texts  # None: the tree's leaves are their texts
        self.prefix = prefix
        self.unreadable: list[str] = [] if unreadable is None else unreadable

    def node(self, path: str) -> Any:
        """What the tree holds at ``path`` (a leaf's text or index, a section, a list), None when absent."""
        if "/" not in path:
            return self.tree.get(path)
        node: Any = self.tree
        for step in _steps(path):
            if not isinstance(node, dict):
                return None
            node = node.get(step)
        return node

    def get(self, path: str) -> Any:
        """The node at ``path`` as the tree it reads has it (a leaf's text, a section, a list), None when absent."""
        node = self.node(path)
        return node if self.texts is None else indexed_value(node, self.texts)

    def at(self, path: str) -> _Reader:
        """The section at ``path`` (empty when absent or not a section), its reads recorded here."""
        return _Reader(self.node(path), f"{self.prefix}{path}/", self.unreadable, self.texts)

    def read(self, path: str) -> _Leaf:
        """The leaf at ``path`` (``_NONE`` when absent or not a leaf); an unreadable one is recorded."""
        node = self.tree.get(path) if "/" not in path else self.node(path)
        if type(node) is int and self.texts is not None:
            node = self.texts[node]  # its text as printed: ``_leaf`` strips it
        if not isinstance(node, str):
            return _NONE
        leaf = _leaf(node)
        if leaf.unreadable:
            self.unreadable.append(self.prefix + path)
        return leaf


def _gpu(index: int, r: _Reader) -> GpuObservation:
    """One GPU's observation, its fields read by name (in an order that lists unreadable fields as before)."""
    bus_id = r.get("@id") or r.read("pci/pci_bus_id").text
    fields = {"index": index, "bus_id": bus_id, **_identity(r), **_modes(r), **_memory(r), **_thermal(r),
              **_power_and_pcie(r), "clock_events": _clock_events(r), **_state(r)}
    return GpuObservation(**fields, unreadable=tuple(dict.fromkeys(r.unreadable)))


def _identity(r: _Reader) -> dict[str, Any]:
    return {"name": r.read("product_name").text, "uuid": r.read("uuid").text, "serial": r.read("serial").text,
            "architecture": r.read("product_architecture").text, "vbios": r.read("vbios_version").text,
            "module_id": _first(r.read("gpu_module_id").integer, r.read("platformInfo/module_id").integer),
            "board_part_number": _first(r.read("board_part_number").text, r.read("gpu_part_number").text),
            "board_id": r.read("board_id").text,
            "inforom": _texts(r, "inforom_version"), "platform": _texts(r, "platformInfo")}


def _modes(r: _Reader) -> dict[str, Any]:
    mig = r.at("mig_mode")
    return {"persistence_mode": r.read("persistence_mode").text, "mig_current": mig.read("current_mig").text,
            "mig_pending": mig.read("pending_mig").text, "mig_devices": len(r.get("mig_devices") or ())}


def _memory(r: _Reader) -> dict[str, Any]:
    """Frame buffer, ECC mode and counters, the driver's memory flags, row remapping, retired pages."""
    fb, mode, ecc = r.at("fb_memory_usage"), r.at("ecc_mode"), r.at("ecc_errors")
    out = {"memory_total_mib": fb.read("total").integer, "memory_used_mib": fb.read("used").integer,
           "ecc_current": mode.read("current_ecc").text, "ecc_pending": mode.read("pending_ecc").text,
           "ecc_volatile": _ecc(ecc.at("volatile")), "ecc_aggregate": _ecc(ecc.at("aggregate")),
           "sram_threshold_exceeded": ecc.read("aggregate/sram_threshold_exceeded").yes,
           "channel_repair_pending": ecc.read("channel_repair_pending").yes,
           "unrepairable_memory": ecc.read("unrepairable_memory").yes, "remap": _remap(r)}
    retired = r.at("retired_pages")
    sbe = retired.read("multiple_single_bit_retirement/retired_count").integer
    dbe = retired.read("double_bit_retirement/retired_count").integer
    pending = _first_bool(retired.read("pending_blacklist").yes, retired.read("pending_retirement").yes)
    return {**out, "retired_sbe": sbe, "retired_dbe": dbe, "retired_pending": pending}


def _thermal(r: _Reader) -> dict[str, Any]:
    t = r.at("temperature")
    return {"temp_c": t.read("gpu_temp").number, "shutdown_c": t.read("gpu_temp_max_threshold").number,
            "slowdown_c": t.read("gpu_temp_slow_threshold").number,
            "max_operating_c": t.read("gpu_temp_max_gpu_threshold").number,
            "tlimit_c": t.read("gpu_temp_tlimit").number,
            "shutdown_tlimit_c": t.read("gpu_temp_max_tlimit_threshold").number,
            "slowdown_tlimit_c": t.read("gpu_temp_slow_tlimit_threshold").number,
            "max_operating_tlimit_c": t.read("gpu_temp_max_gpu_tlimit_threshold").number,
            "memory_temp_c": t.read("memory_temp").number,
            "memory_max_operating_c": t.read("gpu_temp_max_mem_threshold").number,
            "memory_max_operating_tlimit_c": t.read("gpu_temp_max_mem_tlimit_threshold").number}


def _power_and_pcie(r: _Reader) -> dict[str, Any]:
    p, link = r.at("gpu_power_readings"), r.at("pci/pci_gpu_link_info")
    draw = _first(p.read("power_draw").number, p.read("instant_power_draw").number,
                  p.read("average_power_draw").number)
    limit = _first(p.read("current_power_limit").number, p.read("enforced_power_limit").number,
                   p.read("power_limit").number)
    return {"power_draw_w": draw, "power_limit_w": limit,
            "power_default_limit_w": p.read("default_power_limit").number,
            "power_max_limit_w": p.read("max_power_limit").number,
            "pcie_gen_current": link.read("pcie_gen/current_link_gen").integer,
            "pcie_gen_max": link.read("pcie_gen/max_link_gen").integer,
            "pcie_width_current": link.read("link_widths/current_link_width").integer,
            "pcie_width_max": link.read("link_widths/max_link_width").integer,
            "pcie_replays": r.read("pci/replay_counter").integer}


def _state(r: _Reader) -> dict[str, Any]:
    """Clocks, load, fan, fabric (R570+: clique, cluster UUID, health block) and the reset/recovery flags."""
    reset = r.at("gpu_reset_status")
    return {"sm_clock_mhz": r.read("clocks/sm_clock").integer,
            "sm_clock_max_mhz": r.read("max_clocks/sm_clock").integer,
            "utilization_pct": r.read("utilization/gpu_util").integer,
            "performance_state": r.read("performance_state").text, "fan_speed": r.read("fan_speed").text,
            "fabric_state": r.read("fabric/state").text, "fabric_status": r.read("fabric/status").text,
            "fabric_clique_id": r.read("fabric/cliqueId").integer,
            "fabric_cluster_uuid": r.read("fabric/clusterUuid").text, "fabric_health": _texts(r, "fabric/health"),
            "reset_required": reset.read("reset_required").yes,
            "drain_and_reset_recommended": reset.read("drain_and_reset_recommended").yes,
            "recovery_action": r.read("gpu_recovery_action").text}


def _ecc(r: _Reader) -> EccCounts:
    """Ampere+ ``sram_*``/``dram_*`` counters, else the pre-Ampere ``single_bit``/``double_bit`` ones."""
    parity, secded = r.read("sram_uncorrectable_parity").integer, r.read("sram_uncorrectable_secded").integer
    sram_unc, sram_corr = r.read("sram_uncorrectable").integer, r.read("sram_correctable").integer
    dram_corr, dram_unc = r.read("dram_correctable").integer, r.read("dram_uncorrectable").integer
    if sram_unc is None and (parity is not None or secded is not None):
        sram_unc = (parity or 0) + (secded or 0)
    if sram_corr is not None or sram_unc is not None or dram_corr is not None or dram_unc is not None:
        return EccCounts(sram_corr, sram_unc, dram_corr, dram_unc)
    single, double = r.at("single_bit"), r.at("double_bit")
    sram_correctable = _sum(single.read(k).integer for k in _ON_CHIP)
    sram_uncorrectable = _sum(double.read(k).integer for k in _ON_CHIP)
    return EccCounts(sram_correctable=sram_correctable, sram_uncorrectable=sram_uncorrectable,
                     dram_correctable=single.read("device_memory").integer,
                     dram_uncorrectable=double.read("device_memory").integer)


_ON_CHIP = ("register_file", "l1_cache", "l2_cache", "texture_memory", "texture_shm", "cbu")


def _remap(r: _Reader) -> RowRemap | None:
    if not isinstance(r.get("remapped_rows"), Mapping):
        return None  # "N/A": pre-Ampere, or MIG enabled (the driver hides it per GPU instance)
    rows = r.at("remapped_rows")
    hist = rows.at("row_remapper_histogram")
    return RowRemap(correctable=rows.read("remapped_row_corr").integer,
                    uncorrectable=rows.read("remapped_row_unc").integer,
                    pending=rows.read("remapped_row_pending").yes, failure=rows.read("remapped_row_failure").yes,
                    banks_max=hist.read("row_remapper_histogram_max").integer,
                    banks_high=hist.read("row_remapper_histogram_high").integer,
                    banks_partial=hist.read("row_remapper_histogram_partial").integer,
                    banks_low=hist.read("row_remapper_histogram_low").integer,
                    banks_none=hist.read("row_remapper_histogram_none").integer)


def _clock_events(r: _Reader) -> tuple[str, ...]:
    reasons = r.get("clocks_event_reasons")
    if not isinstance(reasons, Mapping):
        return ()
    return tuple(k for k, v in reasons.items() if isinstance(v, str) and v.strip().lower() == "active")


def _sum(values: Iterable[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _texts(r: _Reader, section: str) -> dict[str, str]:
    """A flat section (``inforom_version``, ``platformInfo``) as {leaf: text}, N/A leaves dropped."""
    leaves = r.at(section)
    return {k: text for k in leaves.tree if (text := leaves.read(k).text)}


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def _first_bool(*values: bool | None) -> bool | None:
    return True if True in values else _first(*values)
