"""The isolation's verdicts: proven blames with their evidence, suspects, failures that did not reproduce.

    conclusion = conclude_ledger(Ledger(layout, outcomes), complete=True, budget=3072, max_rounds=4)
    conclusion.blamed[0].subject, conclusion.blamed[0].reason
    # ('gpu0107', 'its screen group 14 failed; failed with known-good gpu0109 (round 2, every rail); ...')
    conclusion.attribution("r1.screen.gpu0105.8")     # (("node", "gpu0107"),): what that failure is blamed on

Pure. An entity is *blamed* when ``blame_rule`` holds for its evidence. A *suspect* is an entity some
failed job still points at, not proven, and not explained away (every failed job it is in is also
explained by something blamed); it says why it stayed unproven.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from healthcheck.benchmarks.isolate_decode import (
    NARROW,
    Entity,
    Ledger,
    Outcome,
    blame_rule,
    cells_passed_inside,
    hosts_of,
    subject_of,
)


@dataclass(frozen=True)
class Blame:
    """One blamed (``proven``) or suspected entity, whom it concerns, and the jobs that show it."""

    entity: Entity
    subject: str
    hosts: tuple[str, ...]
    evidence: tuple[str, ...]     # probe keys of the failed jobs explained by this entity alone
    reason: str
    proven: bool

    @property
    def kind(self) -> str:
        return self.entity[0]


@dataclass(frozen=True)
class Conclusion:
    outcomes: tuple[Outcome, ...]
    blamed: tuple[Blame, ...]
    suspects: tuple[Blame, ...]
    explanations: Mapping[str, tuple[Entity, ...]]   # failed probe key -> what it is left to blame on
    cleared: tuple[str, ...]                         # hosts a passing job cleared, in layout order
    complete: bool                                   # every planned probe has a result
    stopped: str                                     # why suspects were left: "" when none are

    @property
    def rounds(self) -> int:
        return max((o.probe.round for o in self.outcomes), default=0)

    @property
    def jobs(self) -> int:
        return len(self.outcomes)

    def blamed_hosts(self, kind: str = "node") -> set[str]:
        return {b.entity[1] for b in self.blamed if b.kind == kind}

    def attribution(self, key: str) -> tuple[Entity, ...]:
        """The blamed entities a failed probe's failure is attributed to (empty: none proven)."""
        proven = {b.entity for b in self.blamed}
        return tuple(e for e in self.explanations.get(key, ()) if e in proven)


def _round_text(outcomes: Sequence[Outcome], host: str, ledger: Ledger) -> str:
    parts = []
    for rnd in sorted({o.probe.round for o in outcomes}):
        these = [o for o in outcomes if o.probe.round == rnd]
        partners = sorted({h for o in these for h in o.probe.hosts[1:]})
        pinned = [o for o in ledger.narrow_tests(host) if o.probe.round == rnd and o.probe.rail]
        rails = (f"{len(these)} of {len(pinned)} rails" if pinned else "every rail")
        parts.append(f"failed with known-good {', '.join(partners)} (round {rnd}, {rails})")
    return "; ".join(parts)


def _rounds(outcomes: Sequence[Outcome]) -> str:
    """``round 2`` or ``rounds 2, 3``."""
    numbers = sorted({o.probe.round for o in outcomes})
    return f"round{'s' if len(numbers) > 1 else ''} {', '.join(map(str, numbers))}"


def _reason(entity: Entity, evidence: Sequence[Outcome], ledger: Ledger) -> str:
    kind = entity[0]
    if kind == "node":
        screens = [o.probe.subject for o in ledger.failed if o.probe.purpose == "screen" and entity[1] in o.probe.hosts]
        first = f"its screen {screens[0]} failed; " if screens else ""
        return first + _round_text([o for o in evidence if o.probe.purpose in NARROW], entity[1], ledger)
    if kind == "link":
        narrow = [o for o in evidence if o.probe.purpose in NARROW and o.probe.rail]
        partners = sorted({h for o in narrow for h in o.probe.hosts[1:]})
        return (f"{entity[1]} passes on its other rails but fails pinned to {entity[2]} with known-good "
                f"{', '.join(partners)} ({_rounds(narrow)})")
    rounds = _rounds(evidence)
    if kind in ("leaf", "leafrail"):
        others = sorted({ledger.layout.cell(h) for o in evidence for h in o.probe.hosts} - {entity[1]})
        inside = cells_passed_inside(ledger.layout, ledger.outcomes, entity[1])
        what = "jobs" if kind == "leaf" else f"jobs pinned to {entity[2]}"
        return (f"{what} from leaf {entity[1]} to leaves {', '.join(others)} fail ({len(evidence)} jobs, "
                f"{rounds}) while {inside} job(s) inside the leaf pass: its uplinks, not its nodes")
    pairs = sorted({" x ".join(sorted({ledger.layout.cell(h) for h in o.probe.hosts})) for o in evidence})
    return (f"jobs pinned to {entity[1]} fail across {len(pairs)} leaf pair(s) ({'; '.join(pairs)}; "
            f"{rounds}) while the same hosts pass on the other rails")


def _why_unproven(entity: Entity, jobs: Sequence[Outcome], ledger: Ledger, stopped: str) -> str:
    others = sorted({subject_of(e) for o in jobs for e in ledger.explain(o)} - {subject_of(entity)})
    keys = ", ".join(o.probe.key for o in jobs[:4])
    could = f"; the same failures could be {', '.join(others[:4])}" if others else ""
    return f"failed in {len(jobs)} job(s) ({keys}){could}; not proven: {stopped or 'no known-good partner was free'}"


def conclude_ledger(ledger: Ledger, *, complete: bool, budget: int, max_rounds: int) -> Conclusion:
    candidates = ledger.candidates()
    proven = {e for e in candidates if blame_rule(e, ledger.evidence(e))}
    blamed = tuple(Blame(e, subject_of(e), hosts_of(e, ledger.layout, ledger.evidence(e)),
                         tuple(o.probe.key for o in ledger.evidence(e)), _reason(e, ledger.evidence(e), ledger), True)
                   for e in _sorted(proven, ledger))
    rounds = max((o.probe.round for o in ledger.outcomes), default=0)
    stopped = ("the bundle ends before the isolation did" if not complete
               else "the job budget ran out" if len(ledger.outcomes) >= budget
               else "the rounds ran out" if rounds >= max_rounds else "")
    open_ = [e for e, jobs in candidates.items() if e not in proven
             and any(not (ledger.explain(o) & proven) for o in jobs)]
    suspects = tuple(Blame(e, subject_of(e), hosts_of(e, ledger.layout, candidates[e]),
                           tuple(o.probe.key for o in candidates[e]),
                           _why_unproven(e, candidates[e], ledger, stopped), False) for e in _sorted(open_, ledger))
    cleared = tuple(h for h in ledger.layout.hosts if ("node", h) in ledger.cleared)
    return Conclusion(outcomes=ledger.outcomes, blamed=blamed, suspects=suspects,
                      explanations={k: tuple(sorted(v)) for k, v in ledger.explanations.items()},
                      cleared=cleared, complete=complete, stopped=stopped if suspects else "")


def _sorted(entities: set[Entity] | list[Entity], ledger: Ledger) -> list[Entity]:
    order = {h: i for i, h in enumerate(ledger.layout.hosts)}
    kinds = {"node": 0, "link": 1, "leaf": 2, "leafrail": 3, "rail": 4}
    return sorted(entities, key=lambda e: (kinds[e[0]], order.get(e[1], -1), e))
