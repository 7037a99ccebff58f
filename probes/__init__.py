"""The probe registry: every built-in probe is listed here explicitly.

    from healthcheck import probes
    probes.get("gpu").commands({})      # {'nvidia-smi-q-x': 'nvidia-smi -q -x'}
    probes.select(["gpu", "xid"])       # unknown names raise RegistryError

A probe module calls ``register(ProbeSpec(...))`` at import; a duplicate name raises.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from healthcheck.spec import FleetCheck, Probe


class RegistryError(KeyError):
    """Duplicate or unknown probe name."""


_PROBES: dict[str, Probe] = {}
_FLEET: dict[str, FleetCheck] = {}

# Built-in probe modules, in the order their findings are reported.
BUILTIN = (
    "healthcheck.probes.system",
    "healthcheck.probes.gpu",
    "healthcheck.probes.topology",
    "healthcheck.probes.nvlink",
    "healthcheck.probes.fabric",
    "healthcheck.probes.xid",
    "healthcheck.probes.infiniband",
    "healthcheck.probes.dcgm",
    "healthcheck.probes.dcgm_fields",
    "healthcheck.probes.ras",
    "healthcheck.probes.resources",
    "healthcheck.probes.versions",
    "healthcheck.probes.assets",
    "healthcheck.probes.fleet",
)


def register(probe: Probe) -> Probe:
    if probe.name in _PROBES:
        raise RegistryError(f"probe {probe.name!r} registered twice")
    _PROBES[probe.name] = probe
    return probe


def register_fleet(check: FleetCheck) -> FleetCheck:
    if check.name in _FLEET:
        raise RegistryError(f"fleet check {check.name!r} registered twice")
    _FLEET[check.name] = check
    return check


def _load_builtins() -> None:
    for module in BUILTIN:
        importlib.import_module(module)


def all_probes() -> list[Probe]:
    _load_builtins()
    return list(_PROBES.values())


def fleet_checks() -> list[FleetCheck]:
    _load_builtins()
    return list(_FLEET.values())


def get(name: str) -> Probe:
    _load_builtins()
    try:
        return _PROBES[name]
    except KeyError:
        raise RegistryError(f"unknown probe {name!r} (known: {', '.join(sorted(_PROBES))})") from None


def select(names: Iterable[str] | None = None, skip: Iterable[str] = ()) -> list[Probe]:
    """Probes by name (all when ``names`` is None), minus ``skip``; unknown names raise."""
    probes = all_probes() if names is None else [get(n) for n in names]
    skipped = set(skip)
    for name in skipped:
        get(name)
    return [p for p in probes if p.name not in skipped]
