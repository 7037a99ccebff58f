"""The compute trays of multi-node NVLink domains, read from each host's own fabric and IMEX observations.

    trays = trays_of(observations)                 # host -> Tray, only hosts whose GPUs joined a domain
    domains = group_domains(trays)                 # cluster UUID -> [Tray, ...]

A host speaks only for itself: its tray's domain (the cluster UUID its GPUs report), partition (clique),
rack position (``<platformInfo>``: chassis serial, slot, tray index) and what is wrong with it (GPU fabric
state/status, the R570+ health block, GPUs split across cliques, its IMEX view). A host whose GPUs report
no cluster UUID or the all-zero one (HGX H100/H200, single-node systems) has no tray here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from healthcheck.probes.fabric_health import CONDITIONS, NOT_REPORTED, SUMMARY, ZERO_UUID
from healthcheck.probes.imex import imex_summary

HEALTHY = {c.leaf: c.healthy for c in (*CONDITIONS, SUMMARY)}


@dataclass(frozen=True)
class TrayGpu:
    index: int
    clique_id: int | None
    problem: str | None = None   # what the GPU reports wrong about its fabric, None when nothing


@dataclass(frozen=True)
class Tray:
    host: str
    cluster_uuid: str
    clique_id: int | None                 # the clique most of its GPUs report
    gpus: tuple[TrayGpu, ...]
    rack: str | None = None               # chassis serial number (the rack), None when not reported
    slot: str | None = None
    tray_index: str | None = None
    problems: tuple[str, ...] = ()        # why the tray is bad (empty: healthy as far as fabric and IMEX go)

    @property
    def bad(self) -> bool:
        return bool(self.problems)


def gpu_problem(gpu: Mapping[str, Any]) -> str | None:
    """One GPU's fabric fault as it reports it (JSON form of ``fabric.GpuFabric``), or None."""
    if gpu.get("state") != "Completed":
        return f"fabric state {gpu.get('state')}"
    if gpu.get("status") != "Success":
        return f"fabric status {gpu.get('status')}"
    health = gpu.get("health") or {}
    faults = [f"{leaf.replace('_', ' ')} {value}" for leaf, value in health.items()
              if leaf in HEALTHY and value not in NOT_REPORTED and value not in HEALTHY[leaf]]
    return ", ".join(sorted(faults)) or None


def tray_of(host: str, observations: Mapping[str, Any]) -> Tray | None:
    """The tray a host describes, or None when its GPUs joined no multi-node NVLink domain."""
    fabric = observations.get("fabric")
    gpus = fabric.get("gpus") if isinstance(fabric, Mapping) else None
    if not gpus:
        return None
    uuids = Counter(g.get("cluster_uuid") for g in gpus if g.get("cluster_uuid") not in (None, ZERO_UUID))
    if not uuids:
        return None
    uuid = uuids.most_common(1)[0][0]
    cliques = Counter(g.get("clique_id") for g in gpus)
    clique = cliques.most_common(1)[0][0]
    members = tuple(TrayGpu(int(g.get("index", i)), g.get("clique_id"), gpu_problem(g)) for i, g in enumerate(gpus))
    problems = [f"gpu{g.index}: {g.problem}" for g in members if g.problem]
    if len(cliques) > 1 or len(uuids) > 1 or any(g.get("cluster_uuid") in (None, ZERO_UUID) for g in gpus):
        problems.append("GPUs split across cliques/domains: " + ", ".join(
            f"gpu{g.get('index')} clique {g.get('clique_id')} of {g.get('cluster_uuid')}" for g in gpus
            if (g.get("clique_id"), g.get("cluster_uuid")) != (clique, uuid)))
    imex = observations.get("imex")
    if isinstance(imex, Mapping) and imex_summary(imex) in ("fault", "unknown"):
        problems.append(f"IMEX domain view {imex_summary(imex)}")
    position = gpus[0].get("position") or {}
    return Tray(host=host, cluster_uuid=str(uuid), clique_id=clique, gpus=members,
                rack=position.get("chassis_serial_number"), slot=position.get("slot_number"),
                tray_index=position.get("tray_index"), problems=tuple(problems))


def trays_of(observations: Mapping[str, Mapping[str, Any]]) -> dict[str, Tray]:
    """Every host's tray, for hosts that joined a multi-node NVLink domain."""
    return {host: tray for host, obs in sorted(observations.items()) if (tray := tray_of(host, obs)) is not None}


def group_domains(trays: Mapping[str, Tray]) -> dict[str, list[Tray]]:
    """Trays by NVLink domain (cluster UUID), each list in rack position order."""
    out: dict[str, list[Tray]] = {}
    for tray in trays.values():
        out.setdefault(tray.cluster_uuid, []).append(tray)
    return {uuid: sorted(members, key=position_key) for uuid, members in sorted(out.items())}


def position_key(tray: Tray) -> tuple[str, int, str]:
    """Rack, then slot (numeric where it is a number), then host name."""
    slot = tray.slot or tray.tray_index or ""
    return (tray.rack or "", int(slot) if slot.isdigit() else 1 << 30, tray.host)


def majority(values: Sequence[Any]) -> Any:
    """The most common value (the first seen on a tie)."""
    return Counter(values).most_common(1)[0][0]
