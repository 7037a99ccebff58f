"""Pure parsers for ``dcgmi health -c`` (JSON and text tree) and ``dcgmi discovery -l``.

    parse_dcgmi_health('{"body": {"Overall Health": {"value": "Healthy"}}, "header": [...]}')
    parse_dcgmi_discovery("8 GPUs found.\\n+--------+----...\\n| 0      | Name: NVIDIA H800 ...")

The health JSON is dcgmi's generic output tree (DCGM ``dcgmi/DcgmiOutput.h``): each node has ``value``,
optional ``overflow`` (continuation lines) and ``children``. ``Health::GenerateOutputFromResponse``
(``dcgmi/Health.cpp``) fills it as ``body.<entity group>.children.<id>.children.Errors.children.<system>``.
The text form prints the same tree as ``-> `` rows with overflow rows under them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from healthcheck.core.spec import ParseError

WATCHES_DISABLED = "Health watches not enabled"


@dataclass(frozen=True)
class HealthIncident:
    entity: str        # gpu0, nvswitch1
    system: str        # "Power system", "PCIe system", "Driver"
    health: str        # Healthy, Warning, Failure
    message: str


@dataclass(frozen=True)
class HealthReport:
    overall: str                              # Healthy, Warning, Failure, Internal error
    incidents: tuple[HealthIncident, ...] = ()
    watches_disabled: str | None = None       # dcgmi's message when no watch was ever set


@dataclass(frozen=True)
class DiscoveredGpu:
    gpu_id: int
    name: str
    bus_id: str | None = None
    uuid: str | None = None


@dataclass(frozen=True)
class DcgmDiscovery:
    gpus: tuple[DiscoveredGpu, ...]
    nvswitch_count: int | None = None


def parse_dcgmi_health(text: str) -> HealthReport:
    """``dcgmi health -c [-j]``, DCGM 2.x-4.x. "Error: Health watches not enabled" gives a report with
    ``watches_disabled`` set; anything without an ``Overall Health`` value raises ParseError."""
    if WATCHES_DISABLED in text:
        line = next(ln.strip() for ln in text.splitlines() if WATCHES_DISABLED in ln)
        return HealthReport(overall="unknown", watches_disabled=line.removeprefix("Error: "))
    start = re.search(r"^\s*\{", text, re.MULTILINE)
    if start is not None:
        return _health_json(text[start.start():])
    return _health_text(text)


def _health_json(text: str) -> HealthReport:
    try:
        body = json.loads(text).get("body")
    except (json.JSONDecodeError, AttributeError, RecursionError) as exc:
        raise ParseError(f"dcgmi health JSON does not parse: {exc}", text) from exc
    if not isinstance(body, dict) or not isinstance(body.get("Overall Health"), dict):
        raise ParseError("dcgmi health JSON has no body.'Overall Health'", text)
    incidents = []
    for group, node in body.items():
        if group == "Overall Health" or not isinstance(node, dict):
            continue
        for entity_id, entity in _children(node).items():
            for system, item in _children(_children(entity).get("Errors")).items():
                if not isinstance(item, dict):
                    raise ParseError(f"dcgmi health JSON: {group} {entity_id} {system} is not an object", text)
                incidents.append(HealthIncident(
                    entity=f"{group.lower()}{entity_id}", system=system, health=str(item.get("value", "")),
                    message=" ".join(str(x) for x in item.get("overflow") or ())))
    return HealthReport(overall=str(body["Overall Health"].get("value", "")), incidents=tuple(incidents))


def _children(node: Any) -> dict[str, Any]:
    """A JSON tree node's ``children`` object; {} where the node or its children are not objects."""
    children = node.get("children") if isinstance(node, dict) else None
    return children if isinstance(children, dict) else {}


_TREE_ROW = re.compile(r"^\|(?P<label>[^|]*)\|(?P<value>[^|]*)\|\s*$")


def _health_text(text: str) -> HealthReport:
    overall = None
    incidents: list[dict[str, Any]] = []
    group = entity = None
    current: dict[str, Any] | None = None
    for line in text.splitlines():
        m = _TREE_ROW.match(line.rstrip())
        if m is None:
            continue
        raw, value = m["label"], m["value"].strip()
        label = raw.strip()
        depth = (raw.index("->") - 1) // 3 + 1 if "->" in raw else 0
        name = label.removeprefix("->").strip()
        if label == "Overall Health":
            overall = value
        elif depth == 0 and label:
            group, current = name, None
        elif depth == 1:
            entity, current = f"{(group or 'entity').lower()}{name}", None
        elif depth >= 3 and entity:
            current = {"entity": entity, "system": name, "health": value, "message": []}
            incidents.append(current)
        elif not label and value and current is not None:
            current["message"].append(value)
    if overall is None:
        raise ParseError("dcgmi health output has no 'Overall Health' row", text[:400])
    return HealthReport(overall=overall, incidents=tuple(
        HealthIncident(entity=i["entity"], system=i["system"], health=i["health"],
                       message=" ".join(i["message"]))
        for i in incidents))


_FOUND = re.compile(r"^\s*(?P<n>\d+) (?P<what>GPUs?|NvSwitch(?:es)?|ConnectX|CPUs?) found", re.MULTILINE)
_GPU_CELL = re.compile(r"^\|\s*(?P<id>\d*)\s*\|\s*(?P<key>Name|PCI Bus ID|Device UUID):"
                       r"\s*(?P<value>.*?)\s*\|")


_CELL_KEYS = {"Name": "name", "PCI Bus ID": "bus_id", "Device UUID": "uuid"}


def gpu_cell(line: str) -> tuple[str, str, str] | None:
    """``| 0      | Name: NVIDIA H100 80GB HBM3   |`` -> ``("0", "name", "NVIDIA H100 80GB HBM3")``: what
    ``_GPU_CELL`` matches (id digits or empty, key, value stripped), read with ``str`` methods, about three
    times cheaper than the pattern on the table's rows; None for any other line."""
    parts = line.split("|", 3)
    if len(parts) < 4 or parts[0]:  # "|id|key: value|" at the start of the line
        return None
    ident = parts[1].strip()  # strip and isdecimal are the pattern's \s and \d
    if ident and not ident.isdecimal():
        return None
    key, colon, value = parts[2].lstrip().partition(":")
    field = _CELL_KEYS.get(key)
    return None if field is None or not colon else (ident, field, value.strip())


def parse_dcgmi_discovery(text: str) -> DcgmDiscovery:
    """``dcgmi discovery -l`` of DCGM 3.x (GPU and NvSwitch tables) and 4.x (plus ConnectX and CPU tables);
    prompt lines and trailing padding are ignored. No ``N GPUs found`` line raises ParseError."""
    counts = {m["what"][:3].lower(): int(m["n"]) for m in _FOUND.finditer(text)}  # gpu, nvs, con, cpu
    if "gpu" not in counts:
        raise ParseError("dcgmi discovery output has no 'N GPUs found' line", text[:400])
    gpus: list[dict[str, Any]] = []
    section = None
    for line in text.splitlines():
        if not line.startswith("|"):  # a table row is never an "N GPUs found" line, nor the reverse
            if found := _FOUND.match(line):
                section = found["what"]
            continue
        if not (section or "").startswith("GPU"):
            continue
        cell = gpu_cell(line)
        if cell is None:
            continue
        ident, key, value = cell
        if ident:
            gpus.append({"gpu_id": int(ident)})
        if gpus:
            gpus[-1][key] = value
    return DcgmDiscovery(gpus=tuple(DiscoveredGpu(g["gpu_id"], g.get("name", ""), g.get("bus_id"), g.get("uuid"))
                                    for g in gpus), nvswitch_count=counts.get("nvs"))
