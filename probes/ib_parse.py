"""Pure parsers for InfiniBand/RoCE state: sysfs "path:value" dumps, ``ibstat``, GPUDirect modules.

    parse_ib_sysfs("/sys/class/infiniband/mlx5_0/ports/1/rate:400 Gb/sec (4X NDR)\\n# ib-sysfs end\\n")
    parse_ibstat("CA 'mlx5_0'\\n\\tCA type: MT4129\\n\\tPort 1:\\n\\t\\tState: Active\\n...")
    parse_peermem_module("nvidia_peermem\\n# peermem end\\n", ("nvidia_peermem", "nv_peer_mem"))
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from healthcheck.core.spec import ParseError
from healthcheck.probes.fec_parse import EthFec, LinkPhy
from healthcheck.probes.kernel_log import KernelLog
from healthcheck.probes.parse_memo import memoized, shared_parser

# Width in bits of the IBA PortCounters error counters that sysfs exposes (IBA spec vol. 1,
# PortCounters attribute): they saturate at 2**bits - 1, so growth cannot be seen past that.
COUNTER_BITS = {
    "symbol_error": 16, "link_error_recovery": 8, "link_downed": 8, "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16, "port_rcv_switch_relay_errors": 16, "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8, "port_rcv_constraint_errors": 8, "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4, "VL15_dropped": 16,
}
_STATE_WORDS = {"active": "ACTIVE", "down": "DOWN", "initializing": "INIT", "init": "INIT",
                "armed": "ARMED", "active_defer": "ACTIVE_DEFER"}
_SYSFS_ROOT = "/sys/class/infiniband/"
_SYSFS_MARK = "class/infiniband/"   # any path prefix (a chroot, a copied tree) before it
MAX_PORT_DIGITS = 9
MAX_COUNTER_DIGITS = 20             # a 64-bit counter
_RATE = re.compile(r"^(?P<gbps>\d+(?:\.\d+)?) Gb/sec(?: \((?P<width>\d+X)(?: (?P<speed>[A-Za-z0-9]+))?\))?")


@dataclass(frozen=True)
class IbPort:
    device: str
    port: int
    state: str | None = None          # ACTIVE, DOWN, INIT, ARMED
    phys_state: str | None = None     # LinkUp, Disabled, Polling, ...
    rate_gbps: float | None = None
    width: str | None = None          # 4X, 2X, 1X
    speed: str | None = None          # NDR, HDR, EDR, ...
    rate_text: str | None = None      # as the tool printed it, e.g. "400 Gb/sec (4X NDR)"
    link_layer: str | None = None     # InfiniBand or Ethernet
    counters: Mapping[str, int] = field(default_factory=dict)
    hw_counters: Mapping[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.device}/{self.port}"


@dataclass(frozen=True)
class IbDevice:
    name: str
    hca_type: str | None = None
    fw_ver: str | None = None
    board_id: str | None = None
    ports: tuple[IbPort, ...] = ()
    netdevs: tuple[tuple[str, int], ...] = ()  # (netdev, port number) from sysfs device/net/<netdev>/dev_port


@dataclass(frozen=True)
class IbstatPanic:
    message: str
    device: str | None = None


@dataclass(frozen=True)
class IbstatReport:
    devices: tuple[IbDevice, ...]
    panic: IbstatPanic | None = None


@dataclass(frozen=True)
class IbObservation:
    devices: tuple[IbDevice, ...]
    source: str                                  # command id the devices came from
    devices_collected: bool = True                  # False: neither ib-sysfs nor ibstat is in the outputs
    ibstat_error: IbstatPanic | None = None
    peermem_modules: tuple[str, ...] | None = None  # None: not collected or truncated
    peermem_collected: bool = False
    link_log: KernelLog | None = None               # link-down lines of the kernel log; None: not collected
    roce: Mapping[str, Mapping[str, str]] | None = None  # "mlx5_0 ens1f0np0" -> RoCE config fields (roce_config)
    roce_error: str | None = None                   # why roce-config could not be read
    phy: tuple[LinkPhy, ...] | None = None          # mlxlink reports per device (fec_parse); None: no mlxlink
    phy_collected: bool = False                     # the mlxlink command ran and was read (False: older bundles)
    eth_fec: tuple[EthFec, ...] | None = None       # ethtool --show-fec per RoCE netdev; None: no ethtool
    eth_fec_collected: bool = False                 # the ethtool-fec command ran and was read
    phy_error: str | None = None                    # why the mlxlink/ethtool-fec output could not be read


def _state(text: str) -> str:
    """``4: ACTIVE`` (sysfs) or ``Active`` (ibstat) -> ``ACTIVE``."""
    word = text.split(":", 1)[-1].strip()
    return _STATE_WORDS.get(word.lower(), word.upper())


def _phys_state(text: str) -> str:
    """``5: LinkUp`` (sysfs) or ``LinkUp`` (ibstat) -> ``LinkUp``."""
    return text.split(":", 1)[-1].strip()


def parse_rate(text: str) -> tuple[float | None, str | None, str | None]:
    """sysfs ``rate``: ``400 Gb/sec (4X NDR)`` -> (400.0, "4X", "NDR"); old kernels: ``10 Gb/sec (4X)``."""
    m = _RATE.match(text.strip())
    if not m:
        return None, None, None
    return float(m["gbps"]), m["width"], m["speed"]


@shared_parser  # the infiniband, rates, versions and assets probes all read ib-sysfs: one parse per host
def parse_ib_sysfs(text: str) -> tuple[IbDevice, ...]:
    """``grep -H`` lines of /sys/class/infiniband files (any path prefix), in the layout of the corpus file
    ``ib/sysfs-class-infiniband-h100-cx7-ndr-counters``. The command prints a closing ``# ib-sysfs end``
    line (or ``# ib-sysfs: no ... devices``); output without either is truncated and raises ParseError.
    Non-numeric counter values (a driver printing ``N/A``) are dropped. Counters are read-only mappings
    (the parse is shared by every reader).
    """
    if "# ib-sysfs: no " in text:
        return ()
    if "# ib-sysfs end" not in text:
        raise ParseError("ib-sysfs output is truncated (no closing '# ib-sysfs end' line)", text[-200:])
    devices: dict[str, dict[str, str]] = {}
    ports: dict[tuple[str, int], dict[str, str]] = {}
    last_key, last = None, {}
    for line in text.splitlines():
        fields = None
        if line.startswith(_SYSFS_ROOT):  # the command's own lines: split with str methods
            path, colon, value = line.partition(":")
            fields = _path_fields(path) if colon else None
        elif not line.strip() or line.startswith("#"):
            continue
        if fields is None:  # any other form: a prefix, then class/infiniband/<dev>/[ports/<n>/]<attr>:<value>
            split = _sysfs_line(line)
            if split is None:
                raise ParseError("ib-sysfs line is not '<sysfs path>:<value>'", line)
            fields, value = split
        dev, port, attr = fields
        if dev not in devices:
            devices[dev] = {}
        if port is None:
            devices[dev][attr] = value.strip()
        else:
            key = (dev, port)
            if key != last_key:  # a port's files come one after another: look its dict up once
                last_key, last = key, ports.get(key)
                if last is None:
                    last = ports[key] = {}
            last[attr] = value.strip()
    by_device: dict[str, list[IbPort]] = {}
    for dev, port in sorted(ports):
        by_device.setdefault(dev, []).append(_sysfs_port(dev, port, ports[(dev, port)]))
    return tuple(IbDevice(name=dev, hca_type=attrs.get("hca_type"), fw_ver=attrs.get("fw_ver"),
                          board_id=attrs.get("board_id"), ports=tuple(by_device.get(dev, ())),
                          netdevs=_netdevs(attrs))
                 for dev, attrs in sorted(devices.items(), key=lambda kv: _natural(kv[0])))


def _netdevs(attrs: Mapping[str, str]) -> tuple[tuple[str, int], ...]:
    """``device/net/ibp26s0/dev_port: 0`` -> (("ibp26s0", 1),): the netdev of each port (dev_port counts from 0)."""
    out = []
    for key, value in attrs.items():
        parts = key.split("/")
        if len(parts) == 4 and parts[:2] == ["device", "net"] and parts[3] == "dev_port" and value.isdecimal() \
                and len(value) <= MAX_PORT_DIGITS:
            out.append((parts[2], int(value) + 1))
    return tuple(sorted(out))


@memoized(maxsize=4096, typed=False)  # every node of a fleet has the same sysfs paths
def _path_fields(path: str) -> tuple[str, int | None, str] | None:
    """``/sys/class/infiniband/mlx5_0/ports/1/rate`` (a line's text before its first ':') -> ("mlx5_0", 1,
    "rate"), or None where ``_sysfs_line`` must decide."""
    return _tail_fields(path[len(_SYSFS_ROOT):])


def _tail_fields(tail: str) -> tuple[str, int | None, str] | None:
    """``<dev>/[ports/<n>/]<attr>`` -> (dev, port, attr), or None when it is not one. A port number is at
    most ``MAX_PORT_DIGITS`` decimal digits (a longer run is no port: ParseError)."""
    dev, slash, rest = tail.partition("/")
    if not dev or not slash or not rest:
        return None
    if rest.startswith("ports/"):
        number, slash, attr = rest[6:].partition("/")
        if slash and attr and number.isdecimal():  # any Unicode decimal digit, as the pattern's \d
            if len(number) > MAX_PORT_DIGITS:
                raise ParseError(f"ib-sysfs port number of {len(number)} digits", tail[:200])
            return dev, int(number), attr
    return dev, None, rest


def _sysfs_line(line: str) -> tuple[tuple[str, int | None, str], str] | None:
    """A ``<prefix>class/infiniband/<dev>/[ports/<n>/]<attr>:<value>`` line with any prefix free of
    whitespace -> ((dev, port, attr), value), or None. Each occurrence of the marker is tried once, from
    the left, with str methods only: linear in the line (a regex with a lazy prefix was quadratic)."""
    blank = next((i for i, c in enumerate(line) if c.isspace()), len(line))
    start = 0
    while 0 <= (at := line.find(_SYSFS_MARK, start)) < blank:
        path, colon, value = line[at + len(_SYSFS_MARK):].partition(":")
        fields = _tail_fields(path) if colon else None
        if fields is not None:
            return fields, value
        if not colon:
            return None  # no ':' after this marker: none after a later one either
        start = at + 1
    return None


def _sysfs_port(dev: str, port: int, attrs: Mapping[str, str]) -> IbPort:
    rate = attrs.get("rate")
    gbps, width, speed = parse_rate(rate) if rate else (None, None, None)
    counters, hw_counters = {}, {}
    for key, value in attrs.items():
        if key.startswith(("counters/", "hw_counters/")) and value.isdecimal():
            if len(value) > MAX_COUNTER_DIGITS:
                raise ParseError(f"{dev}/{port} {key} has {len(value)} digits: not a 64-bit counter", value[:60])
            (counters if key.startswith("counters/") else hw_counters)[key.partition("/")[2]] = int(value)
    return IbPort(device=dev, port=port,
                  state=_state(attrs["state"]) if "state" in attrs else None,
                  phys_state=_phys_state(attrs["phys_state"]) if "phys_state" in attrs else None,
                  rate_gbps=gbps, width=width, speed=speed, rate_text=rate,
                  link_layer=attrs.get("link_layer"),
                  counters=MappingProxyType(counters), hw_counters=MappingProxyType(hw_counters))


def _natural(name: str) -> tuple[str, int]:
    """``mlx5_10`` -> ("mlx5_", 10): device names sort by their trailing number (at most 18 digits)."""
    cut = len(name)
    while cut and name[cut - 1].isdecimal():
        cut -= 1
    digits = name[cut:]
    return (name[:cut], int(digits)) if digits and len(digits) <= 18 else (name, -1)


_CA = re.compile(r"^CA '(?P<name>[^']+)'\s*$")
_PORT = re.compile(r"^\s+Port (?P<port>\d{1,9}):\s*$")
_KV = re.compile(r"^\s+(?P<key>[A-Za-z][A-Za-z ]*?):(?P<value>.*)$")   # value stripped in code: linear
_PANIC = re.compile(r"^ibpanic: (?P<msg>.*)$")
_PANIC_DEV = re.compile(r"IB device '(?P<dev>[^']+)'")


def parse_ibstat(text: str) -> IbstatReport:
    """``ibstat`` (infiniband-diags, any version; tab or space indentation; ``ibstat -s`` without port
    blocks). An ``ibpanic: ...`` line (ibstat exits 255, corpus ``ibstat-a100-azure-ibpanic-exit255``) is
    returned as ``panic`` next to the devices printed before it. No ``CA '...'`` line in non-empty output
    raises ParseError.
    """
    cas: list[dict] = []
    panic = None
    port: dict | None = None
    for line in text.splitlines():
        if m := _PANIC.match(line):
            message = m["msg"].rstrip()
            dev = _PANIC_DEV.search(message)
            panic = IbstatPanic(message=message, device=dev["dev"] if dev else None)
        elif m := _CA.match(line):
            cas.append({"name": m["name"], "attrs": {}, "ports": []})
            port = None
        elif (m := _PORT.match(line)) and cas:
            port = {"port": int(m["port"])}
            cas[-1]["ports"].append(port)
        elif (m := _KV.match(line)) and cas:
            (port if port is not None else cas[-1]["attrs"])[m["key"]] = m["value"].strip()
    if not cas and panic is None and text.strip():
        raise ParseError("ibstat output has no \"CA '<name>'\" line", text)
    devices = tuple(IbDevice(name=ca["name"], hca_type=ca["attrs"].get("CA type"),
                             fw_ver=ca["attrs"].get("Firmware version"),
                             ports=tuple(_ibstat_port(ca["name"], p) for p in ca["ports"]))
                    for ca in sorted(cas, key=lambda ca: _natural(ca["name"])))
    return IbstatReport(devices=devices, panic=panic)


def _ibstat_port(dev: str, attrs: Mapping) -> IbPort:
    rate = attrs.get("Rate")
    return IbPort(device=dev, port=attrs["port"],
                  state=_state(attrs["State"]) if "State" in attrs else None,
                  phys_state=_phys_state(attrs["Physical state"]) if "Physical state" in attrs else None,
                  rate_gbps=float(rate) if rate and re.fullmatch(r"\d+(\.\d+)?", rate) else None,
                  rate_text=f"{rate} Gb/sec" if rate else None, link_layer=attrs.get("Link layer"))


def parse_peermem_module(text: str, known: tuple[str, ...]) -> tuple[str, ...] | None:
    """Our ``peermem-module`` output: the names of ``known`` modules found in /sys/module (a loaded or
    built-in module has a directory there), then ``# peermem end``; None when that line is missing."""
    if "# peermem end" not in text:
        return None
    found = {line.strip() for line in text.splitlines()}
    return tuple(m for m in known if m in found)
