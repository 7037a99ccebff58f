"""Host vars that refine a host's profile: ``mounts`` and ``services`` (inventory), per host.

    host = Host("gpu007", profile="h100-sxm5-8x", vars={"mounts": ["/lustre"], "services": ["slurmd"]})
    prof = host_profile(host, load_profile("h100-sxm5-8x"))
    prof.expect("system.mounts").value      # ['/lustre']  (added to the profile's own list)
    plan_key(host)                          # 'h100-sxm5-8x|mounts=/lustre|services=slurmd'

The mount probe stats those mounts and ``system.mount.present`` requires them; the systemd query
names those services and ``system.service`` requires them active. The profile keeps its name (fleet
checks and reports group by it); only its ``system.mounts``/``system.services`` lists grow, with a
source naming the host var. Hosts with the same profile and vars share one command plan.
"""

from __future__ import annotations

from dataclasses import replace

from healthcheck.core.model import Host
from healthcheck.core.profiles import Expectation, Profile

# host var -> the profile expectation it extends
EXTENDS = {"mounts": "system.mounts", "services": "system.services"}


def host_list(host: Host, var: str) -> list[str]:
    value = host.vars.get(var) if isinstance(host.vars, dict) else None
    return [str(v) for v in value] if isinstance(value, list | tuple) else []


def host_profile(host: Host, profile: Profile) -> Profile:
    """``profile`` with the host's ``mounts``/``services`` added to its lists (itself when none)."""
    extra = {var: host_list(host, var) for var in EXTENDS}
    if not any(extra.values()):
        return profile
    expectations = dict(profile.expectations)
    for var, wanted in extra.items():
        if not wanted:
            continue
        key = EXTENDS[var]
        base = expectations.get(key)
        values = [str(v) for v in (base.value or ())] if base is not None and isinstance(base.value, list) else []
        source = f"inventory host var {var} of {host.name}"
        expectations[key] = Expectation(
            key=key, op="eq", value=values + [v for v in wanted if v not in values],
            source=f"{base.source}; {source}" if base is not None else source,
            severity=base.severity if base is not None else "FAIL")
    return replace(profile, expectations=expectations)


def plan_key(host: Host) -> str:
    """The command plan a host uses: its profile name, plus its mounts/services when it has any."""
    parts = [host.profile or ""]
    parts += [f"{var}={','.join(sorted(host_list(host, var)))}" for var in EXTENDS if host_list(host, var)]
    return "|".join(parts)
