"""Which active tests ``healthcheck gate`` runs inside its budget, and which it drops, in a documented order.

    costs = load_test_costs(profile)                  # costs.yaml, then the profile's settings.gate.costs
    plan = plan_gate(["gpuperf", "copy", "dcgm_diag", "nccl", "sdc"], costs, gpus=8, active_s=45)
    [t.name for t in plan.run]                        # ["gpuperf", "copy", "nccl"]
    plan.dropped["sdc"]                               # "estimated 14 s, only 2.4 s left of the 45 s ..."

Order (``PRIORITY``): the GPU micro-tests (GEMM, memory bandwidth), the copy paths, ``dcgmi diag -r 1``, the
node's NCCL all_reduce, the SDC check. Each test is taken, in that order, when its estimate still fits what is
left; so when the budget is short the SDC check goes first, then NCCL, DCGM, the copy paths and the GPU
micro-tests last. A test without an entry in the table has an unknown cost and is never taken. Pure: no I/O
beyond reading the shipped table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from importlib.resources import files
from typing import Any

import yaml

from healthcheck.core.profiles import Profile

PRIORITY = ("gpuperf", "copy", "dcgm_diag", "nccl", "sdc")
COSTS_FILE = "costs.yaml"
_FIELDS = ("cost_s", "per_gpu_s", "per_pair_s", "timeout_s")


class GateCostError(ValueError):
    pass


@dataclass(frozen=True)
class ActiveCost:
    """Estimated seconds: ``cost_s + per_gpu_s * gpus + per_pair_s * gpus * (gpus - 1)``; killed at ``timeout_s``."""

    cost_s: float
    per_gpu_s: float = 0.0
    per_pair_s: float = 0.0
    timeout_s: float = 60.0
    why: str = ""

    def estimate(self, gpus: int) -> float:
        return self.cost_s + self.per_gpu_s * gpus + self.per_pair_s * gpus * max(gpus - 1, 0)


def parse_test_costs(raw: Any, source: str) -> dict[str, ActiveCost]:
    """``{test: {cost_s, per_gpu_s, per_pair_s, timeout_s, why}}`` -> ActiveCost; a bad entry raises naming it."""
    if not isinstance(raw, Mapping):
        raise GateCostError(f"{source}: expected a mapping of test -> costs, got {type(raw).__name__}")
    table = {}
    for name, entry in raw.items():
        if not isinstance(entry, Mapping) or "cost_s" not in entry:
            raise GateCostError(f"{source}: test {name!r} needs cost_s (seconds)")
        values = {}
        for key in _FIELDS:
            value = entry.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise GateCostError(f"{source}: test {name!r}: {key} must be seconds >= 0, got {value!r}")
            values[key] = float(value)
        table[str(name)] = ActiveCost(**values, why=" ".join(str(entry.get("why", "")).split()))
    return table


def load_test_costs(profile: Profile | None = None) -> dict[str, ActiveCost]:
    """The shipped table, with the profile's ``settings.gate.costs`` entries laid over it (a site's
    measurements: the fields given replace the shipped ones)."""
    doc = yaml.safe_load(files("healthcheck.ops.gate").joinpath(COSTS_FILE).read_text()) or {}
    table = parse_test_costs(doc.get("tests") or {}, COSTS_FILE)
    site = profile.setting("gate.costs") if profile is not None else None
    if site:
        if not isinstance(site, Mapping):
            raise GateCostError(f"profile {profile.name if profile else ''}: settings.gate.costs must be a mapping")
        for name, entry in site.items():
            base = table.get(str(name))
            merged = {**({k: getattr(base, k) for k in (*_FIELDS, "why")} if base else {}), **dict(entry or {})}
            table[str(name)] = parse_test_costs({name: merged}, "settings.gate.costs")[str(name)]
    return table


@dataclass(frozen=True)
class PlannedTest:
    name: str
    estimate_s: float
    timeout_s: float


@dataclass(frozen=True)
class GatePlan:
    run: tuple[PlannedTest, ...]
    dropped: Mapping[str, str]           # test -> why it is not run (budget, unknown cost)
    active_s: float                       # seconds the active tests were given

    def without(self, name: str, why: str) -> GatePlan:
        return replace(self, run=tuple(t for t in self.run if t.name != name), dropped={**self.dropped, name: why})


def ordered(tests: Sequence[str]) -> list[str]:
    """``tests`` in priority order (unknown names last, in the order given)."""
    rank = {name: i for i, name in enumerate(PRIORITY)}
    return sorted(dict.fromkeys(tests), key=lambda t: rank.get(t, len(PRIORITY)))


def plan_gate(tests: Sequence[str], costs: Mapping[str, ActiveCost], gpus: int, active_s: float) -> GatePlan:
    """Take each test, in priority order, when its estimate fits what is left of ``active_s``."""
    left = active_s
    run: list[PlannedTest] = []
    dropped: dict[str, str] = {}
    for name in ordered(tests):
        cost = costs.get(name)
        if cost is None:
            dropped[name] = f"no estimated cost in {COSTS_FILE} or settings.gate.costs: never run under a budget"
            continue
        estimate = cost.estimate(gpus)
        if estimate > left:
            dropped[name] = (f"estimated {estimate:.1f} s for {gpus} GPUs, only {max(left, 0):.1f} s left of the "
                             f"{active_s:.1f} s the budget gives active tests")
            continue
        run.append(PlannedTest(name, estimate, min(cost.timeout_s, max(left, 0.0))))
        left -= estimate
    return GatePlan(run=tuple(run), dropped=dropped, active_s=active_s)


def fits_now(test: PlannedTest, seconds_left: float) -> bool:
    """At run time: does the test's estimate still fit the time actually left (earlier tests may overrun)?"""
    return test.estimate_s <= seconds_left
