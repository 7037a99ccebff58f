"""Typed GPU observations, built from a normalized nvidia-smi tree (or by the NVML collector).

    obs = observations_from_log(parse_nvidia_smi_xml(text), source="nvidia-smi-q-x")
    obs.gpus[3].pcie_width_current          # 8
    obs.gpus[3].remap.pending               # True

Units are converted here, once: "81920 MiB" -> 81920 (``_mib``), "67.03 W" -> 67.03 (``_w``),
"-8 C" -> -8 (``_c``), "16x" -> 16. "N/A", "[N/A]", "Not Supported" become None. A value of
"Unknown Error" (the driver asked the GPU and failed) also becomes None, and the field's name is
listed in ``unreadable`` so the evaluator can say so instead of treating it as absent.

A report whose layout was seen before (``nvidia_smi_xml.parse_nvidia_smi_xml_layout``) is read without
its tree (``observations_from_layout``): the same reads in the same order, each path resolved once per
layout and GPU to the index of its text. Reads are bound once per GPU and a ``GpuObservation`` is built
without its frozen ``__init__`` (``_gpu_observation``): ~0.74 -> ~0.45 CPU-ms for 8 GPUs.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, NamedTuple

from healthcheck.probes.nvidia_smi_log import NOT_AVAILABLE, UNREADABLE, SmiError, SmiLayoutLog, SmiLog
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
    return _observations(log, source, map(_Reader, log.gpus))


def observations_from_layout(report: SmiLayoutLog, source: str) -> GpuObservations:
    """``observations_from_log`` of the report ``report`` stands for (its tree built), read through
    its layout's trees instead: the same reads in the same order, each leaf's text looked up by index."""
    return _observations(report.log, source, map(_LayoutReader, report.log.gpus, report.plans,
                                                 repeat(report.texts)))


def _observations(log: SmiLog, source: str, readers: Iterable[_Reader]) -> GpuObservations:
    gpus = tuple(_gpu(i, r) for i, r in enumerate(readers))
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
    """Reads typed values from one GPU tree and remembers which ones were unreadable."""

    def __init__(self, tree: Mapping[str, Any]) -> None:
        self.tree = tree
        self.unreadable: list[str] = []

    def read(self, path: str) -> _Leaf:
        """The leaf at ``path`` (``_NONE`` when absent or not a leaf); an unreadable one is recorded."""
        node: Any = self.tree   # tree_get, unrolled: this runs ~80 times per GPU
        for step in _steps(path):
            if type(node) is dict or isinstance(node, Mapping):
                node = node.get(step)
            else:
                return _NONE
        if type(node) is not str:
            return self.leaf_of(node, path)
        leaf = _leaf(node)
        if leaf.unreadable:
            self.unreadable.append(path)
        return leaf

    def leaf_of(self, value: Any, path: str) -> _Leaf:
        if not isinstance(value, str):
            return _NONE
        leaf = _leaf(value)
        if leaf.unreadable:
            self.unreadable.append(path)
        return leaf

    def get(self, key: str) -> Any:
        """The tree's child ``key`` (None when absent), as ``value`` reads it."""
        return self.tree.get(key)

    def value(self, node: Any) -> Any:
        """A node of the tree (a leaf's text, a section) as the tree holds it."""
        return node

    def text(self, path: str) -> str | None:
        return self.read(path).text

    def leaf(self, value: Any, path: str) -> str | None:
        """``value`` (read at ``path``) as text; None for N/A and for unreadable, which is recorded."""
        return self.leaf_of(value, path).text



class _LayoutReader(_Reader):
    """``_Reader`` of the tree a report's layout stands for (``SmiLayoutLog``): ``tree`` is the layout's,
    each leaf an ``int`` (the index of its text in ``texts``); ``plan`` (the layout's, for this GPU)
    remembers where each path leads, as a leaf's index, an attribute's text, or None (absent, or a section)."""

    def __init__(self, tree: Mapping[str, Any], plan: dict[str, Any], texts: Sequence[str]) -> None:
        super().__init__(tree)
        self.plan, self.texts = plan, texts

    def read(self, path: str) -> _Leaf:
        try:
            at = self.plan[path]
        except KeyError:
            at = self.plan[path] = _at(self.tree, path)
        if at is None:
            return _NONE
        leaf = _leaf(self.texts[at] if type(at) is int else at)
        if leaf.unreadable:
            self.unreadable.append(path)
        return leaf

    def leaf_of(self, value: Any, path: str) -> _Leaf:
        return super().leaf_of(self.value(value), path)

    def get(self, key: str) -> Any:
        return self.value(self.tree.get(key))

    def value(self, node: Any) -> Any:
        return self.texts[node] if isinstance(node, int) else node


def _at(tree: Mapping[str, Any], path: str) -> Any:
    """Where ``path`` leads in a layout's tree (``_LayoutReader.plan``): a leaf's index, an attribute's
    text, or None (absent, or a section), as ``_Reader.read`` walks it."""
    node: Any = tree
    for step in _steps(path):
        if not isinstance(node, Mapping):
            return None
        node = node.get(step)
    if isinstance(node, int):
        return int(node)
    return node if isinstance(node, str) else None


def _gpu(index: int, r: _Reader) -> GpuObservation:
    read = r.read
    values = {
        "index": index, "bus_id": r.get("@id") or read("pci/pci_bus_id").text, "name": read("product_name").text,
        "uuid": read("uuid").text, "serial": read("serial").text, "architecture": read("product_architecture").text,
        "vbios": read("vbios_version").text,
        "module_id": _first(read("gpu_module_id").integer, read("platformInfo/module_id").integer),
        "board_part_number": _first(read("board_part_number").text, read("gpu_part_number").text),
        "board_id": read("board_id").text,
        "inforom": _texts(r, "inforom_version"), "platform": _texts(r, "platformInfo"),
        "persistence_mode": read("persistence_mode").text, "mig_current": read("mig_mode/current_mig").text,
        "mig_pending": read("mig_mode/pending_mig").text, "mig_devices": len(r.get("mig_devices") or ()),
        "memory_total_mib": read("fb_memory_usage/total").integer,
        "memory_used_mib": read("fb_memory_usage/used").integer,
        "ecc_current": read("ecc_mode/current_ecc").text, "ecc_pending": read("ecc_mode/pending_ecc").text,
        "ecc_volatile": _ecc(r, "ecc_errors/volatile"), "ecc_aggregate": _ecc(r, "ecc_errors/aggregate"),
        "sram_threshold_exceeded": read("ecc_errors/aggregate/sram_threshold_exceeded").yes,
        "channel_repair_pending": read("ecc_errors/channel_repair_pending").yes,
        "unrepairable_memory": read("ecc_errors/unrepairable_memory").yes,
        "remap": _remap(r),
        "retired_sbe": read("retired_pages/multiple_single_bit_retirement/retired_count").integer,
        "retired_dbe": read("retired_pages/double_bit_retirement/retired_count").integer,
        "retired_pending": _first_bool(read("retired_pages/pending_blacklist").yes,
                                       read("retired_pages/pending_retirement").yes),
        "temp_c": read("temperature/gpu_temp").number,
        "shutdown_c": read("temperature/gpu_temp_max_threshold").number,
        "slowdown_c": read("temperature/gpu_temp_slow_threshold").number,
        "max_operating_c": read("temperature/gpu_temp_max_gpu_threshold").number,
        "tlimit_c": read("temperature/gpu_temp_tlimit").number,
        "shutdown_tlimit_c": read("temperature/gpu_temp_max_tlimit_threshold").number,
        "slowdown_tlimit_c": read("temperature/gpu_temp_slow_tlimit_threshold").number,
        "max_operating_tlimit_c": read("temperature/gpu_temp_max_gpu_tlimit_threshold").number,
        "memory_temp_c": read("temperature/memory_temp").number,
        "memory_max_operating_c": read("temperature/gpu_temp_max_mem_threshold").number,
        "memory_max_operating_tlimit_c": read("temperature/gpu_temp_max_mem_tlimit_threshold").number,
        "power_draw_w": _first(read("gpu_power_readings/power_draw").number,
                               read("gpu_power_readings/instant_power_draw").number,
                               read("gpu_power_readings/average_power_draw").number),
        "power_limit_w": _first(read("gpu_power_readings/current_power_limit").number,
                                read("gpu_power_readings/enforced_power_limit").number,
                                read("gpu_power_readings/power_limit").number),
        "power_default_limit_w": read("gpu_power_readings/default_power_limit").number,
        "power_max_limit_w": read("gpu_power_readings/max_power_limit").number,
        "pcie_gen_current": read("pci/pci_gpu_link_info/pcie_gen/current_link_gen").integer,
        "pcie_gen_max": read("pci/pci_gpu_link_info/pcie_gen/max_link_gen").integer,
        "pcie_width_current": read("pci/pci_gpu_link_info/link_widths/current_link_width").integer,
        "pcie_width_max": read("pci/pci_gpu_link_info/link_widths/max_link_width").integer,
        "pcie_replays": read("pci/replay_counter").integer,
        "clock_events": _clock_events(r),
        "sm_clock_mhz": read("clocks/sm_clock").integer, "sm_clock_max_mhz": read("max_clocks/sm_clock").integer,
        "utilization_pct": read("utilization/gpu_util").integer, "performance_state": read("performance_state").text,
        "fan_speed": read("fan_speed").text, "fabric_state": read("fabric/state").text,
        "fabric_status": read("fabric/status").text,
        "reset_required": read("gpu_reset_status/reset_required").yes,
        "drain_and_reset_recommended": read("gpu_reset_status/drain_and_reset_recommended").yes,
        "recovery_action": read("gpu_recovery_action").text,
    }
    return _gpu_observation(values, r.unreadable)


def _gpu_observation(values: dict[str, Any], unreadable: list[str]) -> GpuObservation:
    """``GpuObservation(**values, unreadable=...)`` (the fields in ``unreadable``, each once) for
    ``values`` naming every other field, without the generated ``__init__``: a frozen dataclass sets
    each of its 65 fields with ``object.__setattr__`` (~14 us a GPU). The instance is the same, its
    attributes in field order as ``__init__`` sets them."""
    if values.keys() != _GPU_VALUES:
        raise TypeError(f"GpuObservation fields: {sorted(values.keys() ^ _GPU_VALUES)}")
    state = _GPU_FIELDS.copy()
    state.update(values)
    if unreadable:
        state["unreadable"] = tuple(dict.fromkeys(unreadable))
    obs = object.__new__(GpuObservation)
    object.__setattr__(obs, "__dict__", state)
    return obs


_GPU_FIELDS = {f.name: () for f in dataclasses.fields(GpuObservation)}  # in order; () is unreadable's default
_GPU_VALUES = frozenset(_GPU_FIELDS) - {"unreadable"}


def _ecc(r: _Reader, base: str) -> EccCounts:
    """Ampere+ ``sram_*``/``dram_*`` counters, else the pre-Ampere ``single_bit``/``double_bit`` ones."""
    read = r.read
    parity = read(f"{base}/sram_uncorrectable_parity").integer
    secded = read(f"{base}/sram_uncorrectable_secded").integer
    sram_unc = read(f"{base}/sram_uncorrectable").integer
    if sram_unc is None and (parity is not None or secded is not None):
        sram_unc = (parity or 0) + (secded or 0)
    counts = EccCounts(read(f"{base}/sram_correctable").integer, sram_unc,
                       read(f"{base}/dram_correctable").integer, read(f"{base}/dram_uncorrectable").integer)
    if any(v is not None for v in counts.__dict__.values()):
        return counts
    on_chip = ("register_file", "l1_cache", "l2_cache", "texture_memory", "texture_shm", "cbu")
    return EccCounts(
        sram_correctable=_sum(read(f"{base}/single_bit/{k}").integer for k in on_chip),
        sram_uncorrectable=_sum(read(f"{base}/double_bit/{k}").integer for k in on_chip),
        dram_correctable=read(f"{base}/single_bit/device_memory").integer,
        dram_uncorrectable=read(f"{base}/double_bit/device_memory").integer)


def _remap(r: _Reader) -> RowRemap | None:
    if not isinstance(r.get("remapped_rows"), Mapping):
        return None  # "N/A": pre-Ampere, or MIG enabled (the driver hides it per GPU instance)
    read, base, hist = r.read, "remapped_rows", "remapped_rows/row_remapper_histogram/row_remapper_histogram"
    return RowRemap(correctable=read(f"{base}/remapped_row_corr").integer,
                    uncorrectable=read(f"{base}/remapped_row_unc").integer,
                    pending=read(f"{base}/remapped_row_pending").yes, failure=read(f"{base}/remapped_row_failure").yes,
                    banks_max=read(f"{hist}_max").integer, banks_high=read(f"{hist}_high").integer,
                    banks_partial=read(f"{hist}_partial").integer, banks_low=read(f"{hist}_low").integer,
                    banks_none=read(f"{hist}_none").integer)


def _clock_events(r: _Reader) -> tuple[str, ...]:
    reasons = r.get("clocks_event_reasons")
    if not isinstance(reasons, Mapping):
        return ()
    return tuple(k for k, v in zip(reasons, map(r.value, reasons.values()), strict=True)
                 if isinstance(v, str) and v.strip().lower() == "active")


def _sum(values: Any) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _texts(r: _Reader, section: str) -> dict[str, str]:
    """A flat section (``inforom_version``, ``platformInfo``) as {leaf: text}, N/A leaves dropped."""
    leaves = r.get(section)
    if not isinstance(leaves, Mapping):
        return {}
    return {k: v for k, v in ((k, r.leaf(leaf, f"{section}/{k}") if "/" not in k else r.text(f"{section}/{k}"))
                              for k, leaf in leaves.items()) if v}


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def _first_bool(*values: bool | None) -> bool | None:
    return True if True in values else _first(*values)
