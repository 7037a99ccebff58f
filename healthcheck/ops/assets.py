"""The fleet asset table of a run: one row per GPU, HCA and system board (``healthcheck assets``).

    frame = asset_table(load_results(Path("runs/latest"), observations=("assets",)))
    for_csv(frame).to_csv("assets.csv", index=False)       # formula cells neutralised (OWASP)
    for_terminal(frame).to_string(index=False)             # control and bidi characters made visible

Columns: host, kind (gpu | hca | system), slot (PCI bus id, HCA device, "system"), model, serial
(GPU serial, HCA node GUID, system serial), uuid (GPU UUID, HCA system image GUID, system UUID),
firmware (VBIOS, HCA firmware, BIOS version), part_number (GPU board part number, HCA PSID,
baseboard name), detail (InfoROM image version, HCA type/revision, baseboard serial, BIOS date).
Read from the ``assets`` observations that ``probes/assets.py`` records in every run. Every cell is a
node's string (serials, firmware, DMI fields): ``for_csv`` and ``for_terminal`` make them safe to open
in a spreadsheet or to print (``healthcheck.core.textsafe``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from healthcheck.core.textsafe import csv_cell, printable
from healthcheck.store.results import RunResults

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = ("host", "kind", "slot", "model", "serial", "uuid", "firmware", "part_number", "detail")


def _rows(host: str, assets: Mapping[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for gpu in assets.get("gpus") or ():
        inforom = gpu.get("inforom") or {}
        platform = gpu.get("platform") or {}
        detail = "; ".join([f"inforom {inforom['img_version']}"] if inforom.get("img_version") else []
                           + [f"{k} {v}" for k, v in sorted(platform.items())])
        rows.append({"kind": "gpu", "slot": gpu.get("bus_id"), "model": gpu.get("name"), "serial": gpu.get("serial"),
                     "uuid": gpu.get("uuid"), "firmware": gpu.get("vbios"),
                     "part_number": gpu.get("board_part_number"), "detail": detail})
    for hca in assets.get("hcas") or ():
        rows.append({"kind": "hca", "slot": hca.get("name"), "model": hca.get("hca_type"),
                     "serial": hca.get("node_guid"), "uuid": hca.get("sys_image_guid"), "firmware": hca.get("fw_ver"),
                     "part_number": hca.get("psid"), "detail": f"hw_rev {hca['hw_rev']}" if hca.get("hw_rev") else ""})
    system = assets.get("system") or {}
    if system:
        model = " ".join(v for v in (system.get("sys_vendor"), system.get("product_name")) if v)
        detail = "; ".join(f"{k} {system[k]}" for k in ("board_serial", "bios_date", "bios_vendor") if system.get(k))
        rows.append({"kind": "system", "slot": "system", "model": model, "serial": system.get("product_serial"),
                     "uuid": system.get("product_uuid"), "firmware": system.get("bios_version"),
                     "part_number": system.get("board_name"), "detail": detail})
    if assets.get("driver"):
        rows.append({"kind": "driver", "slot": "nvidia", "model": None, "serial": None, "uuid": None,
                     "firmware": assets["driver"], "part_number": None, "detail": ""})
    return [{"host": host, **row} for row in rows]


def asset_table(results: RunResults) -> pd.DataFrame:
    """Every recorded part of every host, in host order (empty frame with the columns when none)."""
    rows = [row for name in sorted(results.hosts)
            for row in _rows(name, results.hosts[name].observations.get("assets") or {})]
    import pandas as pd  # slow to import: only the commands that build the table pay it

    return pd.DataFrame(rows, columns=list(COLUMNS)).fillna("")


def for_csv(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every text cell neutralised for a spreadsheet (``textsafe.csv_cell``)."""
    return frame.map(lambda v: csv_cell(v) if isinstance(v, str) else v)


def for_terminal(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every text cell's control and bidi characters made visible (``textsafe.printable``)."""
    return frame.map(lambda v: printable(v) if isinstance(v, str) else v)


def hosts_without_assets(results: RunResults) -> list[str]:
    return sorted(n for n, h in results.hosts.items() if not h.observations.get("assets"))
