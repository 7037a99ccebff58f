"""Kernel log parser: NVRM Xid, NVSwitch SXid and GPU-lost events from journalctl/dmesg text.

    [Fri Apr  5 21:29:39 2024] NVRM: Xid (PCI:0000:a1:00): 79, pid='<unknown>', name=<unknown>, GPU has ...
    -> KernelEventGroup(kind="xid", code=79, pci="0000:a1:00", times=("abs:2024-04-05T21:29:39+00:00",), ...)

Timestamps are kept as tokens resolved later against the collection time (``resolve_time``):
``abs:<iso>`` (dmesg -T/--ctime, dmesg --time-format iso, RFC 3339), ``boot:<seconds>`` (raw
dmesg ``[ 1843.308]`` and /dev/kmsg ``prio,seq,usec,-;``), ``syslog:<Mon DD HH:MM:SS>``
(journalctl short / syslog, no year) and ``""`` when the line has none.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

_HEADER = re.compile(r"^# kernel-log source=(?P<source>\S+) uptime_s=(?P<uptime>[\d.]*)\s*$")
_KMSG = re.compile(r"^\d+,\d+,(?P<usec>\d+),[^;]*;(?P<msg>.*)$")
_DECODE = re.compile(r"^[a-z]+\s*:[a-z]+\s*:\s?(?P<msg>.*)$")
_ISO = re.compile(r"^\[?(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:[,.](?P<frac>\d+))?"
                  r"(?P<tz>Z|[+-]\d\d:?\d\d)?\]?:?\s+(?P<msg>.*)$")
_MONO = re.compile(r"^\[\s*(?P<sec>\d+\.\d+)\]\s?(?P<msg>.*)$")
_CTIME = re.compile(r"^\[(?P<ts>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\]\s?(?P<msg>.*)$")
_SYSLOG = re.compile(r"^(?P<ts>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d)(?:\.\d+)? \S+ "
                     r"[^:\s]+(?:\[\d+\])?:\s+(?P<msg>.*)$")
_TALOS = re.compile(r"^\S+: kern:\s*\w+: (?P<rest>\[.*)$")
_KERNEL_TAG = re.compile(r"^kernel:\s+(?P<msg>.*)$")

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F:.]+)\): (?P<code>\d+),\s*(?P<rest>.*)")
_SXID = re.compile(r"nvidia-nvswitch(?P<dev>\d+): SXid \((?:PCI:)?(?P<pci>[0-9a-fA-F:.]+)\): "
                   r"(?P<code>\d+), (?P<rest>.*)")
_OFF_BUS = re.compile(r"NVRM: (?:The NVIDIA )?GPU (?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}"
                      r"(?:\.\d)?)\b.*?fallen off the bus", re.I)
_NVIDIA_GPU = re.compile(r"NVRM: The NVIDIA GPU (?P<pci>[0-9a-fA-F:.]+)")
_GPU_LOST = re.compile(r"NV_ERR_GPU_IS_LOST|GPU lost from the bus")
_LINK = re.compile(r"\b[Ll]ink (?P<link>-?\d+)")
_RST = re.compile(r"(?<![-\w])RST:\s*(Yes|No)\b", re.I)     # the driver: is a GPU reset needed?
_DRST = re.compile(r"\bD-RST:\s*(Yes|No)\b", re.I)          # ... a drain and reset?
_RECOVERY = re.compile(r"recovery action changed from .*? to 0x[0-9a-fA-F]+ \((?P<action>[^)]+)\)")
_NOT_READABLE = re.compile(r"insufficient permissions|not seeing messages from other users|"
                           r"read kernel buffer failed|Operation not permitted", re.I)
_PCI = re.compile(r"^(?:(?P<dom>[0-9a-fA-F]{4,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})"
                  r"(?:\.[0-7])?$")
SAMPLE_CHARS = 200


@dataclass(frozen=True)
class KernelEventGroup:
    """All events of one kind, code and device: ``xid`` (per GPU PCI address), ``sxid`` (per
    NVSwitch) or ``gpu_lost`` (fallen off the bus / NV_ERR_GPU_IS_LOST without an Xid)."""

    kind: str
    code: int | None
    pci: str | None
    device: str | None = None
    times: tuple[str, ...] = ()
    sample: str = ""
    links: tuple[int, ...] = ()
    severities: tuple[str, ...] = ()   # SXid / NVLink5 Xid: "Fatal", "Non-fatal" as the driver says
    actions: tuple[str, ...] = ()      # Xid 154: recovery actions named ("GPU Reset Required", ...)
    resets: tuple[str, ...] = ()       # per event with the fields: "RST: No, D-RST: No" (Xid 48/63/64/94/95/154)


@dataclass(frozen=True)
class KernelLog:
    groups: tuple[KernelEventGroup, ...] = ()
    source: str | None = None
    uptime_s: float | None = None
    unreadable: str | None = None      # the tool's words when the log could not be read
    records: int = 0


def normalize_pci(text: str) -> str | None:
    """``00000000:9B:00.0``, ``0000:9b:00``, ``0000:b3:00.0`` -> ``0000:9b:00`` (function dropped)."""
    m = _PCI.match(text.strip())
    if not m:
        return None
    dom = int(m["dom"], 16) if m["dom"] else 0
    return f"{dom:04x}:{m['bus'].lower()}:{m['dev'].lower()}"


def _timestamp(line: str) -> tuple[str, str] | None:
    """(time token, message) for a line with a recognised prefix, else None."""
    if m := _TALOS.match(line):
        line = m["rest"]
    if m := _DECODE.match(line):
        line = m["msg"]
    if m := _KMSG.match(line):
        return f"boot:{int(m['usec']) / 1e6:.6f}", m["msg"]
    if m := _MONO.match(line):
        return f"boot:{m['sec']}", m["msg"]
    try:
        if m := _CTIME.match(line):
            ts = datetime.strptime(" ".join(m["ts"].split()), "%a %b %d %H:%M:%S %Y").replace(tzinfo=timezone.utc)
            return f"abs:{ts.isoformat()}", m["msg"]
        if m := _ISO.match(line):
            tz = m["tz"] or "+00:00"
            tz = "+00:00" if tz == "Z" else (tz if ":" in tz else f"{tz[:3]}:{tz[3:]}")
            frac = (m["frac"] or "0")[:6]
            ts = datetime.fromisoformat(f"{m['ts']}.{frac:0<6}{tz}").astimezone(timezone.utc)
            return f"abs:{ts.isoformat()}", m["msg"]
    except (ValueError, OverflowError):  # a stamp with the right shape and an impossible date: time unknown
        return "", m["msg"]
    if m := _SYSLOG.match(line):
        return f"syslog:{' '.join(m['ts'].split())}", m["msg"]
    if m := _KERNEL_TAG.match(line):
        return "", m["msg"]
    return None


def _records(text: str) -> Iterator[tuple[str, str]]:
    """(time token, message) per log record; indented lines without a prefix continue the previous
    record (dmesg prints multi-line NVRM messages that way), their ``NVRM:`` tag dropped."""
    current: list[str] | None = None
    for raw in text.splitlines():
        if not raw.strip() or raw.startswith("# "):
            continue
        stamped = _timestamp(raw)
        if stamped is None and current is not None and raw[:1].isspace():
            current[1] += " " + re.sub(r"^NVRM:\s*", "", raw.strip())
            continue
        if current is not None:
            yield current[0], current[1]
        current = [stamped[0], stamped[1]] if stamped else ["", raw.strip()]
    if current is not None:
        yield current[0], current[1]


def _classify(msg: str, last_gpu: str | None) -> KernelEventGroup | None:
    if m := _XID.search(msg):
        rest = m["rest"]
        action = _RECOVERY.search(rest)
        link = _LINK.search(rest)
        sev = re.search(r"\b(Fatal|Nonfatal|Non-fatal)\b", rest)
        rst, drst = _RST.search(rest), _DRST.search(rest)
        resets = (f"RST: {rst[1].capitalize() if rst else '?'}, D-RST: {drst[1].capitalize() if drst else '?'}",) \
            if rst or drst else ()
        return KernelEventGroup(kind="xid", code=int(m["code"]), pci=normalize_pci(m["pci"]),
                                sample=msg[msg.index("NVRM"):][:SAMPLE_CHARS],
                                links=(int(link["link"]),) if link else (),
                                severities=(sev[1],) if sev else (),
                                actions=(action["action"],) if action else (), resets=resets)
    if m := _SXID.search(msg):
        sev = re.match(r"(Fatal|Non-fatal)", m["rest"])
        link = _LINK.search(m["rest"]) if sev else None
        return KernelEventGroup(kind="sxid", code=int(m["code"]), pci=normalize_pci(m["pci"]),
                                device=f"nvswitch{m['dev']}", sample=msg[:SAMPLE_CHARS] if sev else "",
                                links=(int(link["link"]),) if link else (),
                                severities=(sev[1],) if sev else ())
    if (m := _OFF_BUS.search(msg)) or ("fallen off the bus" in msg and "Xid" not in msg):
        pci = normalize_pci(m["pci"]) if m else last_gpu
        return KernelEventGroup(kind="gpu_lost", code=None, pci=pci, sample=msg[:SAMPLE_CHARS])
    if _GPU_LOST.search(msg):
        return KernelEventGroup(kind="gpu_lost", code=None, pci=None, sample=msg[:SAMPLE_CHARS])
    return None


# A network interface losing its link: the kernel's netdev line ("mlx5_core 0000:17:00.0 ens1f0np0: Link down",
# mlx5e_update_carrier; "r8169 0000:06:00.0 eth0: link down") and systemd-networkd's ("ib6: lost carrier",
# corpus misc/syslog-ib6-lost-carrier-link-flap) in a full journal or syslog. "ata6: SATA link down" is no netdev.
_LINK_DOWN = re.compile(r"(?:^|\s)(?P<ifname>[A-Za-z][\w.@-]{0,31}): (?:lost carrier|[Ll]ink down)\b")


def parse_link_downs(text: str) -> KernelLog:
    """Link-down lines of network interfaces, one ``link_down`` group per interface (``device``), with their
    time tokens; the same log formats as ``parse_kernel_log``."""
    groups: dict[str, KernelEventGroup] = {}
    uptime = source = None
    for line in text.splitlines():
        if m := _HEADER.match(line):
            source, uptime = m["source"], float(m["uptime"]) if m["uptime"] else None
    count = 0
    for token, msg in _records(text):
        count += 1
        if (m := _LINK_DOWN.search(msg)) is None:
            continue
        old = groups.get(m["ifname"])
        groups[m["ifname"]] = KernelEventGroup(kind="link_down", code=None, pci=None, device=m["ifname"],
                                               times=(old.times if old else ()) + (token,),
                                               sample=old.sample if old else msg[:SAMPLE_CHARS])
    return KernelLog(groups=tuple(groups.values()), source=source, uptime_s=uptime, records=count)


def looks_like_kernel_log(text: str) -> bool:
    """True when some line carries a kernel-log prefix (timestamp or ``kernel:`` tag)."""
    return any(_timestamp(line) is not None for line in text.splitlines())


def parse_kernel_log(text: str) -> KernelLog:
    """journalctl -k / dmesg (-T, --ctime, --time-format iso, --decode, raw, /dev/kmsg, syslog) text.

    Written against every file in corpus ``xid/`` and the kernel-log files of ``misc/``. An SXid's
    ``Data``/``Severity`` lines count toward the SXid but only the ``Fatal``/``Non-fatal`` line
    counts as an event. A log the tool could not read sets ``unreadable`` (graded ERROR).
    """
    groups: dict[tuple[str, int | None, str | None, str | None], KernelEventGroup] = {}
    source = uptime = unreadable = None
    count, last_gpu = 0, None
    for line in text.splitlines():
        if m := _HEADER.match(line):
            source, uptime = m["source"], float(m["uptime"]) if m["uptime"] else None
        elif _NOT_READABLE.search(line) and _timestamp(line) is None:  # the tool's words, not a record
            unreadable = line.strip()
    for token, msg in _records(text):
        count += 1
        if m := _NVIDIA_GPU.search(msg):
            last_gpu = normalize_pci(m["pci"])
        event = _classify(msg, last_gpu)
        if event is None:
            continue
        key = (event.kind, event.code, event.pci, event.device)
        old = groups.get(key)
        counts = not (event.kind == "sxid" and not event.severities)
        times = (token,) if counts else ()
        if old is None:
            groups[key] = replace(event, times=times)
            continue
        groups[key] = replace(
            old, times=old.times + times, sample=old.sample or event.sample,
            links=tuple(sorted(set(old.links) | set(event.links))),
            severities=tuple(dict.fromkeys(old.severities + event.severities)),
            actions=old.actions + event.actions, resets=old.resets + event.resets)
    return KernelLog(groups=tuple(g for g in groups.values() if g.times), source=source,
                     uptime_s=uptime, unreadable=unreadable, records=count)


def resolve_time(token: str, now: datetime, uptime_s: float | None) -> datetime | None:
    """The absolute UTC time of a token, or None when it cannot be known (no timestamp, or a
    boot-relative one without the node's uptime). A yearless syslog time takes the latest year
    that does not put it more than a day after ``now``."""
    kind, _, value = token.partition(":")
    if kind == "abs":
        return datetime.fromisoformat(value)
    if kind == "boot":
        return None if uptime_s is None else now - timedelta(seconds=uptime_s - float(value))
    if kind == "syslog":
        for year in (now.year, now.year - 1, now.year - 2, now.year - 3, now.year - 4):
            try:  # Feb 29 exists in leap years only
                ts = datetime.strptime(f"{year} {value}", "%Y %b %d %H:%M:%S").replace(tzinfo=timezone.utc)
            except ValueError:
                continue
            if ts <= now + timedelta(days=1):
                return ts
    return None


@dataclass(frozen=True)
class WindowedGroup:
    group: KernelEventGroup
    count: int
    first: datetime | None
    last: datetime | None
    older: int = 0                     # events of this group before the window
    untimed: bool = False              # some events had no usable time (counted as in the window)


def in_window(log: KernelLog, now: datetime, window_h: float) -> list[WindowedGroup]:
    """Each group's events since ``now - window_h``: count, first and last time, older events."""
    now = now if now.tzinfo else now.replace(tzinfo=timezone.utc)
    cutoff = now - timedelta(hours=window_h)
    out = []
    for g in log.groups:
        times = [resolve_time(t, now, log.uptime_s) for t in g.times]
        inside = [t for t in times if t is None or t >= cutoff]
        known = sorted(t for t in inside if t is not None)
        out.append(WindowedGroup(group=g, count=len(inside), first=known[0] if known else None,
                                 last=known[-1] if known else None, older=len(times) - len(inside),
                                 untimed=any(t is None for t in inside)))
    return out
