"""What changed between two ``assets`` observations of one host: swapped, moved, added or missing parts.

    host_changes("gpu007", before_assets, after_assets)
    # [AssetChange("gpu007", "gpu.swapped", "0000:4C:00.0", "serial", "1652323004112", "1652323009999")]

A GPU is followed by its serial (UUID when the serial is blank or zeroed, as in VMs): same serial at
another bus id is ``gpu.moved``; another serial at the same bus id is ``gpu.swapped``; a serial gone
with its bus id empty is ``gpu.missing``. An HCA is followed by its device name: another node GUID is
``hca.swapped``. Firmware (VBIOS, InfoROM, HCA firmware and PSID, BIOS), the driver and the system
and baseboard serials are compared as values. Pure: both sides are JSON-form observations of
``probes/assets.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

KINDS = ("host.added", "host.missing", "gpu.swapped", "gpu.moved", "gpu.missing", "gpu.added", "gpu.firmware",
         "hca.swapped", "hca.missing", "hca.added", "hca.firmware", "system.swapped", "system.firmware",
         "driver.changed")


@dataclass(frozen=True)
class AssetChange:
    host: str
    kind: str          # one of KINDS
    component: str     # bus id, HCA name, "system", "driver"
    field: str         # what differs: serial, vbios, fw_ver, ...
    before: str | None
    after: str | None

    def line(self) -> str:
        return f"{self.host} {self.kind} {self.component}: {self.field} {self.before or '-'} -> {self.after or '-'}"

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "kind": self.kind, "component": self.component, "field": self.field,
                "before": self.before, "after": self.after}


def _identity(gpu: Mapping[str, Any]) -> str | None:
    serial = gpu.get("serial")
    if isinstance(serial, str) and serial and set(serial) != {"0"}:
        return f"serial {serial}"
    uuid = gpu.get("uuid")
    return f"uuid {uuid}" if isinstance(uuid, str) and uuid else None


def _gpu_changes(host: str, before: list[Mapping[str, Any]], after: list[Mapping[str, Any]]) -> list[AssetChange]:
    out: list[AssetChange] = []
    old_by_id = {_identity(g): g for g in before if _identity(g)}
    new_by_id = {_identity(g): g for g in after if _identity(g)}
    old_by_bus = {g.get("bus_id"): g for g in before if g.get("bus_id")}
    new_by_bus = {g.get("bus_id"): g for g in after if g.get("bus_id")}
    for ident, new in new_by_id.items():
        old = old_by_id.get(ident)
        if old is None:
            replaced = old_by_bus.get(new.get("bus_id"))
            if replaced is not None and _identity(replaced) not in new_by_id:
                out.append(AssetChange(host, "gpu.swapped", str(new.get("bus_id")), ident.split()[0],
                                       (_identity(replaced) or "").split(" ", 1)[-1], ident.split(" ", 1)[1]))
            elif replaced is None:
                out.append(AssetChange(host, "gpu.added", str(new.get("bus_id")), ident.split()[0], None,
                                       ident.split(" ", 1)[1]))
            continue
        if old.get("bus_id") != new.get("bus_id"):
            out.append(AssetChange(host, "gpu.moved", ident, "bus_id", old.get("bus_id"), new.get("bus_id")))
        for name in ("vbios",):
            if old.get(name) != new.get(name):
                out.append(AssetChange(host, "gpu.firmware", str(new.get("bus_id")), name, old.get(name),
                                       new.get(name)))
        for name in sorted(set(old.get("inforom") or {}) | set(new.get("inforom") or {})):
            was, now = (old.get("inforom") or {}).get(name), (new.get("inforom") or {}).get(name)
            if was != now:
                out.append(AssetChange(host, "gpu.firmware", str(new.get("bus_id")), f"inforom {name}", was, now))
    for ident, old in old_by_id.items():
        if ident not in new_by_id and old.get("bus_id") not in new_by_bus:
            out.append(AssetChange(host, "gpu.missing", str(old.get("bus_id")), ident.split()[0],
                                   ident.split(" ", 1)[1], None))
    return out


def _hca_changes(host: str, before: list[Mapping[str, Any]], after: list[Mapping[str, Any]]) -> list[AssetChange]:
    out: list[AssetChange] = []
    old = {h.get("name"): h for h in before}
    new = {h.get("name"): h for h in after}
    for name in sorted(set(old) | set(new), key=str):
        was, now = old.get(name), new.get(name)
        if was is None or now is None:
            kind = "hca.added" if was is None else "hca.missing"
            guid = (now or was or {}).get("node_guid")
            out.append(AssetChange(host, kind, str(name), "node_guid", None if was is None else guid,
                                   guid if was is None else None))
        elif was.get("node_guid") != now.get("node_guid"):
            out.append(AssetChange(host, "hca.swapped", str(name), "node_guid", was.get("node_guid"),
                                   now.get("node_guid")))
        else:
            out += [AssetChange(host, "hca.firmware", str(name), f, was.get(f), now.get(f))
                    for f in ("fw_ver", "psid") if was.get(f) != now.get(f)]
    return out


def _system_changes(host: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> list[AssetChange]:
    out = []
    for name, kind in (("product_serial", "system.swapped"), ("board_serial", "system.swapped"),
                       ("bios_version", "system.firmware")):
        was, now = before.get(name), after.get(name)
        if was and now and was != now:  # a field readable in one run only is not a change
            out.append(AssetChange(host, kind, "system", name, was, now))
    return out


def host_changes(host: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> list[AssetChange]:
    """Changes between two ``assets`` observations (JSON form) of one host."""
    out = _gpu_changes(host, list(before.get("gpus") or ()), list(after.get("gpus") or ()))
    out += _hca_changes(host, list(before.get("hcas") or ()), list(after.get("hcas") or ()))
    out += _system_changes(host, before.get("system") or {}, after.get("system") or {})
    if before.get("driver") and after.get("driver") and before["driver"] != after["driver"]:
        out.append(AssetChange(host, "driver.changed", "driver", "version", before["driver"], after["driver"]))
    return out


def swapped_parts(changes: Iterable[AssetChange]) -> tuple[set[str], set[str]]:
    """(GPU bus ids, HCA names) whose part was replaced or moved: their counters start over."""
    changes = list(changes)
    buses = {c.component for c in changes if c.kind in ("gpu.swapped", "gpu.added")}
    buses |= {str(c.after) for c in changes if c.kind == "gpu.moved"}
    hcas = {c.component for c in changes if c.kind in ("hca.swapped", "hca.added")}
    return buses, hcas
