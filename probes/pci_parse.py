"""Pure parsers for what sits on the PCI bus: NVIDIA GPUs and Mellanox/NVIDIA HCAs, and their RDMA devices.

    parse_pci_sysfs("/sys/bus/pci/devices/0000:18:00.0/vendor:0x10de\\n...\\n# pci-sysfs end\\n")
    parse_lspci("0000:18:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)")

``pci-sysfs`` is one ``path:value`` line per sysfs attribute (the ``grep -H`` layout of the kernel's
``/sys/bus/pci/devices/<address>/{vendor,device,class}`` files, Documentation/ABI/testing/sysfs-bus-pci:
``0x10de``, ``0x2330``, ``0x030200``), for PCI functions of vendor 0x10de or 0x15b3 only, plus
``<dev>/driver:<name>`` (the basename of the ``driver`` symlink, absent when no driver is bound),
``<dev>/physfn:<pf>`` for an SR-IOV virtual function, and ``/sys/class/infiniband/<rdma>/device:<address>``
(the PCI function behind each RDMA device). A closing ``# pci-sysfs end`` line proves completeness.

``lspci`` is accepted from capture bundles: ``lspci -D -nn -d 10de:`` (class and ids in brackets) or plain
``lspci`` lines (class and vendor by name; then no driver and no RDMA mapping are known).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from healthcheck.core.spec import ParseError

NVIDIA, MELLANOX = "10de", "15b3"
GPU_CLASSES = ("0300", "0302")          # VGA compatible controller, 3D controller (PCI code and ID assignment spec)
HCA_CLASSES = ("0207", "0200")          # InfiniBand controller, Ethernet controller
END_MARKER = "# pci-sysfs end"
_SYSFS = re.compile(r"^/sys/bus/pci/devices/(?P<addr>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])/"
                    r"(?P<attr>vendor|device|class|driver|physfn):(?P<value>.*)$")
_RDMA = re.compile(r"^/sys/class/infiniband/(?P<dev>[^/:]+)/device:(?P<addr>\S+)$")
_LSPCI = re.compile(r"^(?P<addr>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+"
                    r"(?P<cname>[^:\[]+?)(?:\s+\[(?P<class>[0-9a-fA-F]{4})\])?:\s+(?P<desc>.*?)"
                    r"(?:\s+\[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\])?(?:\s+\(rev [0-9a-fA-F]+\))?$")
_CLASS_NAMES = {"vga compatible controller": "0300", "3d controller": "0302", "infiniband controller": "0207",
                "ethernet controller": "0200", "bridge": "0680", "pci bridge": "0604"}
_VENDOR_NAMES = (("nvidia corporation", NVIDIA), ("mellanox technologies", MELLANOX))


@dataclass(frozen=True)
class PciFunction:
    """One PCI function. ``address`` is ``dddd:bb:dd.f`` lowercase; ids and class are 4 hex digits."""

    address: str
    vendor: str
    device: str | None = None
    class_code: str | None = None      # base class + subclass, e.g. "0302"
    driver: str | None = None          # bound kernel driver; None: none bound (or unknown for lspci)
    virtual: bool = False              # an SR-IOV virtual function
    description: str | None = None     # lspci's text, when that was the source

    @property
    def ids(self) -> str:
        return f"{self.vendor}:{self.device}" if self.device else self.vendor

    @property
    def is_gpu(self) -> bool:
        return self.vendor == NVIDIA and self.class_code in GPU_CLASSES and not self.virtual

    @property
    def is_hca(self) -> bool:
        return self.vendor == MELLANOX and self.class_code in HCA_CLASSES and not self.virtual


@dataclass(frozen=True)
class PciInventory:
    """The NVIDIA/Mellanox functions on the bus and, when known, the RDMA device of each address."""

    functions: tuple[PciFunction, ...]
    rdma_devices: Mapping[str, str] = field(default_factory=dict)   # mlx5_0 -> 0000:1a:00.0
    drivers_known: bool = True         # False for lspci: binding and RDMA devices were not collected
    source: str = "pci-sysfs"

    @property
    def gpus(self) -> tuple[PciFunction, ...]:
        return tuple(f for f in self.functions if f.is_gpu)

    @property
    def hcas(self) -> tuple[PciFunction, ...]:
        return tuple(f for f in self.functions if f.is_hca)


def pci_address(text: str) -> str:
    """``00000000:CB:00.0`` / ``cb:00.0`` / ``0000:cb:00.0`` -> ``0000:cb:00.0``."""
    text = text.strip().lower()
    parts = text.split(":")
    if len(parts) == 2:
        return f"0000:{text}"
    return f"{parts[0][-4:].zfill(4)}:{':'.join(parts[1:])}"


def _hex4(value: str, digits: int = 4) -> str:
    return value.strip().lower().removeprefix("0x").zfill(digits)[:digits]


def parse_pci_sysfs(text: str) -> PciInventory:
    """The ``pci-sysfs`` command's output; raises ``ParseError`` when the end marker is missing."""
    attrs: dict[str, dict[str, str]] = {}
    rdma: dict[str, str] = {}
    complete = False
    for raw in text.splitlines():
        line = raw.strip()
        if line == END_MARKER:
            complete = True
        elif m := _SYSFS.match(line):
            attrs.setdefault(pci_address(m["addr"]), {})[m["attr"]] = m["value"].strip()
        elif m := _RDMA.match(line):
            rdma[m["dev"]] = pci_address(m["addr"])
    if not complete:
        raise ParseError(f"pci-sysfs output has no '{END_MARKER}' line (truncated or not ours)", text)
    functions = []
    for address in sorted(attrs):
        a = attrs[address]
        if "vendor" not in a:
            continue
        functions.append(PciFunction(
            address=address, vendor=_hex4(a["vendor"]), device=_hex4(a["device"]) if "device" in a else None,
            class_code=_hex4(a["class"], 6)[:4] if "class" in a else None, driver=a.get("driver") or None,
            virtual="physfn" in a))
    return PciInventory(functions=tuple(functions), rdma_devices=rdma, source="pci-sysfs")


def parse_lspci(text: str) -> PciInventory:
    """``lspci`` text (``-D``/``-nn`` optional); only NVIDIA and Mellanox functions are kept."""
    functions = []
    matched = 0
    for raw in text.splitlines():
        m = _LSPCI.match(raw.strip())
        if not m:
            continue
        matched += 1
        desc = m["desc"].strip()
        vendor = (m["vendor"] or next((v for name, v in _VENDOR_NAMES if desc.lower().startswith(name)), "")).lower()
        if vendor not in (NVIDIA, MELLANOX):
            continue
        cls = (m["class"] or _CLASS_NAMES.get(m["cname"].strip().lower(), "")).lower() or None
        functions.append(PciFunction(address=pci_address(m["addr"]), vendor=vendor,
                                     device=(m["device"] or "").lower() or None, class_code=cls,
                                     virtual="virtual function" in desc.lower(), description=desc))
    if not matched and text.strip():
        raise ParseError("no lspci device lines", text)
    return PciInventory(functions=tuple(functions), drivers_known=False, source="lspci")
