"""An isolation run as the product records it: its trail (what to replay), its jobs, its findings and its story.

    trail = Trail("nccl", "all_reduce_perf", "h100-sxm5-8x", layout, IsolationSettings(), ranks_per_host=8)
    job = probe_job(trail, probe)                 # Job(shape="group"|"group_rail", job_id=...-isolate-r1-...)
    conclusion = replay_trail(trail, ok_by_job)   # the planner again over the graded jobs: same probes, same verdicts
    isolation_findings(trail, conclusion)         # <base>.isolate.node|link|leaf|rail per host
    restate(job_findings, trail, conclusion)      # a failed group job's findings, attributed
    story(trail, conclusion, busbw_by_job)        # results.json "isolation": the tree and the blames

The trail (``raw/_jobs/isolation.json``) holds what the planner needs besides the job results: the
layout, the settings, the test. Replaying it re-runs the planner over the stored, re-graded jobs, so a
replay reaches the same verdicts through the same code; a job missing from the bundle stops it there.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ClusterShell.NodeSet import NodeSet

from healthcheck.benchmarks.attribution import KEEP_ON_LINK
from healthcheck.benchmarks.isolate import IsolationSettings, conclude, drive
from healthcheck.benchmarks.isolate_decode import Entity, Probe, subject_of
from healthcheck.benchmarks.isolate_verdict import Blame, Conclusion
from healthcheck.benchmarks.plan import Job, isolation_job_id, stage_of
from healthcheck.benchmarks.topology import Layout
from healthcheck.core.model import Finding, Status

SCHEMA = "healthcheck.isolation/1"


@dataclass(frozen=True)
class Trail:
    """One isolation: a test of a benchmark over the hosts of one profile."""

    benchmark: str
    test: str
    profile: str
    layout: Layout
    settings: IsolationSettings
    ranks_per_host: int
    timeout_s: float = 1800.0

    def to_json(self) -> dict[str, Any]:
        return {"benchmark": self.benchmark, "test": self.test, "profile": self.profile,
                "ranks_per_host": self.ranks_per_host, "timeout_s": self.timeout_s,
                "layout": self.layout.to_json(), "settings": self.settings.to_json()}

    @classmethod
    def from_json(cls, obj: Any) -> Trail:
        """A trail read back from a bundle: ``ValueError`` (``LayoutError`` included) when unusable."""
        if not isinstance(obj, Mapping):
            raise ValueError("an isolation entry is not an object")
        texts = [obj.get(k) for k in ("benchmark", "test", "profile")]
        if not all(isinstance(t, str) and t for t in texts):
            raise ValueError("an isolation entry lacks its benchmark, test or profile")
        ranks, timeout = obj.get("ranks_per_host"), obj.get("timeout_s", 1800.0)
        if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
            raise ValueError(f"isolation ranks_per_host {ranks!r} is not a positive integer")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ValueError(f"isolation timeout_s {timeout!r} is not a positive number")
        return cls(*texts, layout=Layout.from_json(obj.get("layout")),
                   settings=IsolationSettings.from_mapping(obj.get("settings")), ranks_per_host=ranks,
                   timeout_s=float(timeout))


def probe_job(trail: Trail, probe: Probe) -> Job:
    """The launchable job of a probe: every GPU and rail (``group``) or one GPU on one rail (``group_rail``)."""
    return Job(job_id=isolation_job_id(trail.benchmark, trail.test, probe.round, probe.purpose, probe.hosts,
                                       probe.rail),
               benchmark=trail.benchmark, test=trail.test, shape="group_rail" if probe.rail else "group",
               hosts=probe.hosts, ranks_per_host=1 if probe.rail else trail.ranks_per_host,
               stage=stage_of("isolate", probe.round), rail=probe.rail, timeout_s=trail.timeout_s)


def replay_trail(trail: Trail, ok_by_job: Mapping[str, bool]) -> Conclusion:
    """The planner driven over already graded jobs (a job not among them ends the isolation)."""
    outcomes, complete = drive(trail.layout, trail.settings,
                               lambda probes: [ok_by_job.get(probe_job(trail, p).job_id) for p in probes])
    return conclude(trail.layout, outcomes, trail.settings, complete)


_REMEDY = {
    "node": "Drain the node: it fails with known-good partners, on every rail; check its GPUs, PCIe links and "
            "HCAs (dcgmi diag -r 3, nvidia-smi topo -m, ibstat), then rerun healthcheck bench --plan isolate",
    "link": "Reseat or replace the cable or transceiver of that HCA and check the leaf switch port (ibdiagnet, "
            "perfquery error counters on both ends, ibstat rate/width); the node's other rails pass. If cable "
            "and port are fine, check the GPU beside that HCA (its one-GPU job ran there: nccl.rail_gpus)",
    "leaf": "The leaf switch's uplinks: check its spine cables and ports (iblinkinfo for links below full width "
            "or speed, ibdiagnet, error counters) and the routing (opensm); its nodes pass among themselves",
    "rail": "That rail's plane: check its spine switches, their cables and the routing of that rail; jobs on "
            "the other rails pass with the same nodes",
    "suspect": "Not proven (rounds or jobs ran out, or no known-good partner was free): rerun healthcheck bench "
               "--plan isolate on these hosts, or raise nccl.isolate.max_rounds / max_jobs",
}
_STATUS = {"node": Status.FAIL, "link": Status.FAIL, "leaf": Status.WARN, "leafrail": Status.WARN, "rail": Status.WARN}
_CHECK = {"node": "node", "link": "link", "leaf": "leaf", "leafrail": "leaf", "rail": "rail"}


def isolation_findings(base: str, trail: Trail, conclusion: Conclusion) -> list[Finding]:
    """``<base>.isolate.node`` for every host (FAIL blamed, WARN suspect, PASS cleared, ERROR or SKIP not
    reached), and ``.link`` / ``.leaf`` / ``.rail`` for each blamed or suspect part of the fabric."""
    out: list[Finding] = []
    for blame in (*conclusion.blamed, *conclusion.suspects):
        kind = blame.kind
        status = _STATUS[kind] if blame.proven else Status.WARN
        word = "bad" if blame.proven else "suspect"
        remedy = _REMEDY["leaf" if kind == "leafrail" else kind] if blame.proven else _REMEDY["suspect"]
        component = "node" if kind == "node" else blame.subject if kind != "link" else f"link {blame.subject}"
        out += [Finding(host=h, check=f"{base}.isolate.{_CHECK[kind]}", status=status, component=component,
                        value=len(blame.evidence), unit="jobs", expected="no failed job left unexplained",
                        message=f"{blame.subject}: {word}: {blame.reason}", remedy=remedy, source="isolation")
                for h in blame.hosts]
    named = {f.host for f in out if f.check.endswith(".isolate.node")}
    cleared = set(conclusion.cleared)
    for host in trail.layout.hosts:
        if host in named:
            continue
        if host in cleared:
            out.append(Finding(host=host, check=f"{base}.isolate.node", status=Status.PASS, component="node",
                               message=f"{host}: cleared: passed a job with known-good or unproven partners",
                               source="isolation"))
        else:
            status = Status.ERROR if not conclusion.complete else Status.SKIP
            why = conclusion.stopped or "the isolation ended before any job passed with this host"
            out.append(Finding(host=host, check=f"{base}.isolate.node", status=status, component="node",
                               message=f"{host}: not cleared: {why}", source="isolation",
                               remedy=_REMEDY["suspect"] if status is Status.ERROR else None))
    return out


def _attributed(entities: Sequence[Entity], blames: Mapping[Entity, Blame]) -> str:
    return "; ".join(f"{blames[e].subject}: {blames[e].reason}" for e in entities)


def restate(findings: Sequence[Finding], key: str, conclusion: Conclusion) -> list[Finding]:
    """A failed isolation job's findings, each said again with what the isolation blamed: kept on the
    blamed node (or node of the blamed link), PASS for the others; for a leaf or rail, a failure that
    did not reproduce, or one left unresolved, performance findings become WARN while wrong results,
    aborts and hung jobs keep their status (as for a pair blamed on a link)."""
    if key not in conclusion.explanations:
        return list(findings)
    blames = {b.entity: b for b in conclusion.blamed}
    proven = conclusion.attribution(key)
    hosts = {e[1] for e in proven if e[0] in ("node", "link")}
    left = conclusion.explanations[key]
    out = []
    for f in findings:
        if f.status not in (Status.FAIL, Status.ERROR, Status.WARN):
            out.append(f)
        elif hosts and f.host in hosts:
            out.append(replace(f, message=f"{f.message} [isolation: {_attributed(proven, blames)}]"))
        elif hosts:
            out.append(replace(f, status=Status.PASS, remedy=None,
                               message=f"{f.message} [attributed to {_attributed(proven, blames)}]"))
        else:
            status = f.status if f.check.endswith(KEEP_ON_LINK) else Status.WARN
            why = (f"attributed to {_attributed(proven, blames)}" if proven else
                   f"unresolved: one of {', '.join(sorted(subject_of(e) for e in left))}" if left else
                   "not reproduced: every host and link of this job passed its follow-up")
            out.append(replace(f, status=status, message=f"{f.message} [{why}]"))
    return out


def story(trail: Trail, conclusion: Conclusion, busbw: Mapping[str, float | None]) -> dict[str, Any]:
    """The isolation for results.json and the reports: counts, blames, suspects and the tree of jobs."""
    blames = {b.entity: b for b in conclusion.blamed}
    job_ids = {o.probe.key: probe_job(trail, o.probe).job_id for o in conclusion.outcomes}
    tree = []
    for o in conclusion.outcomes:
        job_id = job_ids[o.probe.key]
        left = conclusion.explanations.get(o.probe.key)
        tree.append({"key": o.probe.key, "job_id": job_id, "round": o.probe.round, "purpose": o.probe.purpose,
                     "subject": o.probe.subject, "hosts": str(NodeSet.fromlist(o.probe.hosts)),
                     "size": len(o.probe.hosts), "rail": o.probe.rail, "ok": o.ok, "busbw_gbps": busbw.get(job_id),
                     "parent": o.probe.parent,
                     "blamed_on": [blames[e].subject for e in conclusion.attribution(o.probe.key)],
                     "left": None if left is None else [subject_of(e) for e in left]})
    return {"benchmark": trail.benchmark, "test": trail.test, "profile": trail.profile,
            "hosts": len(trail.layout.hosts), "cells": len([c for c in trail.layout.cells() if c]),
            "rails": list(trail.layout.rails), "settings": trail.settings.to_json(),
            "rounds": conclusion.rounds, "jobs": conclusion.jobs,
            "budget": trail.settings.job_budget(len(trail.layout.hosts)), "complete": conclusion.complete,
            "stopped": conclusion.stopped, "cleared": len(conclusion.cleared),
            "blamed": [_blame_json(b, job_ids) for b in conclusion.blamed],
            "suspects": [_blame_json(b, job_ids) for b in conclusion.suspects], "tree": tree}


def _blame_json(blame: Blame, job_ids: Mapping[str, str]) -> dict[str, Any]:
    return {"kind": blame.kind, "subject": blame.subject, "hosts": str(NodeSet.fromlist(blame.hosts)),
            "reason": blame.reason, "proven": blame.proven,
            "evidence": [job_ids.get(key, key) for key in blame.evidence]}
