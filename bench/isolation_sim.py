"""Simulated acceptance runs: the isolation planner and today's pairs plan against injected faults and noise.

    nice -n 10 python bench/isolation_sim.py --sizes 64 256 1024 4096 --trials 200 --json /tmp/sim.json
    python bench/isolation_sim.py --sizes 1024 --bad 8 --faults 2 --trials 20    # one case

The planner and the pairs plan are the product's own functions (``benchmarks.isolate`` next_round /
conclude, ``benchmarks.plan`` plan_jobs / retest_pairs, ``benchmarks.attribution`` attribute), and
each job is graded by the product's band rule against the h100-sxm5-8x profile's expectations
(``nccl.busbw_expectation`` + ``grade_bands``; a job passes unless it FAILs). Only the job runner is
fake: a job's busbw is expected x U(0.88, 1.02), times the slowest of what is wrong in it:
- a bad node (every job with it): x U(0.15, 0.45);
- a bad link (one HCA, cable or leaf port of a node): jobs over every rail with that node x U(0.15, 0.45)
  (the slow rail paces the collective), jobs pinned to that rail x U(0.1, 0.4);
- a bad leaf (its uplinks): jobs with hosts in it and in another leaf x U(0.15, 0.45), jobs inside it fine;
- a bad rail plane: jobs pinned to that rail across leaves x U(0.15, 0.45); over every rail x U(0.9, 0.97)
  (NCCL hides it: "fails only with NCCL_IB_HCA on that rail");
- noise, in every trial: each job slow by chance with probability 2 % (x U(0.15, 0.45)), and one flaky
  link (a healthy node's HCA) that slows the jobs using it one time in three.
Topology: leaves of 32 hosts (16 at N=64), 8 rails. Modelled wall time = rounds x 60 s (nccl-tests at
8-16 GiB, 20+5 iterations, plus the launch; the jobs of a round run at once). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from healthcheck.benchmarks.attribution import PairResult, attribute, retest_candidates  # noqa: E402
from healthcheck.benchmarks.bands import merged_bands  # noqa: E402
from healthcheck.benchmarks.isolate import IsolationSettings, conclude, drive  # noqa: E402
from healthcheck.benchmarks.nccl_groups import busbw_expectation  # noqa: E402
from healthcheck.benchmarks.plan import plan_jobs, retest_pairs  # noqa: E402
from healthcheck.benchmarks.topology import Layout, build_layout  # noqa: E402
from healthcheck.core.grading import grade_bands  # noqa: E402
from healthcheck.core.model import Status  # noqa: E402
from healthcheck.core.profiles import Profile, load_profile  # noqa: E402

JOB_S = 60.0
P_SLOW = 0.02
SLOW = (0.15, 0.45)  # what a fault leaves of a job's busbw: always below the 50 % FAIL band
FLAKY = 1 / 3
RAILS = 8


@dataclass
class Faults:
    bad: set[str] = field(default_factory=set)
    links: set[tuple[str, str]] = field(default_factory=set)
    leaves: set[str] = field(default_factory=set)
    rails: set[str] = field(default_factory=set)
    flaky: set[tuple[str, str]] = field(default_factory=set)

    def fabric(self) -> set[tuple[str, ...]]:
        return ({("link", h, r) for h, r in self.links} | {("leaf", c) for c in self.leaves}
                | {("rail", r) for r in self.rails})

    def healthy(self, host: str) -> bool:
        return host not in self.bad and all(h != host for h, _ in self.links | self.flaky)


def make_layout(n: int) -> Layout:
    per_leaf = 16 if n <= 64 else 32
    hosts = [(f"n{i:04d}", {"leaf": f"L{i // per_leaf:03d}"}) for i in range(n)]
    return build_layout(hosts, rails=[f"mlx5_{r}:1" for r in range(RAILS)])


def draw_faults(layout: Layout, k: int, f: int, rng: random.Random) -> Faults:
    faults = Faults(bad=set(rng.sample(layout.hosts, k)))
    healthy = [h for h in layout.hosts if h not in faults.bad]
    for _ in range(f):
        kind = rng.choice(("link", "leaf", "rail"))
        if kind == "link":
            faults.links.add((rng.choice(healthy), rng.choice(layout.rails)))
        elif kind == "leaf":
            faults.leaves.add(rng.choice(sorted({layout.cell(h) for h in layout.hosts} - faults.leaves)))
        else:
            faults.rails.add(rng.choice(sorted(set(layout.rails) - faults.rails)))
    spare = [h for h in healthy if all(h != x for x, _ in faults.links)]
    faults.flaky.add((rng.choice(spare), rng.choice(layout.rails)))
    return faults


class FakeRunner:
    """Busbw ratio (measured / expected) of a job over ``hosts`` on ``rail`` (None: every rail)."""

    def __init__(self, layout: Layout, faults: Faults, rng: random.Random, profile: Profile) -> None:
        self.layout, self.faults, self.rng = layout, faults, rng
        self.expect = {shape: busbw_expectation(profile, "nccl.all_reduce", shape) for shape in
                       ("pair", "group", "group_rail")}

    def ratio(self, hosts: Sequence[str], rail: str | None) -> float:
        u, f = self.rng.uniform, self.faults
        factors = [1.0]
        if any(h in f.bad for h in hosts):
            factors.append(u(*SLOW))
        rails = (rail,) if rail else self.layout.rails
        for h in hosts:
            for r in rails:
                hard = (h, r) in f.links
                if hard or ((h, r) in f.flaky and self.rng.random() < FLAKY):
                    factors.append(u(0.1, 0.4) if rail else u(*SLOW))
        if len({self.layout.cell(h) for h in hosts}) >= 2:
            if {self.layout.cell(h) for h in hosts} & f.leaves:
                factors.append(u(*SLOW))
            if rail in f.rails:
                factors.append(u(*SLOW))
            elif rail is None and f.rails:
                factors.append(u(0.9, 0.97))
        if self.rng.random() < P_SLOW:
            factors.append(u(*SLOW))
        return u(0.88, 1.02) * min(factors)

    def passes(self, hosts: Sequence[str], rail: str | None, shape: str) -> bool:
        exp = self.expect[shape]
        assert exp is not None
        busbw = self.ratio(hosts, rail) * float(exp.value)
        return grade_bands(replace(exp, bands=merged_bands(exp)), busbw) is not Status.FAIL


@dataclass(frozen=True)
class Score:
    found_all: bool
    wrong_blame: bool
    found: int          # bad nodes blamed
    wrong: int          # healthy nodes blamed (a node or its link)
    fabric_found: bool
    fabric_wrong: bool
    rounds: int
    jobs: int


def run_isolation(layout: Layout, runner: FakeRunner, faults: Faults) -> Score:
    settings = IsolationSettings()

    def run_round(probes: Sequence) -> list[bool]:
        return [runner.passes(p.hosts, p.rail, "group_rail" if p.rail else "group") for p in probes]

    outcomes, complete = drive(layout, settings, run_round)
    result = conclude(layout, outcomes, settings, complete)
    nodes = result.blamed_hosts("node")
    named = {b.entity for b in result.blamed if b.kind != "node"}
    flaky = {("link", h, r) for h, r in faults.flaky}
    failed = nodes | result.blamed_hosts("link")  # a link blame FAILs its node too (it gets drained)
    return Score(found_all=faults.bad <= nodes, wrong_blame=any(faults.healthy(h) for h in failed),
                 found=len(faults.bad & nodes), wrong=sum(faults.healthy(h) for h in failed),
                 fabric_found=faults.fabric() <= named, fabric_wrong=bool(named - faults.fabric() - flaky),
                 rounds=result.rounds, jobs=result.jobs)


def run_pairs(layout: Layout, runner: FakeRunner, faults: Faults) -> Score:
    """Today's acceptance pairs: 3 rounds of disjoint pairs, then retests against known-good partners."""
    jobs = plan_jobs("nccl", ["all_reduce_perf"], ["pair"], layout.hosts, {"pair": 8}, pair_round_count=3)
    first = [PairResult(j.job_id, (j.hosts[0], j.hosts[1]), runner.passes(j.hosts, None, "pair")) for j in jobs]
    suspects, good = retest_candidates(first)
    stages = retest_pairs(suspects, good, [r.hosts for r in first])
    retests = [PairResult(f"retest-{a}-{b}", (a, b), runner.passes((a, b), None, "pair"), retest=True)
               for stage in stages for a, b in stage]
    nodes, pairs = attribute(first + retests)
    bad = {h for h, n in nodes.items() if n.verdict == "bad"}
    link_hosts = {h for p in pairs if p.blame == "link" for h in p.hosts}
    found = {("link", h, r) for h, r in faults.links if h in link_hosts}
    return Score(found_all=faults.bad <= bad, wrong_blame=any(faults.healthy(h) for h in bad),
                 found=len(faults.bad & bad), wrong=sum(faults.healthy(h) for h in bad),
                 fabric_found=faults.fabric() <= found, fabric_wrong=False,
                 rounds=len({j.stage for j in jobs}) + len(stages), jobs=len(first) + len(retests))


def case(n: int, k: int, f: int, trials: int, profile: Profile, plans: Sequence[str]) -> dict[str, dict]:
    layout = make_layout(n)
    out = {}
    for plan in plans:
        scores, clock = [], time.process_time()
        for t in range(trials):
            rng = random.Random(f"{n}-{k}-{f}-{t}")
            faults = draw_faults(layout, k, f, rng)
            runner = FakeRunner(layout, faults, random.Random(f"{n}-{k}-{f}-{t}-{plan}"), profile)
            scores.append((run_isolation if plan == "isolate" else run_pairs)(layout, runner, faults))
        out[plan] = summarise(scores, f, time.process_time() - clock)
    return out


def summarise(scores: Sequence[Score], f: int, cpu_s: float) -> dict:
    pct = lambda xs: round(100.0 * sum(xs) / len(xs), 1)  # noqa: E731
    return {"trials": len(scores), "bad_found_pct": pct([s.found_all for s in scores]),
            "no_wrong_blame_pct": pct([not s.wrong_blame for s in scores]),
            "bad_found_mean": round(statistics.mean(s.found for s in scores), 3),
            "wrong_blamed_mean": round(statistics.mean(s.wrong for s in scores), 3),
            "fabric_found_pct": pct([s.fabric_found for s in scores]) if f else None,
            "fabric_wrong_pct": pct([s.fabric_wrong for s in scores]),
            "rounds_mean": round(statistics.mean(s.rounds for s in scores), 2),
            "rounds_max": max(s.rounds for s in scores),
            "jobs_mean": round(statistics.mean(s.jobs for s in scores), 1), "jobs_max": max(s.jobs for s in scores),
            "wall_min_mean": round(statistics.mean(s.rounds for s in scores) * JOB_S / 60, 1),
            "cpu_s": round(cpu_s, 1)}


def table(rows: Sequence[dict]) -> str:
    head = ("| N | bad nodes | bad links/switches | plan | all bad found | no healthy blamed | links/switches "
            "found | wrong link/switch | rounds mean (max) | jobs mean (max) | wall min |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        s = r["score"]
        fabric = "–" if s["fabric_found_pct"] is None else f"{s['fabric_found_pct']} %"
        lines.append(f"| {r['n']} | {r['k']} | {r['f']} | {r['plan']} | {s['bad_found_pct']} % | "
                     f"{s['no_wrong_blame_pct']} % | {fabric} | {s['fabric_wrong_pct']} % | {s['rounds_mean']} "
                     f"({s['rounds_max']}) | {s['jobs_mean']} ({s['jobs_max']}) | {s['wall_min_mean']} |")
    return head + "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024, 4096])
    parser.add_argument("--bad", type=int, nargs="+", default=[0, 1, 2, 4, 8])
    parser.add_argument("--faults", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--trials-4096", type=int, default=None, help="trials at N=4096 (default: --trials)")
    parser.add_argument("--plans", nargs="+", default=["isolate", "pairs"])
    parser.add_argument("--json", type=Path, help="write every case's numbers here")
    args = parser.parse_args()
    profile = load_profile("h100-sxm5-8x")
    rows = []
    for n in args.sizes:
        trials = args.trials_4096 if n >= 4096 and args.trials_4096 else args.trials
        for k in args.bad:
            for f in args.faults:
                for plan, score in case(n, k, f, trials, profile, args.plans).items():
                    rows.append({"n": n, "k": k, "f": f, "plan": plan, "score": score})
                    print(table(rows[-1:]).splitlines()[-1], f"cpu {score['cpu_s']} s", flush=True)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
