"""What the fleet checks and the reports' fleet views compare of one host's stored observations, taken while
that host's observations are whole in memory (a grading worker, a live sweep), so the fleet stage reads
nothing back from the store.

    compared = fleet_inputs(observations)   # {"fleet.roce": {"infiniband": {"roce": {...}}}, ...}
    HostResult(..., compared=compared)       # held until the fleet stage (run.post.fleet_stage) uses it

A reader's part of a host is what its ``keep`` keeps of each probe it ``reads`` (``core.spec.FleetCheck``;
a view of ``reports.fleet_views``, such as the fabric heat list, the same), from that probe's JSON form
(``jsoncodec.plain``: exactly what the observation store gives back). A host without it (a merge's node
grading taken as it was, a host whose observations were amended after grading) is read from the store
instead, with the same result.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from healthcheck import probes as probe_registry
from healthcheck import reports
from healthcheck.store.jsoncodec import plain


def fleet_readers() -> list[Any]:
    """The fleet checks, then the reports' fleet views: everything the fleet stage gives stored probes."""
    return [*probe_registry.fleet_checks(), *reports.fleet_views()]


def read_probes() -> frozenset[str]:
    """Every probe some fleet check or view reads from the store."""
    return frozenset(p for reader in fleet_readers() for p in getattr(reader, "reads", ()))


def kept(reader: Any, probe: str, observation: Any) -> Any:
    """What ``reader`` compares of one host's ``probe`` observations (JSON form): its ``keep``, else all of them."""
    keep = getattr(reader, "keep", None)
    return observation if keep is None else keep(probe, observation)


def fleet_inputs(observations: Mapping[str, Any]) -> dict[str, dict[str, Any]] | None:
    """{reader name: {probe: kept}} of one host's observations (records or JSON), for each check or view
    that reads a probe the host has; each probe made plain once for all that read it. None when a ``keep``
    fails here: the fleet stage then reads the host from the store, and fails there as a stage."""
    out: dict[str, dict[str, Any]] = {}
    made: dict[str, Any] = {}
    try:
        for reader in fleet_readers():
            for probe in getattr(reader, "reads", ()):
                if probe in observations:
                    if probe not in made:
                        made[probe] = plain(observations[probe])
                    out.setdefault(reader.name, {})[probe] = kept(reader, probe, made[probe])
    except Exception:  # a fleet check's bug is the fleet stage's ERROR on every host, not this host's grading's
        return None
    return out
