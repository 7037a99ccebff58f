"""What the isolation's results so far say: which parts of the fabric are cleared, what explains each
failed job, and which explanations are proven (group testing with noisy, one-sided errors).

    ledger = Ledger(layout, outcomes)
    ledger.explain(outcome)          # frozenset({("node", "gpu007")}): the one thing left to blame
    ledger.candidates()              # every entity some failed job still points at, with those jobs
    blame_rule(("node", "gpu007"), ledger.evidence(("node", "gpu007")))   # True once proven

Entities (tuples): ``("node", h)`` a node (its GPUs, PCIe, every HCA), ``("link", h, r)`` one HCA of a
node with its cable and leaf port, ``("leaf", c)`` a cell's uplinks (traffic leaving the leaf),
``("leafrail", c, r)`` one rail's uplinks of a cell, ``("rail", r)`` a rail's plane across cells. A job
*exercises* its hosts, their links on the rails it uses, and, when it spans two cells or more, those
cells' uplinks on those rails; only a job pinned to one rail (``NCCL_IB_HCA``) exercises that rail's
plane, since NCCL over every rail hides one slow plane (the issue's "a rail that fails only with
NCCL_IB_HCA on that rail").

Decoding: noise only ever makes a job *slower* (a slow job by chance, a flaky link failing 1 time in 3,
a partner's hiccup), so a job that passes clears everything it exercised. A failed job is explained
by what it exercised that nothing cleared, reduced to the widest entities (a node covers its links;
a cell or a rail plane covers that cell's rail). A failed job explained by exactly one entity is
*evidence* against it. Pure: no I/O, deterministic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from healthcheck.benchmarks.topology import Layout

Entity = tuple[str, ...]
NARROW = ("split", "confirm", "relink")    # a suspect and a known-good partner, nobody else
FABRIC = ("fabric", "refabric")            # hosts cleared as nodes, from two cells
FABRIC_EVIDENCE = 4                        # failed jobs that blame one rail of a cell (blame_rule)


@dataclass(frozen=True)
class Probe:
    """One job the planner asks for. In a narrow probe the suspect is ``hosts[0]``, its partner the rest.

    ``rail`` None: every rail and every GPU of each host; a rail: one GPU per host, pinned to that HCA,
    so the probes of one round on the same host but different rails run at the same time.
    ``parent`` is the key of the failed probe this one follows up (None for the screen)."""

    round: int
    purpose: str              # screen | split | confirm | relink | pairup | fabric | refabric
    hosts: tuple[str, ...]
    rail: str | None = None
    subject: str = ""
    parent: str | None = None

    @property
    def key(self) -> str:
        rail = f".{self.rail}" if self.rail else ""
        return f"r{self.round}.{self.purpose}.{self.hosts[0]}.{len(self.hosts)}{rail}"


@dataclass(frozen=True)
class Outcome:
    """A probe and whether its job passed (no FAIL or ERROR finding)."""

    probe: Probe
    ok: bool


def exercised(probe: Probe, layout: Layout) -> frozenset[Entity]:
    """The entities a probe's job depends on (see the module docstring)."""
    rails = (probe.rail,) if probe.rail else layout.rails
    out: set[Entity] = set()
    for host in probe.hosts:
        out.add(("node", host))
        out.update(("link", host, r) for r in rails)
    cells = {layout.cell(h) for h in probe.hosts}
    if len(cells) >= 2:
        for cell in cells:
            out.add(("leaf", cell))
            out.update(("leafrail", cell, r) for r in rails)
        if probe.rail:
            out.add(("rail", probe.rail))
    return frozenset(out)


def _widest(left: frozenset[Entity]) -> frozenset[Entity]:
    """Drop the entities a wider uncleared one covers (a link under its node, a cell's rail under the
    cell or under the rail plane)."""
    def covered(e: Entity) -> bool:
        if e[0] == "link":
            return ("node", e[1]) in left
        if e[0] == "leafrail":
            return ("leaf", e[1]) in left or ("rail", e[2]) in left
        return False
    return frozenset(e for e in left if not covered(e))


class Ledger:
    """Every outcome so far, what is cleared, and what explains each failed job."""

    def __init__(self, layout: Layout, outcomes: Iterable[Outcome]) -> None:
        self.layout = layout
        self.outcomes = tuple(outcomes)
        self._exercised = {o.probe.key: exercised(o.probe, layout) for o in self.outcomes}
        self.cleared: frozenset[Entity] = frozenset().union(
            *(self._exercised[o.probe.key] for o in self.outcomes if o.ok))

    def explain(self, outcome: Outcome) -> frozenset[Entity]:
        """What a failed job's failure is left to blame on (empty: not reproduced, everything cleared)."""
        return self.explanations.get(outcome.probe.key, frozenset())

    @cached_property
    def explanations(self) -> dict[str, frozenset[Entity]]:
        return {o.probe.key: _widest(self._exercised[o.probe.key] - self.cleared)
                for o in self.outcomes if not o.ok}

    @cached_property
    def failed(self) -> tuple[Outcome, ...]:
        return tuple(o for o in self.outcomes if not o.ok)

    @cached_property
    def _candidates(self) -> dict[Entity, list[Outcome]]:
        out: dict[Entity, list[Outcome]] = {}
        for o in self.failed:
            for entity in self.explain(o):
                out.setdefault(entity, []).append(o)
        return out

    def candidates(self) -> dict[Entity, list[Outcome]]:
        """Each entity some failed job still points at, with those jobs (in run order)."""
        return self._candidates

    def evidence(self, entity: Entity) -> list[Outcome]:
        """The failed jobs explained by ``entity`` alone."""
        return [o for o in self._candidates.get(entity, ()) if self.explain(o) == {entity}]

    def not_reproduced(self) -> list[Outcome]:
        """Failed jobs whose every part passed elsewhere: a slow job by chance, or an intermittent fault."""
        return [o for o in self.failed if not self.explain(o)]

    @cached_property
    def known_good(self) -> tuple[str, ...]:
        """Hosts that passed a job over every rail and that no failed job points at, in layout order."""
        passed = {h for o in self.outcomes if o.ok and o.probe.rail is None for h in o.probe.hosts}
        pointed = {e[1] for e in self._candidates if e[0] in ("node", "link")}
        return tuple(h for h in self.layout.hosts if h in passed and h not in pointed)

    @cached_property
    def known_good_by_cell(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for host in self.known_good:
            out.setdefault(self.layout.cell(host), []).append(host)
        return out

    def narrow_tests(self, host: str) -> list[Outcome]:
        """The narrow probes of ``host`` as the suspect."""
        return [o for o in self.outcomes if o.probe.purpose in NARROW and o.probe.hosts[0] == host]

    def partners(self, host: str) -> set[str]:
        return {h for o in self.narrow_tests(host) for h in o.probe.hosts[1:]}

    def pairs_tested(self, rail: str | None = None) -> set[frozenset[str]]:
        """The cell pairs fabric probes have crossed (on ``rail``, or on any)."""
        return {frozenset(self.layout.cell(h) for h in o.probe.hosts) for o in self.outcomes
                if o.probe.purpose in FABRIC and (rail is None or o.probe.rail in (None, rail))}


def _disjoint_jobs(outcomes: Sequence[Outcome]) -> int:
    """How many of these jobs share no host with each other (greedy, in order)."""
    used: set[str] = set()
    count = 0
    for o in outcomes:
        if used.isdisjoint(o.probe.hosts):
            used.update(o.probe.hosts)
            count += 1
    return count


def blame_rule(entity: Entity, evidence: Sequence[Outcome]) -> bool:
    """Whether the failed jobs explained by ``entity`` alone prove it.

    A node: narrow jobs (with known-good partners) in two rounds or more. A link: narrow jobs pinned to
    its rail in two rounds or more. A cell or a rail plane: three jobs or more on two disjoint sets of
    hosts, in two rounds or four jobs or more (a cell's two fabric groups over eight rails are sixteen);
    chance cannot do that, since one passing job crossing the cell, or pinned to the rail, clears it.
    A cell's rail: ``FABRIC_EVIDENCE`` (four) jobs on two disjoint host sets, since its two fabric groups
    on that rail failing by chance is not rare among a thousand cell-rails."""
    if entity[0] == "node":
        return len({o.probe.round for o in evidence if o.probe.purpose in NARROW}) >= 2
    if entity[0] == "link":
        return len({o.probe.round for o in evidence if o.probe.purpose in NARROW and o.probe.rail == entity[2]}) >= 2
    if _disjoint_jobs(evidence) < 2:
        return False
    if entity[0] == "leafrail":
        return len(evidence) >= FABRIC_EVIDENCE
    return len(evidence) >= 3 and (len({o.probe.round for o in evidence}) >= 2 or len(evidence) >= 4)


def subject_of(entity: Entity) -> str:
    """How findings and the report name an entity: ``gpu007``, ``gpu007 mlx5_3:1``, ``leaf L2``, ..."""
    kind = entity[0]
    if kind == "node":
        return entity[1]
    if kind == "link":
        return f"{entity[1]} {entity[2]}"
    if kind == "leaf":
        return f"leaf {entity[1]}"
    if kind == "leafrail":
        return f"leaf {entity[1]} rail {entity[2]}"
    return f"rail {entity[1]}"


def hosts_of(entity: Entity, layout: Layout, evidence: Sequence[Outcome]) -> tuple[str, ...]:
    """Whom a finding about ``entity`` goes to: the node; a cell's members; a rail plane's tested hosts."""
    if entity[0] in ("node", "link"):
        return (entity[1],)
    if entity[0] in ("leaf", "leafrail"):
        return tuple(layout.cells().get(entity[1], ()))
    return tuple(dict.fromkeys(h for o in evidence for h in o.probe.hosts))


def cells_passed_inside(layout: Layout, outcomes: Iterable[Outcome], cell: str) -> int:
    """How many jobs inside ``cell`` passed (the "fine inside" half of a leaf's story)."""
    return sum(1 for o in outcomes if o.ok and {layout.cell(h) for h in o.probe.hosts} == {cell})


def rails_of(outcomes: Iterable[Outcome]) -> Mapping[str, bool]:
    """Rail -> passed, for pinned probes."""
    return {o.probe.rail: o.ok for o in outcomes if o.probe.rail}
