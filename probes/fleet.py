"""Fleet consistency: versions and firmware that differ from the majority of hosts of the same profile.

    check = VersionConsistency()
    check.evaluate_fleet({"gpu001": {"versions": {...}, "system": {...}}, ...}, hosts, profiles)
    # -> Finding(host="gpu007", check="fleet.version.driver", status=WARN, value="550.54.15",
    #            expected="550.90.07", message="driver 550.54.15 differs from the majority 550.90.07 ...")

Compared per profile: driver, CUDA, NCCL, OFED, VBIOS, HCA firmware per HCA type (from ``probes/versions.py``)
and kernel and OS (from ``probes/system.py``). A differing host is WARN, or FAIL when the profile pins that
version (``version.driver``, ``system.kernel``, ...) and the host is off that pin; a host ON the pin is
never failed for differing from peers that are off it (PASS, naming the majority). With no strict
majority every host is WARN (FAIL for those off a pin). Version
mismatches across nodes are a classic cause of cryptic failures at scale (NCCL hangs, driver/library skew).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from healthcheck.core.grading import expected_text, majority
from healthcheck.core.model import Finding, Host, JSONScalar, Status
from healthcheck.core.profiles import EMPTY_PROFILE, Expectation, Profile
from healthcheck.probes import register_fleet
from healthcheck.probes.versions import GPU_ID, IB_ID, PINNED_BY, grade_version, version_facts, with_legacy_pins

SOURCES = {"driver": "nvidia-driver-version", "cuda": GPU_ID, "nccl": "nccl-libs", "ofed": "ofed-info",
           "vbios": GPU_ID, "hca_fw": IB_ID, "kernel": "uname-r", "os": "os-release"}
PINS = {**PINNED_BY, "kernel": "system.kernel", "os": "system.os"}
_REMEDY = ("Bring this host to the version the rest of its fleet runs (or pin the intended version in the "
           "profile and upgrade the others): mixed versions cause hangs and errors that only show at scale")


def host_facts(observations: Mapping[str, Any]) -> dict[str, str]:
    """kind -> value for one host, from its ``versions`` and ``system`` observations (JSON form)."""
    versions, system = observations.get("versions"), observations.get("system")
    facts = version_facts(versions) if isinstance(versions, Mapping) else {}
    system = system if isinstance(system, Mapping) else {}
    for kind, key in (("kernel", "kernel"), ("os", "os_pretty_name")):
        if system.get(key):
            facts[kind] = str(system[key])
    return facts


@dataclass(frozen=True)
class VersionConsistency:
    name: str = "fleet.versions"
    min_hosts: int = 2

    def evaluate_fleet(self, observations: Mapping[str, Mapping[str, Any]], hosts: Mapping[str, Host],
                       profiles: Mapping[str, Profile]) -> list[Finding]:
        groups: dict[str, dict[str, dict[str, str]]] = {}
        for name, obs in observations.items():
            host = hosts.get(name)
            if host is None or not host.profile:
                continue
            groups.setdefault(host.profile, {})[name] = host_facts(obs)
        findings: list[Finding] = []
        for profile_name, facts in sorted(groups.items()):
            profile = profiles.get(profile_name, EMPTY_PROFILE)
            kinds = sorted({k for f in facts.values() for k in f})
            for kind in kinds:
                values = {h: f[kind] for h, f in facts.items() if kind in f}
                if len(values) >= self.min_hosts:
                    findings += compare_kind(kind, values, profile, profile_name)
        return findings


def compare_kind(kind: str, values: Mapping[str, JSONScalar], profile: Profile,
                 profile_name: str) -> list[Finding]:
    """Findings for one version kind across the hosts of one profile (one finding per host)."""
    base, _, component = kind.partition(" ")
    check, source = f"fleet.version.{base}", SOURCES.get(base, "versions")
    label = f"{component} {base.replace('_', ' ')}" if component else base.replace("_", " ")
    top, differing = majority(values)
    agreeing = sorted(h for h in values if h not in differing)
    strict = len(agreeing) * 2 > len(values)
    pin = with_legacy_pins(profile).expect(PINS.get(base, ""))
    out = []
    for host, value in sorted(values.items()):
        common = dict(host=host, check=check, component=component or "node", value=value, source=source)
        odd = not strict or host in differing
        # A pinned kind: a host off the pin is FAIL (the pin's severity); a host ON the pin is never
        # failed for differing from peers that are off it (they get the FAIL, here and in version.*).
        status, pin_note = Status.WARN, ""
        if pin is not None and odd:
            if not meets_pin(pin, str(value), profile):
                status = Status(pin.severity)
                pin_note = f"; off the profile pin ({expected_text(pin)}, source: {pin.source})"
            elif strict and not meets_pin(pin, str(top), profile):
                out.append(Finding(**common, status=Status.PASS, expected=expected_text(pin),
                                   message=f"{label} {value} is the version the profile pins; the majority of "
                                           f"profile {profile_name} runs {top}, off the pin"))
                continue
            else:
                pin_note = f"; within the profile pin ({expected_text(pin)}), but mixed versions still skew"
        if not strict:
            spread = _spread(values)
            out.append(Finding(**common, status=status, expected="one version across the fleet",
                               message=f"{label}: hosts of profile {profile_name} disagree with no majority "
                                       f"({spread}){pin_note}", remedy=_REMEDY))
        elif host in differing:
            out.append(Finding(**common, status=status, expected=top,
                               message=f"{label} {value} differs from the fleet majority {top} "
                                       f"({len(agreeing)} of {len(values)} hosts of profile {profile_name}; "
                                       f"differing: {_named(differing)}){pin_note}",
                               remedy=_REMEDY))
        else:
            out.append(Finding(**common, status=Status.PASS, expected=top,
                               message=f"{label} {value} matches {len(agreeing)} of {len(values)} hosts of "
                                       f"profile {profile_name}"
                                       + (f" (consistent, but off the profile pin {expected_text(pin)}: see "
                                          f"{PINS[base]})" if pin is not None and not meets_pin(pin, str(value),
                                                                                              profile) else "")))
    return out


def meets_pin(pin: Expectation, value: str, profile: Profile) -> bool:
    """Whether ``value`` (several versions joined by "/" for VBIOS and HCA firmware) satisfies the pin,
    graded exactly as the versions probe grades it (dotted-number compare for ge/gt/le/lt)."""
    return all(grade_version("", "fleet.pin", pin, part, source="", remedy="", profile=profile).status
               is Status.PASS for part in value.split("/"))


CHECK = register_fleet(VersionConsistency())


NAMED = 8  # host names a fleet finding spells out; every host's finding names them, so more is O(hosts^2)


def _named(hosts: Iterable[str], limit: int = NAMED) -> str:
    """The first ``limit`` names, sorted, and how many more (results.json and the reports list them all)."""
    names = sorted(hosts)
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def _spread(values: Mapping[str, Any]) -> str:
    """Each version with the hosts running it, most hosts first, names bounded per version."""
    by_value: dict[str, list[str]] = {}
    for host, value in values.items():
        by_value.setdefault(str(value), []).append(host)
    ranked = sorted(by_value.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return ", ".join(f"{value} on {_named(hosts)}" for value, hosts in ranked)
