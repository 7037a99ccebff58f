"""The isolation planner (benchmarks/isolate.py, isolate_decode.py, isolate_verdict.py) against fault oracles:
which jobs it asks for round by round, what it blames and with which evidence, and its bounds. Deterministic:
the oracles are fixed or seeded; nothing is timed."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from healthcheck.benchmarks.isolate import IsolationSettings, conclude, drive, next_round, screen
from healthcheck.benchmarks.isolate_decode import Ledger, Outcome, Probe, blame_rule, exercised
from healthcheck.benchmarks.topology import Layout, LayoutError, build_layout


def make_layout(n: int = 64, per_leaf: int = 16, rails: int = 4) -> Layout:
    return build_layout([(f"h{i:03d}", {"leaf": f"L{i // per_leaf}"}) for i in range(n)],
                        rails=[f"r{j}" for j in range(rails)])


class Oracle:
    """Pass/fail of a probe under fixed faults: bad nodes, (host, rail) links, leaves with slow uplinks,
    rail planes, and probe keys that are slow once by chance; ``noise`` adds seeded random slow jobs."""

    def __init__(self, layout: Layout, bad: Sequence[str] = (), links: Sequence[tuple[str, str]] = (),
                 leaves: Sequence[str] = (), rails: Sequence[str] = (), unlucky: Sequence[str] = (),
                 noise: float = 0.0, seed: int = 0) -> None:
        self.layout, self.bad, self.links = layout, set(bad), set(links)
        self.leaves, self.rails, self.unlucky = set(leaves), set(rails), set(unlucky)
        self.noise, self.rng, self.rounds = noise, random.Random(seed), []

    def passes(self, probe: Probe) -> bool:
        hosts, cells = set(probe.hosts), {self.layout.cell(h) for h in probe.hosts}
        crossing = len(cells) > 1
        return not (hosts & self.bad or any(h in hosts and probe.rail in (None, r) for h, r in self.links)
                    or (crossing and cells & self.leaves) or (crossing and probe.rail in self.rails)
                    or probe.key in self.unlucky or self.rng.random() < self.noise)

    def __call__(self, probes: Sequence[Probe]) -> list[bool]:
        self.rounds.append(list(probes))
        return [self.passes(p) for p in probes]


def run(layout: Layout, oracle: Oracle, settings: IsolationSettings | None = None):
    settings = settings or IsolationSettings()
    outcomes, complete = drive(layout, settings, oracle)
    return outcomes, conclude(layout, outcomes, settings, complete)


def assert_rounds_disjoint(rounds: Sequence[Sequence[Probe]]) -> None:
    """No (host, rail) slot twice in a round, and a whole-host job alone on its host."""
    for probes in rounds:
        used: dict[str, list[str | None]] = {}
        for p in probes:
            for h in p.hosts:
                used.setdefault(h, []).append(p.rail)
        for rails in used.values():
            assert len(rails) == len(set(rails)) and (None not in rails or len(rails) == 1), rails


def test_screen_groups_stay_inside_their_cell() -> None:
    probes = screen(make_layout(64, 16), IsolationSettings())
    assert [len(p.hosts) for p in probes] == [4] * 16  # at least four groups per 16-host leaf
    assert all(len({int(h[1:]) // 16 for h in p.hosts}) == 1 for p in probes)
    assert probes[0] == Probe(1, "screen", ("h000", "h001", "h002", "h003"), subject="group 1 (cell L0)")
    wide = screen(make_layout(96, 32), IsolationSettings())
    assert {len(p.hosts) for p in wide} == {8}
    assert all(len({int(h[1:]) // 32 for h in p.hosts}) == 1 for p in wide)
    flat = screen(build_layout([(f"n{i}", {}) for i in range(19)]), IsolationSettings())
    assert [len(p.hosts) for p in flat] == [5, 5, 5, 4]  # no topology: one cell, four groups at least
    lone = build_layout([("a", {"leaf": "x"}), ("b", {"leaf": "x"}), ("c", {"leaf": "y"})])
    assert [p.hosts for p in screen(lone, IsolationSettings())] == [("a", "b", "c")]


def test_bad_node_is_split_out_then_confirmed_rail_by_rail() -> None:
    layout = make_layout()
    oracle = Oracle(layout, bad=["h005"])
    _, result = run(layout, oracle)
    assert [b.subject for b in result.blamed] == ["h005"] and not result.suspects
    assert result.rounds == 3 and result.jobs <= 3 * 64 and result.complete
    assert_rounds_disjoint(oracle.rounds)
    r2 = [p for p in oracle.rounds[1] if p.purpose == "split"]
    # each member of the failed group with a known-good host of its own leaf (the group before it passed)
    assert [(p.hosts, p.parent) for p in r2] == [(("h004", "h000"), "r1.screen.h004.4"),
                                                 (("h005", "h001"), "r1.screen.h004.4"),
                                                 (("h006", "h002"), "r1.screen.h004.4"),
                                                 (("h007", "h003"), "r1.screen.h004.4")]
    fabric = [p for p in oracle.rounds[1] if p.purpose == "fabric"]  # the ring L0-L1-L2-L3, four rails each
    assert len(fabric) == 16 and fabric[0].hosts == ("h008", "h009", "h016", "h017") and fabric[0].rail == "r0"
    confirm = [p for p in oracle.rounds[2] if p.purpose == "confirm"]
    assert [(p.hosts, p.rail) for p in confirm] == [(("h005", "h000"), f"r{j}") for j in range(4)]
    assert result.blamed[0].reason == ("its screen group 2 (cell L0) failed; failed with known-good h001 (round 2, "
                                       "every rail); failed with known-good h000 (round 3, 4 of 4 rails)")
    # the failed screen job is attributed to h005 alone, its other members are cleared
    assert result.attribution("r1.screen.h004.4") == (("node", "h005"),)
    assert {"h004", "h006", "h007"} <= set(result.cleared)


def test_link_is_told_from_its_node() -> None:
    layout = make_layout()
    oracle = Oracle(layout, links=[("h020", "r2")])
    _, result = run(layout, oracle)
    assert [(b.kind, b.subject) for b in result.blamed] == [("link", "h020 r2")]
    assert "h020" in result.cleared  # the node passes on its other rails
    assert result.blamed[0].reason == ("h020 passes on its other rails but fails pinned to r2 with known-good "
                                       "h017, h018 (rounds 3, 4)")
    assert result.rounds == 4
    assert_rounds_disjoint(oracle.rounds)


def test_leaf_whose_members_fail_only_with_outside_partners() -> None:
    layout = make_layout()
    oracle = Oracle(layout, leaves=["L2"])
    _, result = run(layout, oracle)
    assert [(b.kind, b.subject) for b in result.blamed] == [("leaf", "leaf L2")]
    assert result.blamed[0].hosts == tuple(f"h{i:03d}" for i in range(32, 48))
    assert "while 4 job(s) inside the leaf pass" in result.blamed[0].reason
    assert not result.blamed_hosts("node") and not result.suspects


def test_rail_plane_that_fails_only_when_pinned() -> None:
    layout = make_layout()
    oracle = Oracle(layout, rails=["r1"])
    _, result = run(layout, oracle)
    assert [(b.kind, b.subject) for b in result.blamed] == [("rail", "rail r1")]
    assert result.rounds == 2 and "fail across 4 leaf pair(s)" in result.blamed[0].reason


def test_a_job_slow_by_chance_blames_nobody() -> None:
    layout = make_layout()
    oracle = Oracle(layout, unlucky=["r1.screen.h016.4"])
    _, result = run(layout, oracle)
    assert not result.blamed and not result.suspects
    assert result.explanations["r1.screen.h016.4"] == ()  # every member passed its split: not reproduced
    assert result.attribution("r1.screen.h016.4") == ()


def test_without_rails_a_node_is_blamed_after_two_narrow_rounds() -> None:
    layout = build_layout([(f"h{i:03d}", {"leaf": f"L{i // 16}"}) for i in range(32)])
    oracle = Oracle(layout, bad=["h003"])
    _, result = run(layout, oracle)
    assert [b.subject for b in result.blamed] == ["h003"]
    assert [p.rail for p in oracle.rounds[2] if p.purpose == "confirm"] == [None]
    assert result.blamed[0].reason == ("its screen group 1 (cell L0) failed; failed with known-good h007 (round 2, "
                                       "every rail); failed with known-good h000 (round 3, every rail)")


def test_out_of_rounds_leaves_suspects_not_verdicts() -> None:
    layout = make_layout()
    oracle = Oracle(layout, bad=["h005"])
    _, result = run(layout, oracle, IsolationSettings(max_rounds=2))
    assert not result.blamed
    assert [(b.subject, b.proven) for b in result.suspects] == [("h005", False)]
    assert "not proven: the rounds ran out" in result.suspects[0].reason and result.stopped == "the rounds ran out"
    outcomes, small = run(layout, Oracle(layout, bad=["h005"]), IsolationSettings(max_jobs=20))
    assert len(outcomes) <= 20 and small.stopped == "the job budget ran out"


def test_a_missing_result_stops_the_isolation() -> None:
    layout = make_layout(16, 16)
    outcomes, complete = drive(layout, IsolationSettings(), lambda probes: [None] + [True] * (len(probes) - 1))
    assert not complete and len(outcomes) == 3
    result = conclude(layout, outcomes, IsolationSettings(), complete)
    assert not result.complete and not result.blamed


@pytest.mark.parametrize("seed", range(12))
def test_bounds_and_determinism_under_noise(seed: int) -> None:
    rng = random.Random(seed)
    layout = make_layout(128, 32, rails=8)
    bad = rng.sample(layout.hosts, rng.choice([0, 1, 2, 4, 8]))
    faults = {"bad": bad, "links": [(rng.choice(layout.hosts), "r3")], "leaves": ["L1"] if seed % 3 == 0 else []}
    first = Oracle(layout, **faults, noise=0.02, seed=seed)
    outcomes, result = run(layout, first)
    assert result.rounds <= 4 and result.jobs <= 3 * 128
    assert_rounds_disjoint(first.rounds)
    again = Oracle(layout, **faults, noise=0.02, seed=seed)
    assert run(layout, again)[0] == outcomes  # same results, same plan
    # the planner is a function of the outcomes so far: replanning any prefix gives the round that followed
    for n in range(1, result.rounds):
        done = [o for o in outcomes if o.probe.round <= n]
        assert next_round(layout, done, IsolationSettings()) == [o.probe for o in outcomes if o.probe.round == n + 1]


def test_blame_rules_need_repeated_evidence() -> None:
    def failed(round_: int, purpose: str, hosts: tuple[str, ...], rail: str | None = None) -> Outcome:
        return Outcome(Probe(round_, purpose, hosts, rail), ok=False)

    split, confirm = failed(2, "split", ("a", "g")), failed(3, "confirm", ("a", "h"), "r0")
    assert blame_rule(("node", "a"), [split, confirm]) and not blame_rule(("node", "a"), [split])
    assert not blame_rule(("node", "a"), [failed(1, "screen", ("a", "b")), split])
    assert not blame_rule(("link", "a", "r0"), [split, confirm])
    assert blame_rule(("link", "a", "r0"), [confirm, failed(4, "relink", ("a", "k"), "r0")])
    two = [failed(2, "fabric", ("a", "b"), "r0"), failed(2, "fabric", ("c", "d"), "r0")]
    three = [*two, failed(3, "refabric", ("e", "f"), "r0")]
    assert not blame_rule(("rail", "r0"), two)  # two slow jobs by chance never blame a switch
    assert blame_rule(("rail", "r0"), three)
    assert not blame_rule(("leafrail", "x", "r0"), three)  # a cell's rail: four jobs
    assert blame_rule(("leafrail", "x", "r0"), [*three, failed(3, "refabric", ("g", "h"), "r0")])
    same_hosts = [failed(2, "fabric", ("a", "b"), f"r{j}") for j in range(8)]
    assert not blame_rule(("leaf", "x"), same_hosts)  # one group on every rail: two disjoint host sets needed


def test_exercised_and_ledger_explanations() -> None:
    layout = build_layout([("a", {"leaf": "x"}), ("b", {"leaf": "y"})], rails=["r0", "r1"])
    pinned = Probe(2, "fabric", ("a", "b"), "r1")
    assert exercised(pinned, layout) == {("node", "a"), ("node", "b"), ("link", "a", "r1"), ("link", "b", "r1"),
                                         ("leaf", "x"), ("leaf", "y"), ("leafrail", "x", "r1"),
                                         ("leafrail", "y", "r1"), ("rail", "r1")}
    ledger = Ledger(layout, [Outcome(Probe(1, "screen", ("a", "b")), ok=True), Outcome(pinned, ok=False)])
    assert ledger.explain(ledger.outcomes[1]) == {("rail", "r1")}  # the all-rail job cleared the rest
    assert ledger.known_good == ("a", "b")


def test_settings_and_layout_reject_bad_values() -> None:
    assert IsolationSettings.from_mapping({"group_size": 4, "max_jobs": 0}) == IsolationSettings(group_size=4)
    for bad in ({"group_size": 1}, {"max_rounds": 0}, {"fabric_nodes": "2"}, {"max_jobs": -1}, {"group_size": True}):
        with pytest.raises(ValueError):
            IsolationSettings.from_mapping(bad)
    layout = make_layout(4, 2, rails=1)
    assert Layout.from_json(layout.to_json()) == layout
    for hostile in ([], {"hosts": ["a", "a"]}, {"hosts": ["../x"]}, {"hosts": ["a"], "cells": {"b": "x"}},
                    {"hosts": ["a"], "rails": [""]}):
        with pytest.raises(LayoutError):
            Layout.from_json(hostile)
