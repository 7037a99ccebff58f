"""Pure parsers for memory (EDAC) and PCIe (AER) error reports in the forms nodes and people publish.

    parse_edac_sysfs("/sys/devices/system/edac/mc/mc0/ce_count:3\\n...")  -> {"mc0": EdacCounts(ce=3, ue=0)}
    parse_ras_mc_ctl_error_count("Label  CE  UE\\nmc#0csrow#3channel#0  0  0")
    parse_aer_sysfs("/sys/bus/pci/devices/0000:17:00.0/aer_dev_correctable:BadTLP 3\\n...")
    parse_aer_kernel_log("... pcieport 0000:00:03.1: PCIe Bus Error: severity=Correctable, type=...")
    parse_edac_kernel_log("... EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#2_DIMM#0 (...)")
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from healthcheck.core.spec import ParseError
from healthcheck.probes.parse_memo import shared_parser


@dataclass(frozen=True)
class EdacCounts:
    ce: int = 0   # corrected
    ue: int = 0   # uncorrected


@dataclass(frozen=True)
class AerCounts:
    correctable: int = 0
    fatal: int = 0
    nonfatal: int = 0
    detail: Mapping[str, int] = field(default_factory=dict)  # non-zero per-type counters, e.g. {"BadTLP": 3}


@dataclass(frozen=True)
class AerEvent:
    device: str        # BDF of the reporting port, e.g. 0000:00:03.1
    severity: str      # Corrected, Correctable, Uncorrected (Non-Fatal), Uncorrected (Fatal)
    layer: str         # Physical Layer, Data Link Layer, Transaction Layer
    errors: tuple[str, ...] = ()  # bit names from the "[ n] Name" lines: Timeout, BadTLP, Receiver Error


@dataclass(frozen=True)
class EdacEvent:
    controller: str    # mc0
    kind: str          # CE or UE
    count: int
    location: str      # CPU_SrcID#0_Ha#0_Chan#2_DIMM#0
    message: str


_EDAC_PATH = re.compile(r"/edac/mc/(?P<mc>mc\d+)(?P<sub>/[^:\s]*)?/(?P<what>ce|ue)_count$")


def parse_edac_sysfs(text: str) -> dict[str, EdacCounts]:
    """EDAC counters from sysfs, either ``path:value`` lines (``grep -H``) or a path line followed by a value
    line (corpus ``misc/edac-sysfs-ce-ue-count-listing-all-zero``). Controller-level counts win; when only
    csrow-level files are listed they are summed. Non-numeric values raise ParseError."""
    totals: dict[str, dict[str, int]] = {}
    subs: dict[str, dict[str, int]] = {}
    pending = None
    for line in (ln.strip() for ln in text.splitlines()):
        if not line or line.startswith("#"):
            continue
        path, value = (line.rsplit(":", 1) if ":" in line else (line, None))
        if value is None and pending is None and _EDAC_PATH.search(path):
            pending = path
            continue
        if value is None and pending is not None:
            path, value, pending = pending, line, None
        m = _EDAC_PATH.search(path)
        if m is None:
            raise ParseError("EDAC line is not a .../mcN/{ce,ue}_count path", line)
        if not value.strip().isdecimal():
            raise ParseError(f"EDAC counter {path} is not a number", line)
        bucket = subs if m["sub"] else totals
        bucket.setdefault(m["mc"], {}).setdefault(m["what"], 0)
        bucket[m["mc"]][m["what"]] += int(value)
    controllers = sorted(set(totals) | set(subs), key=lambda mc: int(mc[2:]))
    return {mc: EdacCounts(**(totals.get(mc) or subs.get(mc) or {})) for mc in controllers}


def parse_ras_mc_ctl_error_count(text: str) -> dict[str, EdacCounts]:
    """``ras-mc-ctl --error-count`` (rasdaemon): a ``Label CE UE`` header, then one row per DIMM label."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines or lines[0].split()[:3] != ["Label", "CE", "UE"]:
        raise ParseError("ras-mc-ctl --error-count output has no 'Label CE UE' header", text[:200])
    out = {}
    for line in lines[1:]:
        fields = line.split()
        if len(fields) < 3 or not (fields[-1].isdecimal() and fields[-2].isdecimal()):
            raise ParseError("ras-mc-ctl row is not '<label> <CE> <UE>'", line)
        out[" ".join(fields[:-2])] = EdacCounts(ce=int(fields[-2]), ue=int(fields[-1]))
    return out


_AER_LINE = re.compile(r"/(?P<bdf>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])/"
                       r"(?P<file>aer_dev_correctable|aer_dev_fatal|aer_dev_nonfatal|aer/err_cor|aer/err_fatal|"
                       r"aer/err_nonfatal):(?P<name>\S+) (?P<count>\d+)\s*$")
_AER_KIND = {"aer_dev_correctable": "correctable", "aer/err_cor": "correctable", "aer_dev_fatal": "fatal",
             "aer/err_fatal": "fatal", "aer_dev_nonfatal": "nonfatal", "aer/err_nonfatal": "nonfatal"}


@shared_parser  # the ras and rates probes both read pcie-aer: one parse per host
def parse_aer_sysfs(text: str) -> Mapping[str, AerCounts]:
    """``grep -H`` of the kernel's AER statistics files (Documentation/ABI/testing/sysfs-bus-pci-devices-
    aer_stats): ``<ErrName> <count>`` lines whose ``TOTAL_ERR_*`` line is the file's total. Lines that do
    not match (comments, unreadable files) are ignored. Read-only mappings (the parse is shared)."""
    totals: dict[str, dict[str, int]] = {}
    detail: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        m = _AER_LINE.search(line)
        if m is None:
            continue
        bdf, kind, count = m["bdf"].lower(), _AER_KIND[m["file"]], int(m["count"])
        if m["name"].startswith("TOTAL_ERR_"):
            totals.setdefault(bdf, {})[kind] = count
        elif count:
            detail.setdefault(bdf, {})[m["name"]] = count
    return MappingProxyType({bdf: AerCounts(**totals.get(bdf, {}), detail=MappingProxyType(detail.get(bdf, {})))
                             for bdf in sorted(set(totals) | set(detail))})


_AER_EVENT = re.compile(r"(?P<bdf>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]): (?:AER: )?PCIe Bus Error: "
                        r"severity=(?P<severity>[^,]+), type=(?P<layer>[^,]+)")
_AER_BIT = re.compile(r"(?P<bdf>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]):\s+\[\s*\d+\] "
                      r"(?P<name>\S.*?)\s*$")


def parse_aer_kernel_log(text: str) -> tuple[AerEvent, ...]:
    """AER reports in a kernel log (dmesg, syslog or journal prefix; old ``id=00e8(Receiver ID)`` and new
    ``AER:``-prefixed forms): one event per ``PCIe Bus Error`` line, with the ``[ n] Name`` bit lines
    that follow it."""
    events: list[dict] = []
    for line in text.splitlines():
        if m := _AER_EVENT.search(line):
            events.append({"device": m["bdf"], "severity": m["severity"].strip(), "layer": m["layer"].strip(),
                           "errors": []})
        elif (m := _AER_BIT.search(line)) and events and events[-1]["device"] == m["bdf"]:
            events[-1]["errors"].append(m["name"])
    return tuple(AerEvent(device=e["device"], severity=e["severity"], layer=e["layer"],
                          errors=tuple(e["errors"])) for e in events)


_EDAC_EVENT = re.compile(r"EDAC (?P<mc>MC\d+): (?P<count>\d+) (?P<kind>CE|UE) (?P<what>.*?) on "
                         r"(?P<loc>\S+)(?: \((?P<detail>.*)\))?\s*$")


def parse_edac_kernel_log(text: str) -> tuple[EdacEvent, ...]:
    """``EDAC MCn: N CE|UE <what> on <location> (...)`` kernel-log lines (sb_edac/skx_edac/ghes format)."""
    return tuple(EdacEvent(controller=m["mc"].lower(), kind=m["kind"], count=int(m["count"]),
                           location=m["loc"], message=m["what"])
                 for m in map(_EDAC_EVENT.search, text.splitlines()) if m)
