"""The fleet a drain counts and acts on: what the inventory or the scheduler knows, never what a run claims.

    fleet = fleet_of(inventory_hosts, node_names, scheduler_nodes)   # inventory first, else the scheduler
    fleet.known("gpu007"), fleet.size, fleet.where                   # True, 40, "inventory site.yaml"
    known, unknown = fleet.split(results.hosts)

A run's hosts come from wherever its bundles came from: a merged spool holds whatever folders its nodes
wrote (docs/security.md). The circuit breaker's limit is a fraction of the fleet, so the fleet must be
one no node can grow: the inventory's hosts (``-i``), else the nodes the scheduler lists. A host of the
run that neither knows is unknown: reported, never counted, never drained or resumed. Only when neither
could be read does the run stand in for the fleet, and ``--apply`` refuses then anyway (the scheduler's
state is unread).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Fleet:
    """``hosts``: inventory host names (an inventory fleet); ``nodes``: the scheduler's node names (a
    scheduler fleet); ``node_names``: host -> scheduler node name; ``where`` says which it is."""

    where: str
    hosts: frozenset[str] | None = None
    nodes: frozenset[str] | None = None
    node_names: Mapping[str, str] = field(default_factory=dict)

    def node(self, host: str) -> str:
        return self.node_names.get(host, host)

    def known(self, host: str) -> bool:
        if self.hosts is not None:
            return host in self.hosts
        if self.nodes is not None:
            return self.node(host) in self.nodes
        return True

    def split(self, hosts: Iterable[str]) -> tuple[list[str], list[str]]:
        """(known, unknown) of ``hosts``, each sorted."""
        listed = sorted(hosts)
        return [h for h in listed if self.known(h)], [h for h in listed if not self.known(h)]

    def size(self, run_hosts: Collection[str]) -> int:
        if self.hosts is not None:
            return len(self.hosts)
        if self.nodes is not None:
            return len(self.nodes)
        return len(run_hosts)

    def scheduler_nodes(self, out_of_service: Collection[str]) -> list[str]:
        """Of the scheduler's out-of-service nodes, those in this fleet (an inventory fleet ignores nodes
        of other partitions or clusters, which its size does not count either)."""
        if self.hosts is None:
            return sorted(out_of_service)
        mine = {self.node(h) for h in self.hosts}
        return sorted(n for n in out_of_service if n in mine)


def fleet_of(inventory_hosts: Collection[str] | None, node_names: Mapping[str, str],
             scheduler_nodes: Collection[str] | None, inventory: str = "") -> Fleet:
    """The inventory's fleet when there is an inventory, else the scheduler's, else (neither) the run's."""
    if inventory_hosts is not None:
        return Fleet(f"inventory {inventory}".strip(), hosts=frozenset(inventory_hosts), node_names=node_names)
    if scheduler_nodes is not None:
        return Fleet("the scheduler's node list", nodes=frozenset(scheduler_nodes), node_names=node_names)
    return Fleet("the run's hosts (no inventory, scheduler unread)", node_names=node_names)
