"""Where each host sits in the fabric, as the isolation planner needs it: its cell and the rails.

    layout = build_layout([("gpu001", {"leaf": "L1"}), ("gpu002", {"leaf": "L1"}), ("gpu003", {})],
                          rails=["mlx5_0:1", "mlx5_1:1"], fabric={"gpu003": "L2"})
    layout.cell("gpu003")        # "L2" (from ibnetdiscover), layout.cells() -> {"L1": [...], "L2": [...]}

A host's **cell** is the smallest part of the fabric its traffic stays inside: its NVLink domain
(inventory var ``nvlink_domain``, a GB200 NVL72 rack) and its leaf switch (var ``leaf``, else the leaf
``ibnetdiscover``/``iblinkinfo`` shows its HCAs cabled to), joined as ``<domain>/<leaf>``. A job whose
hosts share a cell crosses no uplink; a job over two cells crosses both cells' uplinks. Hosts with
neither var nor fabric entry share the cell ``""`` (no topology: no switch can be blamed). ``rails``
are the HCAs a job can be pinned to (``NCCL_IB_HCA``), from the profile's ``nccl.rails``. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from healthcheck.core.hostnames import host_name_problem


class LayoutError(ValueError):
    """A stored layout that cannot be used (a hostile or damaged bundle); the message says why."""


@dataclass(frozen=True)
class Layout:
    """The hosts one isolation runs over (in inventory order), their cells and the rails."""

    hosts: tuple[str, ...]
    cell_of: Mapping[str, str] = field(default_factory=dict)
    rails: tuple[str, ...] = ()

    def cell(self, host: str) -> str:
        return self.cell_of.get(host, "")

    def cells(self) -> dict[str, list[str]]:
        """Cell -> its hosts, cells in order of their first host."""
        out: dict[str, list[str]] = {}
        for host in self.hosts:
            out.setdefault(self.cell(host), []).append(host)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"hosts": list(self.hosts), "cells": {h: c for h, c in self.cell_of.items() if c},
                "rails": list(self.rails)}

    @classmethod
    def from_json(cls, obj: Any) -> Layout:
        """A layout read back from a bundle; anything malformed raises ``LayoutError``."""
        if not isinstance(obj, Mapping):
            raise LayoutError("the layout is not an object")
        hosts, cells, rails = obj.get("hosts"), obj.get("cells") or {}, obj.get("rails") or []
        if not isinstance(hosts, list) or not all(isinstance(h, str) and host_name_problem(h) is None for h in hosts):
            raise LayoutError("layout.hosts is not a list of host names")
        if len(set(hosts)) != len(hosts):
            raise LayoutError("layout.hosts names a host twice")
        if not isinstance(cells, Mapping) or not all(isinstance(k, str) and isinstance(v, str) and k in hosts
                                                     for k, v in cells.items()):
            raise LayoutError("layout.cells is not a mapping of the layout's hosts to cell names")
        if not isinstance(rails, list) or not all(isinstance(r, str) and r for r in rails):
            raise LayoutError("layout.rails is not a list of HCA names")
        return cls(hosts=tuple(hosts), cell_of=dict(cells), rails=tuple(rails))


def _text(value: Any) -> str:
    return str(value).strip() if isinstance(value, str | int) and not isinstance(value, bool) else ""


def build_layout(hosts: Sequence[tuple[str, Mapping[str, Any]]], rails: Sequence[str] = (),
                 fabric: Mapping[str, str] | None = None) -> Layout:
    """A layout from each host's inventory vars (``leaf``, ``nvlink_domain``) and the leaves a fabric
    file shows (``ibfabric.host_leaves``); the inventory var wins over the fabric file."""
    fabric = fabric or {}
    cell_of: dict[str, str] = {}
    for name, host_vars in hosts:
        leaf = _text(host_vars.get("leaf")) or fabric.get(name, "")
        parts = [p for p in (_text(host_vars.get("nvlink_domain")), leaf) if p]
        if parts:
            cell_of[name] = "/".join(parts)
    return Layout(hosts=tuple(name for name, _ in hosts), cell_of=cell_of,
                  rails=tuple(dict.fromkeys(str(r) for r in rails)))
