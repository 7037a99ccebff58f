"""Assets probe: what is in the node, by serial: GPUs, HCAs, system board and BIOS (the handoff asset list).

    nvidia-smi-q-x -> per GPU <serial>, <uuid>, <vbios_version>, <board_part_number>, <board_id>,
                      <inforom_version>/{img_version, oem_object, ecc_object, pwr_object},
                      <platformInfo>/{chassis_serial_number, slot_number, tray_index, module_id}
                      (the gpu probe's ``nvidia-smi -q -x``, run once per host), and <driver_version>
    hca-ids        -> /sys/class/infiniband/mlx5_0/node_guid:b83f:d203:00b6:eb16   (``grep -H`` lines of
                      node_guid, sys_image_guid, fw_ver, board_id (the PSID on mlx5), hca_type, hw_rev;
                      then "# hca-ids end")
    dmi-sysfs      -> /sys/class/dmi/id/bios_version:2.14.1   (the world-readable DMI files; serials
                      are root-only there and simply absent for an unprivileged user; "# dmi end")
    dmidecode      -> ``dmidecode -t 0 -t 1 -t 2`` (BIOS, System, Base Board) when installed and
                      permitted; "Permission denied" for a non-root user, which is not an error

Not collected: the BMC firmware version (``ipmitool mc info`` needs root and a BMC driver).
``N/A``, empty, "Not Specified" and "To Be Filled By O.E.M." read as absent. The evaluator reports
what was found (PASS, value = counts) or SKIP saying nothing was readable; it never fails a host:
``healthcheck assets`` and ``healthcheck diff`` read the observation.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from healthcheck.core.model import CommandResult, Finding, Status
from healthcheck.core.spec import EvalContext, ParseError, ProbeSpec
from healthcheck.probes import register
from healthcheck.probes.gpu import BUNDLE_SOURCES, GPU_ID, parse_gpu_sources
from healthcheck.probes.gpu import COMMANDS as GPU_COMMANDS
from healthcheck.probes.ib_parse import parse_ib_sysfs
from healthcheck.probes.parse_memo import shared_parser

_HCA_FILES = ("node_guid", "sys_image_guid", "fw_ver", "board_id", "hca_type", "hw_rev")
_DMI_FILES = ("bios_vendor", "bios_version", "bios_date", "sys_vendor", "product_name", "product_version",
              "product_serial", "product_uuid", "board_vendor", "board_name", "board_serial", "chassis_serial")
_NO_DMIDECODE = "healthcheck: dmidecode not installed"
COMMANDS = {
    GPU_ID: GPU_COMMANDS[GPU_ID],
    "hca-ids": "grep -H -s . " + " ".join(f"/sys/class/infiniband/*/{f}" for f in _HCA_FILES)
               + "; echo '# hca-ids end'",
    "dmi-sysfs": "grep -H -s . " + " ".join(f"/sys/class/dmi/id/{f}" for f in _DMI_FILES) + "; echo '# dmi end'",
    "dmidecode": f"if command -v dmidecode >/dev/null 2>&1; then dmidecode -t 0 -t 1 -t 2 2>&1; "
                 f"else echo '{_NO_DMIDECODE}'; fi",
}
_ABSENT = {"", "n/a", "[n/a]", "not specified", "to be filled by o.e.m.", "default string", "none", "unknown",
           "not applicable", "[not supported]"}
# dmidecode section -> {field label -> our key}
_DMIDECODE = {
    "BIOS Information": {"Vendor": "bios_vendor", "Version": "bios_version", "Release Date": "bios_date"},
    "System Information": {"Manufacturer": "sys_vendor", "Product Name": "product_name",
                           "Version": "product_version", "Serial Number": "product_serial", "UUID": "product_uuid"},
    "Base Board Information": {"Manufacturer": "board_vendor", "Product Name": "board_name",
                               "Serial Number": "board_serial"},
}


def _value(text: Any) -> str | None:
    value = " ".join(str(text).split()) if isinstance(text, str) else None
    return None if value is None or value.lower() in _ABSENT else value


@dataclass(frozen=True)
class GpuAsset:
    bus_id: str | None
    name: str | None = None
    serial: str | None = None
    uuid: str | None = None
    vbios: str | None = None
    board_part_number: str | None = None
    board_id: str | None = None
    module_id: str | None = None
    inforom: Mapping[str, str] = field(default_factory=dict)      # img_version, oem_object, ecc_object, ...
    platform: Mapping[str, str] = field(default_factory=dict)     # chassis_serial_number, slot_number, ...


@dataclass(frozen=True)
class HcaAsset:
    name: str
    node_guid: str | None = None
    sys_image_guid: str | None = None
    fw_ver: str | None = None
    psid: str | None = None         # sysfs board_id: the PSID on mlx5 (e.g. MT_0000000838)
    hca_type: str | None = None
    hw_rev: str | None = None


@dataclass(frozen=True)
class AssetsObservation:
    driver: str | None = None
    gpus: tuple[GpuAsset, ...] = ()
    hcas: tuple[HcaAsset, ...] = ()
    system: Mapping[str, str] = field(default_factory=dict)       # bios_version, product_serial, ...
    system_sources: Mapping[str, str] = field(default_factory=dict)  # key -> dmi-sysfs | dmidecode
    notes: tuple[str, ...] = ()                                    # what could not be read, and why


def _leaves(tree: Any) -> dict[str, str]:
    return {k: v for k, v in ((k, _value(v)) for k, v in (tree or {}).items() if isinstance(v, str)) if v} \
        if isinstance(tree, Mapping) else {}


def parse_gpu_assets(outputs: Mapping[str, CommandResult]) -> tuple[str | None, tuple[GpuAsset, ...]]:
    """(driver version, GPUs) from the gpu probe's parse of ``nvidia-smi -q -x`` (cached: one parse per
    host for every reader; text ``nvidia-smi -q`` from bundles too). Fields absent in older schemas
    (``board_part_number`` before ~drv535: ``gpu_part_number`` is used) read as None."""
    smi = parse_gpu_sources(outputs)
    if smi is None:
        return None, ()
    return smi.driver_version, tuple(GpuAsset(
        bus_id=g.bus_id, name=g.name, serial=_value(g.serial), uuid=_value(g.uuid), vbios=_value(g.vbios),
        board_part_number=_value(g.board_part_number), board_id=_value(g.board_id),
        module_id=None if g.module_id is None else str(g.module_id), inforom=dict(g.inforom),
        platform=dict(g.platform)) for g in smi.gpus)


_SYSFS_LINE = re.compile(r"^/sys/class/infiniband/(?P<dev>[^/]+)/(?P<file>[a-z_]+):(?P<value>.*)$")
_ROOT_LEN, _PORT_DIR = len("/sys/class/infiniband/"), "/ports/"


@shared_parser  # read by the assets probe and by a sweep's asset diff (current_assets): one parse per host
def parse_hca_ids(text: str, end: str = "# hca-ids end") -> tuple[HcaAsset, ...]:
    """``grep -H`` lines of /sys/class/infiniband/<dev>/<file>, one HCA per device, sorted by name;
    the infiniband probe's ``ib-sysfs`` dump (no GUIDs) reads the same way (``end="# ib-sysfs"``)."""
    if end not in text:
        raise ParseError(f"HCA sysfs output is truncated (no {end!r} line)", text[-200:])
    attrs: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(_PORT_DIR, line.find("/", _ROOT_LEN)):
            continue  # a port's file (ib-sysfs): the pattern's file name cannot hold a '/'
        match = _SYSFS_LINE.match(line)
        if match and match["file"] in _HCA_FILES:
            value = _value(match["value"])
            if value:
                attrs.setdefault(match["dev"], {})[match["file"]] = value
    return tuple(HcaAsset(name=dev, node_guid=a.get("node_guid"), sys_image_guid=a.get("sys_image_guid"),
                          fw_ver=a.get("fw_ver"), psid=a.get("board_id"), hca_type=a.get("hca_type"),
                          hw_rev=a.get("hw_rev")) for dev, a in sorted(attrs.items()))


def ib_sysfs_hcas(text: str) -> tuple[HcaAsset, ...]:
    """The HCAs of the infiniband probe's ``ib-sysfs`` dump (bundles from before ``hca-ids``: no GUIDs), from
    that probe's parse of it (shared: one parse per host); a dump it refuses is read as ``parse_hca_ids`` reads
    one (a truncated dump still raises ``ParseError``)."""
    try:
        devices = parse_ib_sysfs(text)
    except ParseError:
        return parse_hca_ids(text, end="# ib-sysfs")
    found = ((d.name, _value(d.fw_ver), _value(d.board_id), _value(d.hca_type)) for d in devices)
    return tuple(HcaAsset(name=name, fw_ver=fw_ver, psid=psid, hca_type=hca_type)
                 for name, fw_ver, psid, hca_type in sorted(found) if fw_ver or psid or hca_type)


def parse_dmi_sysfs(text: str) -> dict[str, str]:
    """``grep -H`` lines of /sys/class/dmi/id/<file> -> {file: value} (absent placeholders dropped)."""
    out = {}
    for line in text.splitlines():
        path, sep, value = line.partition(":")
        name = path.rsplit("/", 1)[-1]
        if sep and path.startswith("/sys/class/dmi/id/") and name in _DMI_FILES and _value(value):
            out[name] = str(_value(value))
    return out


def parse_dmidecode(text: str) -> tuple[dict[str, str], str | None]:
    """``dmidecode -t 0 -t 1 -t 2`` (dmidecode 2.x/3.x layout: a "Handle 0x..., DMI type N" line, the
    section title, then tab-indented "Label: value" lines) -> ({key: value}, why nothing was read)."""
    if _NO_DMIDECODE in text:
        return {}, "dmidecode not installed"
    if "Permission denied" in text and "Handle 0x" not in text:
        return {}, "dmidecode needs root (permission denied)"
    out: dict[str, str] = {}
    section: Mapping[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            section = {}
        elif not line.startswith("\t"):
            section = _DMIDECODE.get(line.strip(), {}) if not line.startswith("Handle ") else section
        elif not line.startswith("\t\t"):
            label, _, value = line.strip().partition(":")
            if label in section and _value(value) and section[label] not in out:
                out[section[label]] = str(_value(value))
    return out, None if out else "dmidecode printed no BIOS/System/Base Board fields"


def parse_assets(outputs: Mapping[str, CommandResult]) -> AssetsObservation:
    driver, gpus, hcas, notes = None, (), (), []
    driver, gpus = parse_gpu_assets(outputs)
    if (ids := outputs.get("hca-ids")) is not None:
        hcas = parse_hca_ids(ids.text)
    elif (ib := outputs.get("ib-sysfs")) is not None:  # bundles from before hca-ids: firmware and PSID only
        hcas = ib_sysfs_hcas(ib.text)
    system: dict[str, str] = {}
    sources: dict[str, str] = {}
    if (dmi := outputs.get("dmi-sysfs")) is not None:
        system = parse_dmi_sysfs(dmi.text)
        sources = {k: "dmi-sysfs" for k in system}
    if (raw := outputs.get("dmidecode")) is not None:
        decoded, why = parse_dmidecode(raw.text)
        for key, value in decoded.items():
            if key not in system:  # sysfs first; dmidecode adds what only root can read (serials)
                system[key], sources[key] = value, "dmidecode"
        if why:
            notes.append(why)
    if "dmi-sysfs" in outputs and not any(k in system for k in ("product_serial", "board_serial")):
        notes.append("system and board serials are root-only in /sys/class/dmi/id")
    return AssetsObservation(driver=_value(driver), gpus=gpus, hcas=hcas, system=system, system_sources=sources,
                             notes=tuple(notes))


def evaluate_assets(obs: AssetsObservation, ctx: EvalContext) -> list[Finding]:
    host = ctx.host.name
    serials = sum(1 for g in obs.gpus if g.serial and set(g.serial) != {"0"})
    parts = [f"{len(obs.gpus)} GPUs ({serials} with a serial)", f"{len(obs.hcas)} HCAs"]
    if obs.system.get("bios_version"):
        parts.append(f"BIOS {obs.system['bios_version']}")
    if obs.system.get("product_serial"):
        parts.append(f"system serial {obs.system['product_serial']}")
    found = bool(obs.gpus or obs.hcas or obs.system)
    note = f"; not read: {'; '.join(obs.notes)}" if obs.notes else ""
    return [Finding(host=host, check="assets.inventory", status=Status.PASS if found else Status.SKIP,
                    value=len(obs.gpus) + len(obs.hcas), unit="parts", expected="asset records",
                    source="nvidia-smi-q-x" if obs.gpus else ("hca-ids" if obs.hcas else "dmi-sysfs"),
                    message=("recorded " + ", ".join(parts) if found else "no GPU, HCA or DMI data readable") + note,
                    remedy=None if found else "Install nvidia-smi / rdma sysfs, or run as root for dmidecode")]


PROBE = register(ProbeSpec(
    name="assets",
    description="asset record: GPU serial/UUID/VBIOS/part number/InfoROM, HCA GUID/firmware/PSID, BIOS and "
                "system serials (healthcheck assets, healthcheck diff)",
    command_map=COMMANDS,
    parse_fn=parse_assets,
    evaluate_fn=evaluate_assets,
    accepts=(*BUNDLE_SOURCES, "ib-sysfs"),
))
