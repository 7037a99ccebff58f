"""Adaptive, topology-aware isolation: find the bad nodes, links, leaves and rails among many hosts with
a few rounds of group jobs instead of every pair.

    layout = build_layout(hosts_with_vars, rails=profile_rails)
    outcomes = drive(layout, IsolationSettings(), run_round)    # run_round(probes) -> [ok, ...]
    conclusion = conclude(layout, outcomes, IsolationSettings())
    [b.subject for b in conclusion.blamed]                      # ["gpu0107", "leaf L12"]

Rounds (``next_round`` plans one from the outcomes so far; every round's jobs are disjoint, per host
and rail, so a round runs at once):
1. **screen**: every host in one group of about ``group_size`` hosts of the same cell (leaf switch or
   NVLink domain), every rail.
2. **split** each host of a failed group with a known-good partner of its own cell (the failure is
   re-tested one host at a time, no uplink in the way), and **fabric**: groups of ``fabric_nodes``
   cleared hosts from each of two neighbouring cells (a ring over the cells), one job per rail
   pinned to it, so every cell's uplinks and every rail's plane is crossed twice.
3. **confirm** each host that failed its split with a new known-good partner, one job per rail (one GPU
   each, all at once): every rail failing is the node, one rail failing is that link; **refabric** a
   cell or rail that failed once with a new partner cell.
4. **relink** a link that failed once more, pinned to its rail; what is still unproven is re-tested
   as in 3.
Blame needs repeated evidence (``isolate_decode.blame_rule``); what is left when the rounds or the job
budget run out is a *suspect*, never a verdict. Pure and deterministic: the product's run layer, the
replay of a run and the simulator (bench/isolation_sim.py) drive the same functions, only the job runner
differs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from healthcheck.benchmarks.isolate_decode import FABRIC_EVIDENCE, Entity, Ledger, Outcome, Probe, blame_rule
from healthcheck.benchmarks.isolate_verdict import Conclusion, conclude_ledger
from healthcheck.benchmarks.topology import Layout


@dataclass(frozen=True)
class IsolationSettings:
    """Bounds and shapes (profile ``settings.benchmarks.nccl.isolate``, run options ``nccl.isolate.*``)."""

    group_size: int = 8        # hosts per screen group
    max_rounds: int = 4
    max_jobs: int = 0          # 0: three jobs per host
    fabric_nodes: int = 2      # hosts from each cell in a cross-cell fabric group

    def job_budget(self, hosts: int) -> int:
        return self.max_jobs if self.max_jobs > 0 else 3 * hosts

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> IsolationSettings:
        """From a settings mapping; a value that is not a positive integer raises ``ValueError``."""
        values: dict[str, int] = {}
        for name in cls.__dataclass_fields__:
            value = (raw or {}).get(name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "max_jobs" else 1):
                raise ValueError(f"isolate.{name} must be a positive integer, got {value!r}")
            values[name] = value
        if values.get("group_size", 2) < 2:
            raise ValueError("isolate.group_size must be at least 2")
        return cls(**values)

    def to_json(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def _chunks(members: Sequence[str], size: int) -> list[list[str]]:
    """``members`` in consecutive groups of at most ``size``, their sizes as even as possible."""
    count = math.ceil(len(members) / size)
    base, extra = divmod(len(members), count)
    out, start = [], 0
    for i in range(count):
        end = start + base + (1 if i < extra else 0)
        out.append(list(members[start:end]))
        start = end
    return out


def screen(layout: Layout, settings: IsolationSettings) -> list[Probe]:
    """Round 1: disjoint groups inside each cell, at most ``group_size`` hosts and at least four groups
    per cell when it has the hosts (so that a cell whose groups all fail, which leaves no known-good
    partner inside it, stays rare); hosts alone in their cell are grouped together."""
    groups: list[tuple[list[str], str]] = []
    alone: list[str] = []
    for cell, members in layout.cells().items():
        if len(members) < 2:
            alone += members
            continue
        size = max(2, min(settings.group_size, math.ceil(len(members) / 4)))
        groups += [(g, cell) for g in _chunks(members, size)]
    if len(alone) >= 2:
        groups += [(g, "") for g in _chunks(alone, settings.group_size)]
    elif alone and groups:
        groups[-1] = ([*groups[-1][0], *alone], "")
    return [Probe(1, "screen", tuple(g), subject=f"group {i}" + (f" (cell {cell})" if cell else ""))
            for i, (g, cell) in enumerate(groups, 1)]


class _RoundPlan:
    """The probes of one round as they are chosen: every (host, rail) slot used at most once."""

    def __init__(self, layout: Layout, ledger: Ledger, number: int, budget: int, fabric_nodes: int) -> None:
        self.layout, self.ledger, self.number, self.budget = layout, ledger, number, budget
        self.fabric_nodes = fabric_nodes
        self.probes: list[Probe] = []
        self.busy: dict[str, set[str | None]] = {}
        self.order = {h: i for i, h in enumerate(layout.hosts)}

    def free(self, host: str, rail: str | None = None) -> bool:
        used = self.busy.get(host)
        return not used or (rail is not None and None not in used and rail not in used)

    def take(self, probes: Sequence[Probe]) -> bool:
        """Add all of ``probes`` or none (their slots free, the budget not exceeded)."""
        if not probes or len(self.probes) + len(probes) > self.budget:
            return False
        if not all(self.free(h, p.rail) for p in probes for h in p.hosts):
            return False
        for p in probes:
            for h in p.hosts:
                self.busy.setdefault(h, set()).add(p.rail)
        self.probes += probes
        return True

    def partner(self, host: str, avoid: set[str], cross: bool = True) -> str | None:
        """A free known-good host for ``host``, new to it: of its own cell when there is one (no uplink
        in the way), else of any cell (unless ``cross`` is False)."""
        def usable(h: str) -> bool:
            return h != host and h not in avoid and self.free(h)

        mine = next((h for h in self.ledger.known_good_by_cell.get(self.layout.cell(host), ()) if usable(h)), None)
        if mine is not None or not cross:
            return mine
        return next((h for h in self.ledger.known_good if usable(h)), None)

    def fresh(self, cell: str, count: int, used_before: set[str]) -> list[str] | None:
        """``count`` free known-good hosts of ``cell``, preferring ones no fabric job used before."""
        pool = [h for h in self.ledger.known_good_by_cell.get(cell, ()) if self.free(h)]
        pool.sort(key=lambda h: (h in used_before, self.order[h]))
        return pool[:count] if len(pool) >= count else None


def _rails_or_all(layout: Layout) -> tuple[str | None, ...]:
    return layout.rails or (None,)


def _narrow(plan: _RoundPlan, host: str, purpose: str, rails: Sequence[str | None], parent: str | None,
            cross: bool = True) -> bool:
    """``host`` with a new known-good partner, every rail at once or one job per rail in ``rails``."""
    partner = plan.partner(host, plan.ledger.partners(host), cross)
    if partner is None:
        return False
    how = "" if rails == (None,) else " rail by rail" if len(rails) > 1 else f" on {rails[0]}"
    subject = f"{host} with known-good {partner}{how}"
    return plan.take([Probe(plan.number, purpose, (host, partner), rail, subject, parent) for rail in rails])


def _follow_node(plan: _RoundPlan, host: str, jobs: Sequence[Outcome]) -> bool:
    """Split a host pointed at by a failed group; confirm one that failed with a known-good partner.
    False: a split that found no free known-good partner (``_pair_up`` takes it)."""
    tested = plan.ledger.narrow_tests(host)
    parent = (tested or list(jobs))[-1].probe.key
    if not tested:
        return _narrow(plan, host, "split", (None,), parent, cross=False)
    _narrow(plan, host, "confirm", _rails_or_all(plan.layout), parent)
    return True


def _pair_up(plan: _RoundPlan, waiting: Sequence[tuple[str, str]]) -> None:
    """Hosts still to split when their cell has no free known-good partner (its groups failed): two of
    them of the same cell, from different failed jobs if possible, run together (a pass clears both and
    makes them partners for the rest); one left alone in its cell takes a known-good partner of another
    cell, or another such host."""
    by_cell: dict[str, list[tuple[str, str]]] = {}
    for host, parent in waiting:
        by_cell.setdefault(plan.layout.cell(host), []).append((host, parent))
    alone: list[tuple[str, str]] = []
    for members in by_cell.values():
        alone += _pairs_of(plan, members)
    rest = [(h, p) for h, p in alone if not _narrow(plan, h, "split", (None,), p)]
    _pairs_of(plan, rest)


def _pairs_of(plan: _RoundPlan, members: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """Pair ``members`` up (``pairup`` probes); returns the one left over, if any."""
    left = list(members)
    while len(left) >= 2:
        host, parent = left.pop(0)
        mate, _ = left.pop(next((i for i, (_, p) in enumerate(left) if p != parent), 0))
        plan.take([Probe(plan.number, "pairup", (host, mate), None, f"{host} with {mate} (both unproven)", parent)])
    return left


def _cross_group(plan: _RoundPlan, cells: Sequence[str], rails: Sequence[str | None], purpose: str,
                 parent: str | None) -> bool:
    used_before = {h for o in plan.ledger.outcomes if o.probe.purpose in ("fabric", "refabric") for h in o.probe.hosts}
    picked: list[str] = []
    for cell in cells:
        hosts = plan.fresh(cell, plan.fabric_nodes, used_before)
        if hosts is None:
            return False
        picked += hosts
    subject = " x ".join(f"leaf {c}" for c in cells)
    return plan.take([Probe(plan.number, purpose, tuple(picked), r, subject, parent) for r in rails])


def _fabric_screen(plan: _RoundPlan) -> None:
    """A ring of cross-cell groups over the cells (each cell crossed with both neighbours; two groups
    when there are two cells); a ring pair a round could not staff is planned in the next one."""
    cells = [c for c in plan.layout.cells() if c]
    if len(cells) < 2 or len(cells) != len(plan.layout.cells()):
        return
    ring = [(cells[0], cells[1])] * 2 if len(cells) == 2 else [(c, cells[(i + 1) % len(cells)])
                                                               for i, c in enumerate(cells)]
    done: dict[frozenset[str], int] = {}
    for hosts in {o.probe.hosts for o in plan.ledger.outcomes if o.probe.purpose == "fabric"}:
        key = frozenset(plan.layout.cell(h) for h in hosts)
        done[key] = done.get(key, 0) + 1
    for pair in ring:
        key = frozenset(pair)
        if done.get(key, 0) > 0:
            done[key] -= 1
        else:
            _cross_group(plan, pair, _rails_or_all(plan.layout), "fabric", None)


def _follow_fabric(plan: _RoundPlan, entity: Entity, jobs: Sequence[Outcome]) -> None:
    """Cross a suspect cell with a new partner cell, or a suspect rail plane over a new pair of cells; one
    rail of a cell gets as many new groups as its evidence is short of ``FABRIC_EVIDENCE`` failed jobs."""
    parent = jobs[-1].probe.key
    short = FABRIC_EVIDENCE - len(plan.ledger.evidence(entity))
    wanted = max(1, short) if entity[0] == "leafrail" else 1
    suspects = {e[1] for e in plan.ledger.candidates() if e[0] == "leaf"}
    cells = [c for c in plan.layout.cells() if c]
    if entity[0] in ("leaf", "leafrail"):
        rails = _rails_or_all(plan.layout) if entity[0] == "leaf" else (entity[2],)
        done = plan.ledger.pairs_tested(None if entity[0] == "leaf" else entity[2])
        pairs = [(entity[1], other) for other in cells if other != entity[1] and other not in suspects
                 and frozenset((entity[1], other)) not in done]
    else:  # a rail plane
        rails = (entity[1],)
        done = plan.ledger.pairs_tested(entity[1])
        pairs = [(a, b) for i, a in enumerate(cells) for b in cells[i + 1:]
                 if a not in suspects and b not in suspects and frozenset((a, b)) not in done]
    added = 0
    for pair in pairs:
        if added * len(rails) >= wanted:
            return
        added += _cross_group(plan, pair, rails, "refabric", parent)


_ORDER = {"node": 0, "link": 1, "leaf": 2, "leafrail": 3, "rail": 4}


def next_round(layout: Layout, outcomes: Sequence[Outcome], settings: IsolationSettings) -> list[Probe]:
    """The probes of the next round (empty: done, or out of rounds or jobs)."""
    number = 1 + max((o.probe.round for o in outcomes), default=0)
    budget = settings.job_budget(len(layout.hosts)) - len(outcomes)
    if number > settings.max_rounds or budget <= 0 or len(layout.hosts) < 2:
        return []
    if number == 1:
        return screen(layout, settings)[:budget]
    ledger = Ledger(layout, outcomes)
    plan = _RoundPlan(layout, ledger, number, budget, settings.fabric_nodes)
    order = {h: i for i, h in enumerate(layout.hosts)}
    pending = [(e, jobs) for e, jobs in ledger.candidates().items() if not blame_rule(e, ledger.evidence(e))]
    pending.sort(key=lambda item: (_ORDER[item[0][0]], order.get(item[0][1], -1), item[0]))
    waiting: list[tuple[str, str]] = []
    for entity, jobs in pending:
        if entity[0] == "node" and not _follow_node(plan, entity[1], jobs):
            waiting.append((entity[1], jobs[-1].probe.key))
        elif entity[0] == "link":
            _narrow(plan, entity[1], "relink", (entity[2],), jobs[-1].probe.key)
    _pair_up(plan, waiting)
    _fabric_screen(plan)
    for entity, jobs in pending:
        if entity[0] not in ("node", "link"):
            _follow_fabric(plan, entity, jobs)
    return plan.probes


RunRound = Callable[[Sequence[Probe]], Sequence[bool | None]]


def drive(layout: Layout, settings: IsolationSettings, run_round: RunRound) -> tuple[tuple[Outcome, ...], bool]:
    """Plan and run rounds until the planner is done; ``run_round`` returns each probe's pass/fail, or
    None for a probe with no result (a replayed bundle missing the job): the isolation stops there.
    Returns the outcomes and whether every planned probe had a result."""
    outcomes: list[Outcome] = []
    while probes := next_round(layout, outcomes, settings):
        results = list(run_round(probes))
        outcomes += [Outcome(p, bool(ok)) for p, ok in zip(probes, results, strict=True) if ok is not None]
        if any(ok is None for ok in results):
            return tuple(outcomes), False
    return tuple(outcomes), True


def conclude(layout: Layout, outcomes: Sequence[Outcome], settings: IsolationSettings,
             complete: bool = True) -> Conclusion:
    """Verdicts from the outcomes: proven blames, suspects, not-reproduced failures."""
    return conclude_ledger(Ledger(layout, outcomes), complete=complete,
                           budget=settings.job_budget(len(layout.hosts)), max_rounds=settings.max_rounds)


__all__ = ["IsolationSettings", "Outcome", "Probe", "conclude", "drive", "next_round", "screen"]
