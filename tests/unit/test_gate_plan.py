"""The gate's budget plan (pure): estimates per GPU count, priority order, what is dropped first, site costs."""

from __future__ import annotations

import pytest

from healthcheck.core.profiles import Profile
from healthcheck.ops.gate.plan import PRIORITY, ActiveCost, GateCostError, load_test_costs, ordered, plan_gate

COSTS = {"gpuperf": ActiveCost(cost_s=6, per_gpu_s=1.5, timeout_s=45), "copy": ActiveCost(cost_s=4, per_gpu_s=0.6,
                                                                                    per_pair_s=0.1, timeout_s=30),
         "dcgm_diag": ActiveCost(cost_s=20, timeout_s=60), "nccl": ActiveCost(cost_s=8, per_gpu_s=0.5, timeout_s=45),
         "sdc": ActiveCost(cost_s=6, per_gpu_s=1, timeout_s=45)}


def test_estimates_scale_with_gpus_and_pairs():
    assert COSTS["gpuperf"].estimate(8) == 18.0
    assert COSTS["copy"].estimate(8) == pytest.approx(4 + 4.8 + 5.6)
    assert COSTS["copy"].estimate(1) == pytest.approx(4.6)


def test_everything_runs_when_the_budget_allows_in_priority_order():
    plan = plan_gate(list(reversed(PRIORITY)), COSTS, gpus=8, active_s=200)
    assert [t.name for t in plan.run] == ["gpuperf", "copy", "dcgm_diag", "nccl", "sdc"] and not plan.dropped
    assert [t.timeout_s for t in plan.run] == [45, 30, 60, 45, 45]


@pytest.mark.parametrize("active_s,runs", [
    (200, ["gpuperf", "copy", "dcgm_diag", "nccl", "sdc"]),
    (70, ["gpuperf", "copy", "dcgm_diag", "nccl"]),          # sdc goes first
    (60, ["gpuperf", "copy", "dcgm_diag"]),                  # then nccl
    (45, ["gpuperf", "copy", "nccl"]),                       # dcgm (20 s) no longer fits after gpuperf+copy
    (20, ["gpuperf"]),
    (10, []),
])
def test_short_budgets_drop_the_lowest_priority_tests_first(active_s, runs):
    plan = plan_gate(PRIORITY, COSTS, gpus=8, active_s=active_s)
    assert [t.name for t in plan.run] == runs
    assert sorted(plan.dropped) == sorted(set(PRIORITY) - set(runs))
    if plan.dropped:
        assert "for 8 GPUs, only" in next(iter(plan.dropped.values()))


def test_a_test_without_a_cost_is_never_run_and_timeouts_are_capped_by_the_budget():
    plan = plan_gate(["gpuperf", "nccl"], {"gpuperf": COSTS["gpuperf"]}, gpus=2, active_s=12)
    assert [t.name for t in plan.run] == ["gpuperf"] and plan.run[0].timeout_s == 12
    assert plan.dropped["nccl"].startswith("no estimated cost")
    assert ordered(["sdc", "gpuperf", "x", "copy"]) == ["gpuperf", "copy", "sdc", "x"]


def test_site_costs_from_the_profile_replace_the_shipped_fields():
    shipped = load_test_costs()
    assert set(shipped) == set(PRIORITY) and shipped["dcgm_diag"].cost_s == 20.0
    site = Profile(name="site", settings={"gate": {"costs": {"dcgm_diag": {"cost_s": 9}, "extra": {"cost_s": 1}}}})
    merged = load_test_costs(site)
    assert merged["dcgm_diag"].cost_s == 9.0 and merged["dcgm_diag"].timeout_s == 60.0
    assert merged["extra"].cost_s == 1.0
    with pytest.raises(GateCostError, match="cost_s must be seconds"):
        load_test_costs(Profile(name="bad", settings={"gate": {"costs": {"sdc": {"cost_s": "soon"}}}}))
