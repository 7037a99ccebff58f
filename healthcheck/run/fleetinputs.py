"""What the fleet checks compare of one host's stored observations, taken while that host's observations are
whole in memory (a grading worker, a live sweep), so the fleet stage reads nothing back from the store.

    compared = fleet_inputs(observations)   # {"fleet.roce": {"infiniband": {"roce": {...}}}, ...}
    HostResult(..., compared=compared)       # held until the fleet stage (run.post.fleet_stage) uses it

A check's part of a host is what its ``keep`` keeps of each probe it ``reads`` (``core.spec.FleetCheck``),
from that probe's JSON form (``jsoncodec.plain``: exactly what the observation store gives back). A host
without it (a merge's node grading taken as it was, a host whose observations were amended after grading)
is read from the store instead, with the same result.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from healthcheck import probes as probe_registry
from healthcheck.store.jsoncodec import plain


def read_probes() -> frozenset[str]:
    """Every probe some fleet check reads from the store."""
    return frozenset(p for check in probe_registry.fleet_checks() for p in getattr(check, "reads", ()))


def kept(check: Any, probe: str, observation: Any) -> Any:
    """What ``check`` compares of one host's ``probe`` observations (JSON form): its ``keep``, else all of them."""
    keep = getattr(check, "keep", None)
    return observation if keep is None else keep(probe, observation)


def fleet_inputs(observations: Mapping[str, Any]) -> dict[str, dict[str, Any]] | None:
    """{check name: {probe: kept}} of one host's observations (records or JSON), for each check that reads
    a probe the host has; each probe made plain once for all the checks that read it. None when a check's
    ``keep`` fails here: the fleet stage then reads the host from the store, and fails there as a stage."""
    out: dict[str, dict[str, Any]] = {}
    made: dict[str, Any] = {}
    try:
        for check in probe_registry.fleet_checks():
            for probe in getattr(check, "reads", ()):
                if probe in observations:
                    if probe not in made:
                        made[probe] = plain(observations[probe])
                    out.setdefault(check.name, {})[probe] = kept(check, probe, made[probe])
    except Exception:  # a fleet check's bug is the fleet stage's ERROR on every host, not this host's grading's
        return None
    return out
