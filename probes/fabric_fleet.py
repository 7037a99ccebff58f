"""Fabric counters with no public threshold, graded against the fleet: a port far above its peers.

    check = FabricCounterOutliers()
    check.evaluate_fleet({"gpu007": {"rates": {"uptime_s": 43200, "counters": {"eth": {...}}}}, ...}, hosts, profiles)
    # -> Finding(host="gpu007", check="fleet.fabric_counter.eth.tx_prio3_pause", component="mlx5_1 ens2f0np0",
    #            status=WARN, message="... 3,416,700/h since boot, 20,098x the fleet median 170/h ...")

Congestion and transport counters (PFC pause frames, CNPs, ECN marks, out-of-sequence packets, discards:
the ``fabric_counters.CATALOG`` entries graded ``fleet``) have no vendor number that separates a fault
from a busy fabric.
Every port of every host of one profile is compared by its rate since boot (the rates probe's counters
over the node's uptime; the drivers' counters start at load): a port above ``fabric_outlier_factor``
times the fleet median of that counter, with at least ``fabric_outlier_min_count`` events, is WARN,
named with the counter's meaning and remedy. Hosts whose ports were compared and none stood out get one
``fleet.fabric_counters`` PASS. Rates between two collections and around a benchmark are not this
check's: a node's counters since boot include every job it ran.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import Finding, Host, Status
from healthcheck.core.profiles import Profile
from healthcheck.probes import register_fleet
from healthcheck.probes.fabric_counters import fleet_graded, info

FAMILIES = ("ib", "ib_hw", "eth")
SOURCE = {"ib": "ib-sysfs", "ib_hw": "ib-sysfs", "eth": "ethtool-stats"}
Key = tuple[str, str]  # family, counter


def host_rates(observation: Any) -> dict[Key, dict[str, tuple[float, int]]] | None:
    """(family, counter) -> port -> (events per hour since boot, events) of the fleet-graded counters, from
    one host's ``rates`` observation (JSON form); None without an uptime."""
    if not isinstance(observation, Mapping):
        return None
    uptime, counters = observation.get("uptime_s"), observation.get("counters")
    if not isinstance(uptime, int | float) or isinstance(uptime, bool) or uptime <= 0 or \
            not isinstance(counters, Mapping):
        return None
    hours = uptime / 3600
    out: dict[Key, dict[str, tuple[float, int]]] = {}
    for family in FAMILIES:
        ports = counters.get(family)
        for port, values in (ports.items() if isinstance(ports, Mapping) else ()):
            for counter, value in (values.items() if isinstance(values, Mapping) else ()):
                if type(value) is int and value >= 0 and fleet_graded(family, counter):
                    out.setdefault((family, counter), {})[str(port)] = (value / hours, value)
    return out


@dataclass(frozen=True)
class FabricCounterOutliers:
    name: str = "fleet.fabric_counters"
    reads: tuple[str, ...] = ("rates",)  # from the store: results.json keeps only a probe's top-level scalars

    def keep(self, probe: str, observation: Any) -> Any:
        """Of a host's ``rates``, the uptime and the fabric families' counters (not NVLink's or the GPUs')."""
        if not isinstance(observation, Mapping) or not isinstance(observation.get("counters"), Mapping):
            return None
        counters = observation["counters"]
        return {"uptime_s": observation.get("uptime_s"),
                "counters": {family: counters[family] for family in FAMILIES if family in counters}}

    def evaluate_fleet(self, observations: Mapping[str, Mapping[str, Any]], hosts: Mapping[str, Host],
                       profiles: Mapping[str, Profile]) -> list[Finding]:
        groups: dict[str, dict[str, dict[Key, dict[str, tuple[float, int]]]]] = {}
        for name, obs in observations.items():
            host = hosts.get(name)
            rates = host_rates(obs.get("rates")) if host is not None and host.profile else None
            if rates:
                groups.setdefault(host.profile, {})[name] = rates
        findings: list[Finding] = []
        for profile_name, by_host in sorted(groups.items()):
            if len(by_host) >= DEFAULTS.fabric_fleet_min_hosts:
                findings += compare_group(profile_name, by_host)
        return findings


def compare_group(profile_name: str, by_host: Mapping[str, Mapping[Key, Mapping[str, tuple[float, int]]]]
                  ) -> list[Finding]:
    """WARN per port above the factor times its counter's fleet median; one PASS per host otherwise."""
    keys = sorted({key for rates in by_host.values() for key in rates})
    out: list[Finding] = []
    flagged: set[str] = set()
    for key in keys:
        ports = {(host, port): value for host, rates in by_host.items() for port, value in rates.get(key, {}).items()}
        median = statistics.median(rate for rate, _ in ports.values())
        limit = DEFAULTS.fabric_outlier_factor * median
        for (host, port), (rate, count) in sorted(ports.items()):
            if rate > limit and count >= DEFAULTS.fabric_outlier_min_count:
                flagged.add(host)
                out.append(_outlier(host, port, key, rate, count, median, len(ports), len(by_host), profile_name))
    for host, rates in sorted(by_host.items()):
        if host not in flagged:
            compared = sum(len(ports) for ports in rates.values())
            out.append(Finding(host=host, check="fleet.fabric_counters", status=Status.PASS, value=compared,
                               source="counter-clock",
                               message=f"{compared} congestion/transport counters of its ports within "
                                       f"{DEFAULTS.fabric_outlier_factor:g}x the median of {len(by_host)} hosts of "
                                       f"profile {profile_name} (rates since boot)"))
    return out


def _outlier(host: str, port: str, key: Key, rate: float, count: int, median: float, ports: int, hosts: int,
             profile_name: str) -> Finding:
    family, counter = key
    entry = info(family, counter)
    unit = entry.unit if entry else "events"
    times = f"{rate / median:,.0f}x the fleet median {median:,.1f}/h" if median > 0 else \
        "where the fleet median is 0/h"
    return Finding(host=host, check=f"fleet.fabric_counter.{family}.{counter}", component=port, status=Status.WARN,
                   value=round(rate, 1), unit=f"{unit}/h", source=SOURCE[family],
                   expected=f"<= {DEFAULTS.fabric_outlier_factor:g}x the fleet median ({median:,.1f}/h)",
                   message=f"{port}: {counter} {rate:,.0f} {unit}/h since boot ({count:,} in all), {times} of "
                           f"{ports} ports on {hosts} hosts of profile {profile_name}"
                           + (f": {entry.meaning}" if entry else ""),
                   remedy=entry.remedy if entry else None)


CHECK = register_fleet(FabricCounterOutliers())
