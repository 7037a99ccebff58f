"""Typed GPU observations, built from a normalized nvidia-smi tree (or by the NVML collector).

    obs = observations_from_log(parse_nvidia_smi_xml(text), source="nvidia-smi-q-x")
    obs.gpus[3].pcie_width_current          # 8
    obs.gpus[3].remap.pending               # True

Units are converted here, once: "81920 MiB" -> 81920 (``_mib``), "67.03 W" -> 67.03 (``_w``),
"-8 C" -> -8 (``_c``), "16x" -> 16. "N/A", "[N/A]", "Not Supported" become None. A value of
"Unknown Error" (the driver asked the GPU and failed) also becomes None, and the field's name is
listed in ``unreadable`` so the evaluator can say so instead of treating it as absent.
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

    def number(self, path: str) -> float | None:
        return self.read(path).number

    def int(self, path: str) -> int | None:
        return self.read(path).integer

    def yes(self, path: str) -> bool | None:
        return self.read(path).yes


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
    link = "pci/pci_gpu_link_info"
    power = "gpu_power_readings"
    obs = GpuObservation(
        index=index, bus_id=r.get("@id") or r.text("pci/pci_bus_id"), name=r.text("product_name"),
        uuid=r.text("uuid"), serial=r.text("serial"), architecture=r.text("product_architecture"),
        vbios=r.text("vbios_version"), module_id=_first(r.int("gpu_module_id"), r.int("platformInfo/module_id")),
        board_part_number=_first(r.text("board_part_number"), r.text("gpu_part_number")), board_id=r.text("board_id"),
        inforom=_texts(r, "inforom_version"), platform=_texts(r, "platformInfo"),
        persistence_mode=r.text("persistence_mode"), mig_current=r.text("mig_mode/current_mig"),
        mig_pending=r.text("mig_mode/pending_mig"), mig_devices=len(r.get("mig_devices") or ()),
        memory_total_mib=r.int("fb_memory_usage/total"), memory_used_mib=r.int("fb_memory_usage/used"),
        ecc_current=r.text("ecc_mode/current_ecc"), ecc_pending=r.text("ecc_mode/pending_ecc"),
        ecc_volatile=_ecc(r, "ecc_errors/volatile"), ecc_aggregate=_ecc(r, "ecc_errors/aggregate"),
        sram_threshold_exceeded=r.yes("ecc_errors/aggregate/sram_threshold_exceeded"),
        channel_repair_pending=r.yes("ecc_errors/channel_repair_pending"),
        unrepairable_memory=r.yes("ecc_errors/unrepairable_memory"),
        remap=_remap(r),
        retired_sbe=r.int("retired_pages/multiple_single_bit_retirement/retired_count"),
        retired_dbe=r.int("retired_pages/double_bit_retirement/retired_count"),
        retired_pending=_first_bool(r.yes("retired_pages/pending_blacklist"),
                                    r.yes("retired_pages/pending_retirement")),
        temp_c=r.number("temperature/gpu_temp"),
        shutdown_c=r.number("temperature/gpu_temp_max_threshold"),
        slowdown_c=r.number("temperature/gpu_temp_slow_threshold"),
        max_operating_c=r.number("temperature/gpu_temp_max_gpu_threshold"),
        tlimit_c=r.number("temperature/gpu_temp_tlimit"),
        shutdown_tlimit_c=r.number("temperature/gpu_temp_max_tlimit_threshold"),
        slowdown_tlimit_c=r.number("temperature/gpu_temp_slow_tlimit_threshold"),
        max_operating_tlimit_c=r.number("temperature/gpu_temp_max_gpu_tlimit_threshold"),
        memory_temp_c=r.number("temperature/memory_temp"),
        memory_max_operating_c=r.number("temperature/gpu_temp_max_mem_threshold"),
        memory_max_operating_tlimit_c=r.number("temperature/gpu_temp_max_mem_tlimit_threshold"),
        power_draw_w=_first(r.number(f"{power}/power_draw"), r.number(f"{power}/instant_power_draw"),
                            r.number(f"{power}/average_power_draw")),
        power_limit_w=_first(r.number(f"{power}/current_power_limit"),
                             r.number(f"{power}/enforced_power_limit"), r.number(f"{power}/power_limit")),
        power_default_limit_w=r.number(f"{power}/default_power_limit"),
        power_max_limit_w=r.number(f"{power}/max_power_limit"),
        pcie_gen_current=r.int(f"{link}/pcie_gen/current_link_gen"),
        pcie_gen_max=r.int(f"{link}/pcie_gen/max_link_gen"),
        pcie_width_current=r.int(f"{link}/link_widths/current_link_width"),
        pcie_width_max=r.int(f"{link}/link_widths/max_link_width"),
        pcie_replays=r.int("pci/replay_counter"),
        clock_events=_clock_events(r),
        sm_clock_mhz=r.int("clocks/sm_clock"), sm_clock_max_mhz=r.int("max_clocks/sm_clock"),
        utilization_pct=r.int("utilization/gpu_util"), performance_state=r.text("performance_state"),
        fan_speed=r.text("fan_speed"), fabric_state=r.text("fabric/state"),
        fabric_status=r.text("fabric/status"),
        reset_required=r.yes("gpu_reset_status/reset_required"),
        drain_and_reset_recommended=r.yes("gpu_reset_status/drain_and_reset_recommended"),
        recovery_action=r.text("gpu_recovery_action"),
    )
    return _with_unreadable(obs, r.unreadable)


def _with_unreadable(obs: GpuObservation, fields: list[str]) -> GpuObservation:
    if not fields:
        return obs
    return dataclasses.replace(obs, unreadable=tuple(dict.fromkeys(fields)))


def _ecc(r: _Reader, base: str) -> EccCounts:
    """Ampere+ ``sram_*``/``dram_*`` counters, else the pre-Ampere ``single_bit``/``double_bit`` ones."""
    parity, secded = r.int(f"{base}/sram_uncorrectable_parity"), r.int(f"{base}/sram_uncorrectable_secded")
    sram_unc = r.int(f"{base}/sram_uncorrectable")
    if sram_unc is None and (parity is not None or secded is not None):
        sram_unc = (parity or 0) + (secded or 0)
    counts = EccCounts(r.int(f"{base}/sram_correctable"), sram_unc,
                       r.int(f"{base}/dram_correctable"), r.int(f"{base}/dram_uncorrectable"))
    if any(v is not None for v in counts.__dict__.values()):
        return counts
    on_chip = ("register_file", "l1_cache", "l2_cache", "texture_memory", "texture_shm", "cbu")
    return EccCounts(
        sram_correctable=_sum(r.int(f"{base}/single_bit/{k}") for k in on_chip),
        sram_uncorrectable=_sum(r.int(f"{base}/double_bit/{k}") for k in on_chip),
        dram_correctable=r.int(f"{base}/single_bit/device_memory"),
        dram_uncorrectable=r.int(f"{base}/double_bit/device_memory"))


def _remap(r: _Reader) -> RowRemap | None:
    if not isinstance(r.get("remapped_rows"), Mapping):
        return None  # "N/A": pre-Ampere, or MIG enabled (the driver hides it per GPU instance)
    base, hist = "remapped_rows", "remapped_rows/row_remapper_histogram/row_remapper_histogram"
    return RowRemap(correctable=r.int(f"{base}/remapped_row_corr"), uncorrectable=r.int(f"{base}/remapped_row_unc"),
                    pending=r.yes(f"{base}/remapped_row_pending"), failure=r.yes(f"{base}/remapped_row_failure"),
                    banks_max=r.int(f"{hist}_max"), banks_high=r.int(f"{hist}_high"),
                    banks_partial=r.int(f"{hist}_partial"), banks_low=r.int(f"{hist}_low"),
                    banks_none=r.int(f"{hist}_none"))


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
