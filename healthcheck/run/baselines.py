"""Counter baselines for growth checks: the previous run's observations of a host, minus swapped parts.

    previous, changes = reset_swapped(previous_observations, current_assets(collection.results), "gpu007")

A GPU or HCA replaced since the previous run starts a fresh baseline: its new counters are not
growth. The parts are told apart by ``probes.asset_changes`` from the host's ``assets`` outputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from healthcheck.probes.asset_changes import AssetChange, host_changes, swapped_parts
from healthcheck.probes.assets import parse_assets
from healthcheck.store.jsoncodec import to_jsonable


def reset_swapped(previous: Mapping[str, Any], current_assets: Mapping[str, Any] | None,
                  host: str = "") -> tuple[dict[str, Any], list[AssetChange]]:
    """The previous run's observations of a host without the GPUs and HCAs that were swapped since, so
    a new part's counters are a fresh baseline instead of a huge growth. Returns (observations, changes)."""
    before = previous.get("assets")
    if not isinstance(before, Mapping) or not isinstance(current_assets, Mapping):
        return dict(previous), []
    changes = host_changes(host, before, current_assets)
    buses, hcas = swapped_parts(changes)
    if not buses and not hcas:
        return dict(previous), changes
    out = dict(previous)
    gpu = out.get("gpu")
    if isinstance(gpu, Mapping) and buses:
        out["gpu"] = {**gpu, "gpus": [g for g in gpu.get("gpus") or () if not (isinstance(g, Mapping)
                                                                            and g.get("bus_id") in buses)]}
    ib = out.get("infiniband")
    if isinstance(ib, Mapping) and hcas:
        out["infiniband"] = {**ib, "devices": [d for d in ib.get("devices") or () if not (isinstance(d, Mapping)
                                                                                     and d.get("name") in hcas)]}
    return out, changes


def current_assets(results: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``assets`` observation (JSON form) parsed from one host's raw outputs, None when unreadable."""

    try:
        return to_jsonable(parse_assets(results))
    except Exception:  # any unreadable output just means no baseline reset
        return None
