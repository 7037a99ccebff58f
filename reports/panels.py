"""Per-host observation panels for the HTML report, one small renderer per probe name.

    @panel("gpu", "panels/table.html.j2")
    def gpu_panel(obs) -> Panel | None: ...          # None: nothing worth showing

A probe without its own renderer gets the generic key/value panel. Renderers read observations
(JSON form, as in results.json) defensively: any field may be missing, ``None`` or "N/A".
To add one: write a function returning a ``Panel`` (usually a ``Table``) and decorate it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

MAX_COLUMNS = 16
ORDER = ("gpu", "topology", "nvlink", "fabric", "infiniband", "dcgm", "xid", "system")  # panels first
MAX_ROWS = 64
_UNIT_SUFFIX = {"_c": "°C", "_w": "W", "_mib": "MiB", "_gib": "GiB", "_gbps": "GB/s", "_mhz": "MHz",
                "_pct": "%", "_s": "s", "_us": "µs", "_gts": "GT/s", "_bytes": "B", "_gflops": "GFLOPS"}


@dataclass(frozen=True)
class Table:
    """Rows of cells; ``classes`` (optional) gives a CSS class per cell for colouring."""

    columns: Sequence[str]
    rows: Sequence[Sequence[Any]]
    classes: Sequence[Sequence[str]] = ()
    caption: str = ""


@dataclass(frozen=True)
class Panel:
    title: str
    template: str
    view: Any
    note: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def attention(self) -> bool:
        """True when a cell is marked ``bad``: the report opens such panels by default."""
        classes = getattr(self.view, "classes", ()) or ()
        return any("bad" in c for row in classes for c in row)


Renderer = Callable[[Any], "Panel | None"]
PANELS: dict[str, Renderer] = {}


def panel(probe: str) -> Callable[[Renderer], Renderer]:
    """Register the renderer of ``probe``'s observations (a duplicate name raises)."""
    def deco(fn: Renderer) -> Renderer:
        if probe in PANELS:
            raise KeyError(f"panel for {probe!r} registered twice")
        PANELS[probe] = fn
        return fn
    return deco


@functools.lru_cache(maxsize=1024)  # field names repeat on every host and record
def header(key: str) -> str:
    """``temp_c`` -> ``temp (°C)``: the unit suffix of a field name becomes a readable unit."""
    for suffix, unit in _UNIT_SUFFIX.items():
        if key.endswith(suffix) and len(key) > len(suffix):
            return f"{key[: -len(suffix)].replace('_', ' ')} ({unit})"
    return key.replace("_", " ")


def cell(value: Any) -> Any:
    """A table cell: scalars as they are, short lists joined, anything else as compact JSON."""
    if value is None or isinstance(value, str | int | float | bool):
        return "" if value is None else value
    if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value) and len(value) <= 8:
        return ", ".join(str(v) for v in value)
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 120 else text[:119] + "…"


def flatten(record: Mapping[str, Any], prefix: str = "", depth: int = 1) -> dict[str, Any]:
    """Nested dicts one level deep as ``outer_inner`` keys; lists of records are skipped."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and depth > 0:
            out.update(flatten(value, f"{name}_", depth - 1))
        elif not (isinstance(value, list) and value and isinstance(value[0], Mapping)):
            out[name] = value
    return out


def record_table(records: Iterable[Mapping[str, Any]], preferred: Sequence[str] = (),
                 caption: str = "") -> Table | None:
    """A table of records: preferred columns first (those present), then others up to the cap."""
    flat = [flatten(r) for r in records if isinstance(r, Mapping)][:MAX_ROWS]
    if not flat:
        return None
    present: dict[str, None] = {}
    for rec in flat:
        for key, value in rec.items():
            if value not in (None, "", "N/A"):
                present.setdefault(key)
    keys = [k for p in preferred for k in present if k == p or k.startswith(p + "_")]
    keys = list(dict.fromkeys(keys))
    keys += [k for k in present if k not in keys]
    keys = keys[:MAX_COLUMNS]
    return Table(columns=[header(k) for k in keys], rows=[[cell(r.get(k)) for k in keys] for r in flat],
                 caption=caption)


def scalars_table(obs: Mapping[str, Any]) -> Table | None:
    """Scalar fields of an observation as a two-column key/value table."""
    rows = [[header(k), cell(v)] for k, v in flatten(obs).items() if v not in (None, "", [], {})]
    return Table(columns=["field", "value"], rows=rows[:MAX_ROWS]) if rows else None


def _records(obs: Any, *keys: str) -> list[Mapping[str, Any]]:
    """The first list of records under ``keys`` (or ``obs`` itself when it is such a list)."""
    if isinstance(obs, list):
        return [r for r in obs if isinstance(r, Mapping)]
    if isinstance(obs, Mapping):
        for key in keys:
            value = obs.get(key)
            if isinstance(value, list) and any(isinstance(r, Mapping) for r in value):
                return [r for r in value if isinstance(r, Mapping)]
    return []


def generic_panel(probe: str, obs: Any) -> Panel | None:
    """Any probe without a renderer: its record lists as tables, else its scalar fields."""
    records = _records(obs, *(obs.keys() if isinstance(obs, Mapping) else ()))
    table = record_table(records) if records else (scalars_table(obs) if isinstance(obs, Mapping) else None)
    return Panel(title=probe, template="panels/table.html.j2", view=table) if table else None
