"""What changed in the hardware between two runs: swapped GPUs and HCAs, firmware, moved or lost GPUs, drivers.

    changes = diff_assets(*(load_results(run, observations=("assets",)) for run in (run_a, run_b)))
    [c.line() for c in changes]
    # ['gpu007 gpu.swapped 0000:4C:00.0: serial 1652323004112 -> 1652323009999', ...]

Both runs' ``assets`` observations (``probes/assets.py``) are compared per host by
``probes.asset_changes``; hosts present in one run only are ``host.added``/``host.missing``.
Pure apart from the caller's loading.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from healthcheck.probes.asset_changes import AssetChange, host_changes, swapped_parts
from healthcheck.store.results import RunResults


def diff_assets(before: RunResults, after: RunResults) -> list[AssetChange]:
    """Per host, what changed from run ``before`` to run ``after`` (hosts without assets are skipped)."""
    out: list[AssetChange] = []
    for host in sorted(set(before.hosts) | set(after.hosts)):
        if host not in after.hosts:
            out.append(AssetChange(host, "host.missing", "node", "host", host, None))
        elif host not in before.hosts:
            out.append(AssetChange(host, "host.added", "node", "host", None, host))
        else:
            was = before.hosts[host].observations.get("assets")
            now = after.hosts[host].observations.get("assets")
            if isinstance(was, Mapping) and isinstance(now, Mapping):
                out += host_changes(host, was, now)
    return out


def stale_counter_keys(changes: Iterable[AssetChange], assets_now: Mapping[str, Mapping[str, Any]],
                       keys: Iterable[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
    """History counter keys (host, metric, component) that belong to a swapped part: ``gpu<index>``
    (the index of the new part's bus id in this run) or ``<hca>``/``<hca>/<port>``."""
    parts: dict[str, set[str]] = {}
    for c in changes:
        buses, hcas = swapped_parts([c])
        gpus = [g.get("bus_id") for g in (assets_now.get(c.host) or {}).get("gpus") or ()]
        parts.setdefault(c.host, set()).update({f"gpu{gpus.index(b)}" for b in buses if b in gpus} | hcas)
    return {k for k in keys if any(k[2] == p or k[2].startswith(f"{p}/") or k[2].startswith(f"{p} ")
                                   for p in parts.get(k[0], ()))}
