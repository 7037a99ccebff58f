"""Plans: which hosts each benchmark job runs on, and in which stage.

    pair_rounds(["n1", "n2", "n3", "n4"], rounds=3)
    # [[("n1", "n4"), ("n2", "n3")], [("n1", "n3"), ("n4", "n2")], [("n1", "n2"), ("n3", "n4")]]

Shapes: ``node`` (every node alone: NVLink all-reduce over its GPUs, single-node HPL), ``pair``
(disjoint node pairs in rounds, the circle method, so every round uses each node at most once and
no pair repeats), ``rail`` (the pairs again, one job per rail/HCA), ``cluster`` (all nodes at
once), ``domain`` (one job per NVLink domain the inventory names: nvloom, dcgmi mndiag). The isolation
plan (``benchmarks/isolate.py``) adds ``group`` (k nodes, every GPU and rail) and ``group_rail`` (k nodes,
one GPU each, pinned to one rail: the rails of a node run side by side).
Stages run in order; the runner packs the jobs of one stage into batches of disjoint hosts (host and
rail, ``Job.slots``) that run together. After the pairs, suspects are retested against a known-good
partner (``retest_pairs``), and a cluster job that included nodes the pairs proved bad is run again
without them (``cluster_rerun``), so the other nodes are graded on a run they can pass. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ClusterShell.NodeSet import NodeSet

SHAPES = ("node", "pair", "rail", "cluster", "domain")
GROUP_SHAPES = ("group", "group_rail")  # the isolation plan's, planned round by round (benchmarks/isolate.py)
# Stage order of the shapes; retests (pairs against a known-good partner) come after all pairs, the
# cluster job without the nodes they proved bad after the cluster job.
_STAGE_BASE = {"node": 0, "pair": 100, "rail": 500, "isolate": 700, "retest": 900, "cluster": 1000, "rerun": 1100,
               "domain": 1200}


@dataclass(frozen=True)
class Job:
    """One launch of one benchmark test on a set of hosts.

    ``job_id`` is stable and filename-safe (it names ``raw/_jobs/<job_id>.out``); ``retest_of``
    names the failed pair job a retest checks, or the cluster job a rerun repeats without the
    ``excluded`` nodes; ``rail`` is the HCA a per-rail job is pinned to.
    """

    job_id: str
    benchmark: str
    test: str
    shape: str
    hosts: tuple[str, ...]
    ranks_per_host: int
    stage: int = 0
    rail: str | None = None
    retest_of: str | None = None
    timeout_s: float = 1800.0
    excluded: tuple[str, ...] = ()

    @property
    def ranks(self) -> int:
        return self.ranks_per_host * len(self.hosts)

    @property
    def component(self) -> str:
        """How findings name this job: ``node``, ``pair a-b``, ``retest pair a-b``, ``rail mlx5_0 a-b``,
        ``cluster (N nodes)``, ``cluster (3 nodes, without c)``, ``group gpu[001-008]``,
        ``rail mlx5_0:1 group gpu[001,009]``."""
        if self.shape == "node":
            return "node"
        if self.shape == "domain":
            return f"domain ({len(self.hosts)} nodes)"
        if self.shape == "cluster":
            without = ", ".join(self.excluded) if len(self.excluded) <= 3 else f"{len(self.excluded)} blamed nodes"
            return f"cluster ({len(self.hosts)} nodes{f', without {without}' if self.excluded else ''})"
        if self.shape in GROUP_SHAPES:
            group = f"group {NodeSet.fromlist(self.hosts)}"
            return f"rail {self.rail} {group}" if self.rail else group
        pair = "-".join(self.hosts)
        where = f"rail {self.rail} {pair}" if self.rail else f"pair {pair}"
        return f"retest {where}" if self.retest_of else where

    @property
    def slots(self) -> tuple[tuple[str, str | None], ...]:
        """What the job occupies while it runs: (host, rail) for a one-GPU ``group_rail`` job, else (host,
        None), the whole host. Two jobs can run together when no host of one is whole in the other and
        they share no (host, rail)."""
        rail = self.rail if self.shape == "group_rail" else None
        return tuple((h, rail) for h in self.hosts)

    @property
    def prefix(self) -> str:
        """Message prefix naming the job's hosts: empty for a single-node job, ``pair a-b: `` else."""
        return "" if self.shape == "node" else f"{self.component}: "

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["hosts"] = list(self.hosts)
        if self.excluded:  # only a cluster rerun has it: other jobs' records stay as they were
            out["excluded"] = list(self.excluded)
        else:
            del out["excluded"]
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Job:
        known = {k: obj[k] for k in cls.__dataclass_fields__ if k in obj}
        known["hosts"] = tuple(known.get("hosts", ()))
        known["excluded"] = tuple(known.get("excluded", ()))
        return cls(**known)


def per_node(hosts: Sequence[str]) -> list[tuple[str]]:
    return [(h,) for h in hosts]


def cluster(hosts: Sequence[str]) -> list[tuple[str, ...]]:
    return [tuple(hosts)] if len(hosts) >= 2 else []


def pair_rounds(hosts: Sequence[str], rounds: int) -> list[list[tuple[str, str]]]:
    """Up to ``rounds`` rounds of disjoint pairs (circle method); an odd node sits out in turn."""
    ring: list[str | None] = list(hosts)
    if len(ring) < 2:
        return []
    if len(ring) % 2:
        ring.append(None)
    n = len(ring)
    out: list[list[tuple[str, str]]] = []
    for _ in range(min(rounds, n - 1)):
        pairs = [(ring[i], ring[n - 1 - i]) for i in range(n // 2)]
        out.append([(a, b) for a, b in pairs if a is not None and b is not None])
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return out


def retest_pairs(suspects: Sequence[str], good: Sequence[str],
                 tried: Iterable[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """Stages of (suspect, known-good partner) pairs, preferring partners not tried before.

    A known-good node may serve several suspects, one per stage; a suspect with no known-good
    node left is not retested (attribution then leaves it unconfirmed).
    """
    if not good:
        return []
    seen = {frozenset(p) for p in tried}
    stages: list[list[tuple[str, str]]] = []
    for suspect in suspects:
        others = [g for g in good if g != suspect]
        candidates = [g for g in others if frozenset((suspect, g)) not in seen] or others
        if not candidates:
            continue
        for stage in stages:
            used = {h for pair in stage for h in pair}
            free = [g for g in candidates if g not in used]
            if suspect not in used and free:
                stage.append((suspect, free[0]))
                break
        else:
            stages.append([(suspect, candidates[0])])
    return stages


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def job_id(benchmark: str, test: str, shape: str, hosts: Sequence[str], rail: str | None = None,
           retest: bool = False, excluded: Sequence[str] = ()) -> str:
    """A stable, filename-safe id: ``nccl-all_reduce_perf-pair-node01-node02``; a cluster rerun
    ``nccl-all_reduce_perf-retest-3nodes-node01-without-node03`` (``stored.job_from_id`` reads them back)."""
    where = f"{len(hosts)}nodes-{hosts[0]}" if shape in ("cluster", "domain") else "-".join(hosts)
    if excluded:
        without = "-".join(excluded)
        where += f"-without-{without if len(without) <= 120 else f'{len(excluded)}nodes'}"
    parts = [benchmark, test, "retest" if retest else shape, *([rail] if rail else []), where]
    return _UNSAFE.sub("_", "-".join(parts))


def isolation_job_id(benchmark: str, test: str, round_number: int, purpose: str, hosts: Sequence[str],
                     rail: str | None = None) -> str:
    """``nccl-all_reduce_perf-isolate-r2-split-gpu007-2nodes[-mlx5_0_1]``: unique in one isolation (a host
    is in one job per round and rail) and filename-safe."""
    parts = [benchmark, test, "isolate", f"r{round_number}", purpose, hosts[0], f"{len(hosts)}nodes",
             *([rail] if rail else [])]
    return _UNSAFE.sub("_", "-".join(parts))


def cluster_rerun(job: Job, bad: Iterable[str]) -> Job | None:
    """The cluster ``job`` again without the ``bad`` nodes it included (as a pair suspect is retested),
    or None when it included none or fewer than two nodes would remain."""
    excluded = tuple(h for h in job.hosts if h in set(bad))
    hosts = tuple(h for h in job.hosts if h not in excluded)
    if job.shape != "cluster" or job.retest_of or not excluded or len(hosts) < 2:
        return None
    return Job(job_id=job_id(job.benchmark, job.test, "cluster", hosts, retest=True, excluded=excluded),
               benchmark=job.benchmark, test=job.test, shape="cluster", hosts=hosts,
               ranks_per_host=job.ranks_per_host, stage=stage_of("rerun"), retest_of=job.job_id,
               timeout_s=job.timeout_s, excluded=excluded)


def stage_of(shape: str, round_index: int = 0) -> int:
    return _STAGE_BASE[shape] + round_index


def domain_groups(hosts: Sequence[str], domain_of: Mapping[str, str | None]) -> list[tuple[str, ...]]:
    """The hosts per NVLink domain (``domain_of``: host -> the domain the inventory names), in host order; hosts
    with no domain form one group together. A domain of one host is a job too (nvloom waives, mndiag grades)."""
    groups: dict[str | None, list[str]] = {}
    for host in hosts:
        groups.setdefault(domain_of.get(host), []).append(host)
    return [tuple(group) for group in groups.values()]


def plan_jobs(benchmark: str, tests: Sequence[str], shapes: Sequence[str], hosts: Sequence[str],
              ranks_per_host: Mapping[str, int], *, pair_round_count: int = 1,
              rails: Sequence[str] = (), timeout_s: float = 1800.0,
              domain_of: Mapping[str, str | None] | None = None) -> list[Job]:
    """Every job of one benchmark for the given shapes, in stage order."""
    jobs: list[Job] = []

    def add(test: str, shape: str, group: Sequence[str], stage: int, rail: str | None = None) -> None:
        jobs.append(Job(job_id=job_id(benchmark, test, shape, group, rail), benchmark=benchmark,
                        test=test, shape=shape, hosts=tuple(group), stage=stage, rail=rail,
                        ranks_per_host=ranks_per_host[shape], timeout_s=timeout_s))

    for shape in shapes:
        for test in tests:
            if shape == "node":
                for group in per_node(hosts):
                    add(test, shape, group, stage_of("node"))
            elif shape == "cluster":
                for group in cluster(hosts):
                    add(test, shape, group, stage_of("cluster"))
            elif shape == "domain":
                for group in domain_groups(hosts, domain_of or {}):
                    add(test, shape, group, stage_of("domain"))
            elif shape == "pair":
                for index, pairs in enumerate(pair_rounds(hosts, pair_round_count)):
                    for group in pairs:
                        add(test, shape, group, stage_of("pair", index))
            elif shape == "rail":
                for index, pairs in enumerate(pair_rounds(hosts, pair_round_count)):
                    for r, rail in enumerate(rails):
                        for group in pairs:
                            add(test, shape, group, stage_of("rail", index * max(1, len(rails)) + r), rail)
            else:
                raise ValueError(f"unknown job shape {shape!r} (one of {SHAPES})")
    return sorted(jobs, key=lambda j: j.stage)
