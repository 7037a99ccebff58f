"""Pure parsers for node resources: memory, CPUs, /dev/shm, systemd services, mounts and mount probes.

    parse_meminfo("MemTotal:       2113692160 kB\\n...")            -> 2113692160 (KiB)
    parse_cpu_sysfs("/sys/devices/system/cpu/online:0-223\\n...")   -> {"online": 224, "present": 224}
    parse_df_posix("Filesystem 1024-blocks Used Available Capacity Mounted on\\n"
                   "shm 65536 0 65536 0% /dev/shm", "/dev/shm")                  -> 65536 (KiB)
    parse_systemctl_units("nvidia-fabricmanager.service loaded active running NVIDIA fabric manager service")
    parse_proc_mounts("server:/home /home nfs4 rw,relatime 0 0")
    parse_mount_probe("0 /home\\n124 /scratch\\n")                 -> {"/home": 0, "/scratch": 124}
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from healthcheck.core.spec import ParseError

MAX_CPU_DIGITS = 9   # a CPU number in a kernel CPU list (a longer digit run is garbage, never int()-ed)


@dataclass(frozen=True)
class ServiceState:
    unit: str          # nvidia-fabricmanager.service
    load: str          # loaded, not-found, masked
    active: str        # active, inactive, failed, activating
    sub: str           # running, dead, exited, failed


@dataclass(frozen=True)
class MountEntry:
    device: str
    path: str
    fstype: str
    options: str


def parse_meminfo(text: str) -> int:
    """``/proc/meminfo``: MemTotal in KiB (the kernel prints ``kB`` meaning KiB)."""
    m = re.search(r"^MemTotal:\s+(\d{1,20})\s*kB", text, re.MULTILINE)
    if m is None:
        raise ParseError("/proc/meminfo has no 'MemTotal: N kB' line", text[:200])
    return int(m[1])


def cpu_list_count(text: str) -> int:
    """A kernel CPU list (``0-55,112-167`` or empty) -> number of CPUs."""
    total = 0
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        if not low.isdecimal() or (high and not high.isdecimal()) or max(len(low), len(high)) > MAX_CPU_DIGITS:
            raise ParseError("not a kernel CPU list", text[:200])
        total += int(high or low) - int(low) + 1
    return total


def parse_cpu_sysfs(text: str) -> dict[str, int]:
    """``grep -H . /sys/devices/system/cpu/{online,present}`` -> counts by file name."""
    out = {}
    for line in text.splitlines():
        path, sep, value = line.partition(":")
        if sep and path.rsplit("/", 1)[-1] in ("online", "present", "offline", "possible"):
            out[path.rsplit("/", 1)[-1]] = cpu_list_count(value)
    if "online" not in out:
        raise ParseError("no /sys/devices/system/cpu/online line", text[:200])
    return out


def parse_df_posix(text: str, mount: str) -> int:
    """``df -Pk PATH`` (POSIX format, 1024-byte blocks): total size in KiB of the filesystem at ``mount``."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines or not lines[0].startswith("Filesystem"):
        raise ParseError("df -P output has no 'Filesystem' header", text[:200])
    for line in lines[1:]:
        fields = line.split()
        if len(fields) >= 6 and fields[-1] == mount and fields[1].isdecimal() and len(fields[1]) <= 20:
            return int(fields[1])
    raise ParseError(f"df -P output has no row for {mount}", text[:200])


def parse_systemctl_units(text: str) -> dict[str, ServiceState]:
    """``systemctl list-units --type=service --all --no-legend --no-pager --plain`` (systemd >= 219):
    ``UNIT LOAD ACTIVE SUB DESCRIPTION`` per line; newer systemd puts a ``●`` before failed units."""
    units = {}
    for line in text.splitlines():
        fields = line.replace("\u25cf", " ").split()
        if len(fields) >= 4 and "." in fields[0]:
            unit = fields[0]
            units[unit] = ServiceState(unit=unit, load=fields[1], active=fields[2], sub=fields[3])
    return units


def parse_proc_mounts(text: str) -> tuple[MountEntry, ...]:
    """``/proc/mounts`` (fstab format): device, mount point (octal escapes decoded), type, options."""
    entries = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        path = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[1])
        entries.append(MountEntry(device=fields[0], path=path, fstype=fields[2], options=fields[3]))
    if not entries and text.strip():
        raise ParseError("/proc/mounts has no 'device mountpoint type options' line", text[:200])
    return tuple(entries)


def parse_mount_probe(text: str) -> dict[str, int]:
    """Our ``mount-probe`` lines ``<exit code of timeout stat -f> <mount point>`` -> path: rc.

    124/137 mean the bounded ``stat`` was killed: the mount hangs. The command ends with ``# mount-probe
    end``; without it the output is truncated (ParseError)."""
    if "# mount-probe end" not in text:
        raise ParseError("mount-probe output is truncated (no '# mount-probe end' line)", text[-200:])
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(\d{1,9}) (/.*)$", line)
        if m:
            out[m[2]] = int(m[1])
    return out


def active_service(units: Mapping[str, ServiceState], name: str) -> ServiceState | None:
    """Look a service up by name with or without ``.service``."""
    return units.get(name) or units.get(f"{name}.service")
