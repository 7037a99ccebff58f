"""Fleet views: version consistency across hosts (majority vs outliers).

    rows = version_rows(digest.results.hosts.values())
    rows[0].field, rows[0].majority, rows[0].outliers   # "gpu.driver_version", "550.54.15", {...}

Version-like fields are found by name in every probe's observations (``*_version``, ``version``,
``kernel``, ``firmware``, ``fw_ver``...), at the top level and in record lists (``gpus``, ``hcas``),
so a new probe's versions appear here without code.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from healthcheck.core.grading import majority
from healthcheck.reports.digest import fold
from healthcheck.store.results import HostResult

_VERSION_KEY = re.compile(r"(^|_)(version|kernel|firmware|fw_ver|fw_version|vbios|os_pretty_name)$")
MAX_VALUES = 6
_NOT_REPORTED = frozenset(("", "N/A", "None"))


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


_KEYS_MAX = 4096  # distinct key sets remembered (a probe's records share one; node output could vary it endlessly)
_VERSION_KEYS: dict[tuple, tuple[str, ...]] = {}


def _version_keys(keys: tuple) -> tuple[str, ...]:
    """The version-like names among one record's ``keys``; records of a kind share their key set, so the
    regex runs once per key set instead of once per field of every record of every host."""
    found = _VERSION_KEYS.get(keys)
    if found is None:
        if len(_VERSION_KEYS) >= _KEYS_MAX:
            _VERSION_KEYS.clear()
        found = _VERSION_KEYS[keys] = tuple(k for k in keys if isinstance(k, str) and _VERSION_KEY.search(k))
    return found


def _values(obs: Any) -> dict[str, set[str]]:
    """Version-like fields of one observation: field -> distinct values (records merged)."""
    out: dict[str, set[str]] = defaultdict(set)
    if type(obs) is not dict and not isinstance(obs, Mapping):  # the exact type first: the ABC check is slow
        return out
    for key, value in obs.items():
        if isinstance(value, list):
            for rec in value:
                if type(rec) is dict or isinstance(rec, Mapping):
                    for k in _version_keys(tuple(rec)):
                        v = rec[k]
                        if isinstance(v, str | int | float):
                            out[f"{key}.{k}"].add(str(v))
    for key in _version_keys(tuple(obs)):  # a list under a version-like name was read as records above
        value = obs[key]
        if isinstance(value, str | int | float) and not isinstance(value, bool):
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
                if not values <= _NOT_REPORTED:
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
