"""The probe registry: every built-in probe is listed here explicitly.

    from healthcheck import probes
    probes.get("gpu").commands({})      # {'nvidia-smi-q-x': 'nvidia-smi -q -x'}
    probes.select(["gpu", "xid"])       # unknown names raise RegistryError

A probe module calls ``register(ProbeSpec(...))`` at import; a duplicate name raises. Probes come
back in ``BUILTIN`` order (then registration order for others), whichever module was imported first.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable

from healthcheck.core.spec import FleetCheck, Probe
from healthcheck.core.suggest import did_you_mean


class RegistryError(KeyError):
    """Duplicate or unknown probe name."""


_PROBES: dict[str, Probe] = {}
_FLEET: dict[str, FleetCheck] = {}
_MODULE: dict[str, str] = {}  # probe or fleet check name -> the module that registered it

# Built-in probe modules, in the order their findings are reported.
BUILTIN = (
    "healthcheck.probes.system",
    "healthcheck.probes.gpu",
    "healthcheck.probes.pci",
    "healthcheck.probes.topology",
    "healthcheck.probes.nvlink",
    "healthcheck.probes.fabric",
    "healthcheck.probes.imex",
    "healthcheck.probes.xid",
    "healthcheck.probes.infiniband",
    "healthcheck.probes.dcgm",
    "healthcheck.probes.dcgm_fields",
    "healthcheck.probes.ras",
    "healthcheck.probes.rates",
    "healthcheck.probes.resources",
    "healthcheck.probes.versions",
    "healthcheck.probes.assets",
    "healthcheck.probes.fleet",
    "healthcheck.probes.nvl_domain",
    "healthcheck.probes.fabric_fleet",
    "healthcheck.probes.roce_fleet",
)


def register(probe: Probe) -> Probe:
    if probe.name in _PROBES:
        raise RegistryError(f"probe {probe.name!r} registered twice")
    _PROBES[probe.name] = probe
    _MODULE[f"probe:{probe.name}"] = sys._getframe(1).f_globals.get("__name__", "")
    return probe


def register_fleet(check: FleetCheck) -> FleetCheck:
    if check.name in _FLEET:
        raise RegistryError(f"fleet check {check.name!r} registered twice")
    _FLEET[check.name] = check
    _MODULE[f"fleet:{check.name}"] = sys._getframe(1).f_globals.get("__name__", "")
    return check


def _in_report_order(kind: str, registered: dict[str, Probe] | dict[str, FleetCheck]) -> list:
    """``registered`` in ``BUILTIN`` module order (a test importing one probe module first must not
    reorder the findings), then the others in registration order."""
    rank = {module: i for i, module in enumerate(BUILTIN)}
    order = {name: i for i, name in enumerate(registered)}
    names = sorted(registered, key=lambda n: (rank.get(_MODULE.get(f"{kind}:{n}", ""), len(BUILTIN)), order[n]))
    return [registered[n] for n in names]


def _load_builtins() -> None:
    for module in BUILTIN:
        importlib.import_module(module)


def all_probes() -> list[Probe]:
    _load_builtins()
    return _in_report_order("probe", _PROBES)


def fleet_checks() -> list[FleetCheck]:
    _load_builtins()
    return _in_report_order("fleet", _FLEET)


def get(name: str) -> Probe:
    _load_builtins()
    try:
        return _PROBES[name]
    except KeyError:
        raise RegistryError(f"unknown probe {name!r}{did_you_mean(name, _PROBES)} "
                            f"(known: {', '.join(sorted(_PROBES))})") from None


def select(names: Iterable[str] | None = None, skip: Iterable[str] = ()) -> list[Probe]:
    """Probes by name (all when ``names`` is None), minus ``skip``; unknown names raise."""
    probes = all_probes() if names is None else [get(n) for n in names]
    skipped = set(skip)
    for name in skipped:
        get(name)
    return [p for p in probes if p.name not in skipped]
