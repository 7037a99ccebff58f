"""Probe cost and job safety as data, and the ``--budget`` selection of ``healthcheck node``.

    table = load_costs()                       # probes/costs.yaml: {"gpu": ProbeCost(cost_s=2.0, job_safe=True)}
    chosen, left_out = select_within_budget(probes.select(), table, budget_s=10)
    left_out["dcgm"]                            # "not safe while a job runs: dcgmi diag -r 1 ..."

Selection is greedy in registry order (the order findings are reported): a probe is taken when it
is job-safe and its declared cost still fits in what is left of the budget. A probe without an
entry has an unknown cost and is never taken: an unknown cost never counts as cheap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files

import yaml

from healthcheck.core.spec import Probe

COSTS_FILE = "costs.yaml"


class CostTableError(ValueError):
    pass


@dataclass(frozen=True)
class ProbeCost:
    """Typical wall seconds on a busy node, whether it may run beside a job, and why."""

    cost_s: float
    job_safe: bool
    why: str = ""


def parse_costs(text: str, source: str = COSTS_FILE) -> dict[str, ProbeCost]:
    """``probes: {name: {cost_s, job_safe, why}}`` -> ``{name: ProbeCost}``; bad entries raise naming them."""
    doc = yaml.safe_load(text) or {}
    entries = doc.get("probes") if isinstance(doc, dict) else None
    if not isinstance(entries, dict):
        raise CostTableError(f"{source}: no 'probes:' mapping")
    table = {}
    for name, entry in entries.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("job_safe"), bool):
            raise CostTableError(f"{source}: probe {name!r} needs cost_s (seconds) and job_safe (true/false)")
        cost = entry.get("cost_s")
        if isinstance(cost, bool) or not isinstance(cost, int | float) or cost < 0:
            raise CostTableError(f"{source}: probe {name!r}: cost_s must be a number of seconds >= 0, got {cost!r}")
        table[str(name)] = ProbeCost(cost_s=float(cost), job_safe=entry["job_safe"], why=str(entry.get("why", "")))
    return table


def load_costs() -> dict[str, ProbeCost]:
    """The built-in table shipped in the probes package."""
    return parse_costs(files("healthcheck.probes").joinpath(COSTS_FILE).read_text())


def select_within_budget(probes: Sequence[Probe], table: Mapping[str, ProbeCost], budget_s: float | None,
                         job_safe_only: bool = True) -> tuple[list[Probe], dict[str, str]]:
    """The probes to run and, for each one left out, why. ``budget_s=None``: no cost limit
    (job safety still applies when ``job_safe_only``)."""
    chosen: list[Probe] = []
    left_out: dict[str, str] = {}
    remaining = budget_s
    for probe in probes:
        cost = table.get(probe.name)
        if cost is None:
            left_out[probe.name] = f"no declared cost in {COSTS_FILE}: never selected under a budget"
        elif job_safe_only and not cost.job_safe:
            left_out[probe.name] = f"not safe while a job runs: {cost.why}"
        elif remaining is not None and cost.cost_s > remaining:
            left_out[probe.name] = (f"declared cost {cost.cost_s:g}s exceeds the {remaining:g}s left of the "
                                    f"{budget_s:g}s budget")
        else:
            chosen.append(probe)
            if remaining is not None:
                remaining -= cost.cost_s
    return chosen, left_out
