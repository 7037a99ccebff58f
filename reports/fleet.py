"""Fleet views: version consistency across hosts (majority vs outliers).

    rows = version_rows(digest.results.hosts.values())
    rows[0].field, rows[0].majority, rows[0].outliers   # "gpu.driver_version", "550.54.15", {...}

Version-like fields are found by name in every probe's observations (``*_version``, ``version``,
``kernel``, ``firmware``, ``fw_ver``...), at the top level and in record lists (``gpus``, ``hcas``),
so a new probe's versions appear here without code.
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from healthcheck.reports.digest import fold

from healthcheck.grading import majority
from healthcheck.results import HostResult

_VERSION_KEY = re.compile(r"(^|_)(version|kernel|firmware|fw_ver|fw_version|vbios|os_pretty_name)$")
MAX_VALUES = 6


@dataclass(frozen=True)
class VersionRow:
    field: str
    majority: str
    majority_hosts: int
    outliers: tuple[tuple[str, str], ...]  # (value, folded hosts) per differing value
    missing: str = ""                       # hosts without the field (folded)

    @property
    def consistent(self) -> bool:
        return not self.outliers


@functools.cache
def _is_version_key(key: str) -> bool:
    return bool(_VERSION_KEY.search(key))


def _values(obs: Any) -> dict[str, set[str]]:
    """Version-like fields of one observation: field -> distinct values (records merged)."""
    out: dict[str, set[str]] = defaultdict(set)
    if not isinstance(obs, Mapping):
        return out
    for key, value in obs.items():
        if isinstance(value, list):
            for rec in value:
                if isinstance(rec, Mapping):
                    for k, v in rec.items():
                        if _is_version_key(k) and isinstance(v, str | int | float):
                            out[f"{key}.{k}"].add(str(v))
        elif _is_version_key(key) and isinstance(value, str | int | float) and not isinstance(value, bool):
            out[key].add(str(value))
    return out


def version_rows(hosts: Iterable[HostResult]) -> list[VersionRow]:
    """One row per version-like field seen on any host, inconsistent fields first."""
    per_field: dict[str, dict[str, str]] = defaultdict(dict)
    names: list[str] = []
    for host in hosts:
        names.append(host.name)
        for probe, obs in host.observations.items():
            for key, values in _values(obs).items():
                if values - {"", "N/A", "None"}:
                    per_field[f"{probe}.{key}"][host.name] = ", ".join(sorted(values))
    rows = []
    for name, by_host in per_field.items():
        top, differing = majority(by_host)
        grouped: dict[str, list[str]] = defaultdict(list)
        for host, value in differing.items():
            grouped[str(value)].append(host)
        outliers = tuple(sorted(((v, fold(hs)) for v, hs in grouped.items()),
                                key=lambda vh: (-len(grouped[vh[0]]), vh[0])))[:MAX_VALUES]
        missing = fold(h for h in names if h not in by_host)
        rows.append(VersionRow(field=name, majority=str(top), majority_hosts=len(by_host) - len(differing),
                               outliers=outliers, missing=missing))
    return sorted(rows, key=lambda r: (r.consistent, r.field))
