"""The ``domain`` job shape: one nvloom / dcgmi mndiag job per NVLink domain the inventory names (the host var
``nvlink_domain``, else the inventory group), its id and component, and its rebuild from a stored id."""

from __future__ import annotations

from healthcheck import benchmarks
from healthcheck.benchmarks.plan import plan_jobs
from healthcheck.benchmarks.stored import job_from_id
from healthcheck.core.model import Host
from healthcheck.core.profiles import load_profile
from healthcheck.run.benchmarks import plan_benchmark

GB200 = load_profile("gb200-nvl72-tray")


def racks(*counts: int) -> list[Host]:
    return [Host(f"r{r:02d}t{t:02d}", group=f"rack{r:02d}") for r, n in enumerate(counts, start=1)
            for t in range(1, n + 1)]


def test_one_job_per_inventory_group_with_one_rank_per_gpu():
    jobs = plan_benchmark(benchmarks.get("nvloom"), racks(18, 17), GB200,
                          {"plan": "quick", "nvloom.tests": ["bisect_device_to_device_write_sm"]})
    assert [(j.job_id, len(j.hosts), j.ranks, j.component) for j in jobs] == [
        ("nvloom-bisect_device_to_device_write_sm-domain-18nodes-r01t01", 18, 72, "domain (18 nodes)"),
        ("nvloom-bisect_device_to_device_write_sm-domain-17nodes-r02t01", 17, 68, "domain (17 nodes)")]
    mndiag = plan_benchmark(benchmarks.get("mndiag"), racks(18, 17), GB200, {"plan": "acceptance"})
    assert [(j.test, j.hosts[0], j.ranks_per_host) for j in mndiag] == [("mnubergemm", "r01t01", 1),
                                                                      ("mnubergemm", "r02t01", 1)]


def test_the_nvlink_domain_var_wins_over_the_group_and_hosts_without_either_form_one_domain():
    hosts = [Host("a1", group="row1", vars={"nvlink_domain": "A"}),
             Host("b1", group="row1", vars={"nvlink_domain": "B"}),
             Host("a2", group="row2", vars={"nvlink_domain": "A"}), Host("x1"), Host("x2")]
    jobs = plan_benchmark(benchmarks.get("mndiag"), hosts, GB200, {"plan": "quick"})
    assert [j.hosts for j in jobs] == [("a1", "a2"), ("b1",), ("x1", "x2")]
    assert plan_jobs("mndiag", ["mnubergemm"], ["domain"], ["h1", "h2"], {"domain": 1}) == plan_jobs(
        "mndiag", ["mnubergemm"], ["domain"], ["h1", "h2"], {"domain": 1}, domain_of={})


def test_a_stored_domain_job_is_rebuilt_from_its_id_when_it_covers_the_bundle():
    names = [f"r07t{i:02d}" for i in range(1, 19)]
    job = job_from_id("nvloom-gpu-to-rack-domain-18nodes-r07t01", names)
    assert (job.benchmark, job.test, job.shape, job.hosts) == ("nvloom", "gpu-to-rack", "domain", tuple(names))
    assert job_from_id("mndiag-mnubergemm-domain-17nodes-r07t01", names) is None   # which 17? not guessed


def test_inventory_accepts_nvlink_domain_and_groups_name_racks():
    import pytest

    from healthcheck.benchmarks.domain import domain_label
    from healthcheck.inventory.hosts import InventoryError, parse_inventory

    inv = parse_inventory({"groups": {"rack07": {"hosts": "r07t[01-02]", "vars": {"profile": "gb200-nvl72-tray"}}},
                           "hosts": {"r07t02": {"nvlink_domain": "nvl-a"}}}, "inv.yaml")
    assert [domain_label(h) for h in inv.hosts] == ["rack07", "nvl-a"]
    assert domain_label(parse_inventory({"hosts": {"r07t01": {"nvlink_domain": 7}}}, "inv.yaml").hosts[0]) == "7"
    with pytest.raises(InventoryError, match="nvlink_domain"):
        parse_inventory({"hosts": {"r07t01": {"nvlink_domain": "row1/rack7"}}}, "inv.yaml")
