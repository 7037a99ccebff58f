"""Probe cost/job-safety table and the --budget selection."""

from __future__ import annotations

import pytest

from healthcheck import probes
from healthcheck.ops.budget import CostTableError, ProbeCost, load_costs, parse_costs, select_within_budget


def test_every_builtin_probe_declares_cost_and_job_safety() -> None:
    table = load_costs()
    assert sorted(table) == sorted(p.name for p in probes.all_probes())
    assert table["dcgm"].job_safe is False and table["gpu"] == ProbeCost(
        cost_s=2.0, job_safe=True, why="one nvidia-smi -q -x (about 1-2 s for 8 GPUs; persistence mode keeps it fast)")


@pytest.mark.parametrize(("budget", "chosen"), [
    (3, ["system", "gpu"]),
    (10, ["system", "gpu", "pci", "topology", "nvlink", "fabric", "imex", "infiniband", "ras"]),
    (30, ["system", "gpu", "pci", "topology", "nvlink", "fabric", "imex", "xid", "infiniband", "dcgm_fields", "ras",
          "rates", "resources", "versions", "assets"]),
])
def test_budget_picks_job_safe_probes_in_registry_order(budget: float, chosen: list[str]) -> None:
    picked, left_out = select_within_budget(probes.select(), load_costs(), budget)
    assert [p.name for p in picked] == chosen
    assert left_out["dcgm"].startswith("not safe while a job runs: dcgmi diag")
    assert set(left_out) | set(chosen) == {p.name for p in probes.all_probes()}


def test_budget_reason_names_the_remaining_seconds() -> None:
    _, left_out = select_within_budget(probes.select(["gpu", "versions"]), load_costs(), 5)
    assert left_out == {"versions": "declared cost 4s exceeds the 3s left of the 5s budget"}


def test_probe_without_declared_cost_is_never_selected() -> None:
    picked, left_out = select_within_budget(probes.select(["gpu", "ras"]), {"gpu": ProbeCost(1.0, True)}, 100)
    assert [p.name for p in picked] == ["gpu"]
    assert left_out == {"ras": "no declared cost in costs.yaml: never selected under a budget"}


@pytest.mark.parametrize(("text", "message"), [
    ("probes: {gpu: {cost_s: 2}}", "probe 'gpu' needs cost_s (seconds) and job_safe (true/false)"),
    ("probes: {gpu: {cost_s: -1, job_safe: true}}", "probe 'gpu': cost_s must be a number of seconds >= 0, got -1"),
    ("probes: {gpu: {cost_s: fast, job_safe: true}}", "got 'fast'"),
    ("gpu: 1", "no 'probes:' mapping"),
])
def test_bad_cost_table_names_the_entry(text: str, message: str) -> None:
    with pytest.raises(CostTableError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_costs(text)


def test_probe_order_does_not_depend_on_which_probe_module_was_imported_first() -> None:
    """A module imported early (a test, a plugin importing ``probes.rates``) registers first; the
    registry still lists probes in the report order of ``BUILTIN``."""
    import subprocess
    import sys

    code = ("import healthcheck.probes.rates, healthcheck.probes.gpu\n"
            "from healthcheck import probes\n"
            "print(' '.join(p.name for p in probes.all_probes()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.split() == ["system", "gpu", "pci", "topology", "nvlink", "fabric", "imex", "xid", "infiniband",
                                  "dcgm", "dcgm_fields", "ras", "rates", "resources", "versions", "assets"]
