"""nccl-tests across whole GB200 NVL72 domains: the corpus's real 72-, 144- and 1,440-GPU all_reduce tails
(coreweave/nccl-tests README, NCCL 2.26.2) graded per domain. A cluster job whose hosts are exactly one NVLink
domain of the profile (18 trays x 4 GPUs, one inventory domain) gets ``nccl.all_reduce.domain.busbw_gbps``;
multi-rack jobs get the cluster expectation."""

from __future__ import annotations

from healthcheck.benchmarks import BenchContext, get
from healthcheck.benchmarks.domain import one_domain
from healthcheck.benchmarks.plan import Job
from healthcheck.core.model import Host, Status
from healthcheck.core.profiles import load_profile
from tests.conftest import corpus_text

GB200 = load_profile("gb200-nvl72-tray")
TAILS = {72: "nvl72-72gpu-single-rack", 144: "nvl72-144gpu-2racks", 1440: "1440gpu-20racks"}


def trays(n: int) -> tuple[str, ...]:
    return tuple(f"r{i // 18:02d}t{i % 18 + 1:02d}" for i in range(n))


def inventory(hosts, **vars_by_host) -> dict[str, Host]:
    return {h: Host(h, group=f"rack{h[1:3]}", vars=vars_by_host.get(h, {})) for h in hosts}


def job(hosts) -> Job:
    return Job(job_id=f"nccl-all_reduce_perf-cluster-{len(hosts)}nodes-{hosts[0]}", benchmark="nccl",
               test="all_reduce_perf", shape="cluster", hosts=tuple(hosts), ranks_per_host=4)


def busbw(findings):
    return {(f.check, f.status, f.value) for f in findings if f.check.endswith(".busbw")}


def graded(gpus: int, hosts=None, inv=None, profile=GB200, text=None):
    hosts = hosts or trays(gpus // 4)
    spec = get("nccl")
    result = spec.parse(text or corpus_text(f"nccl-tests/all_reduce-gb200-{TAILS[gpus]}-tail.txt"))
    return spec.evaluate(job(hosts), result, BenchContext(profile, inv or inventory(hosts)))


def test_one_rack_is_graded_against_the_domain_expectation():
    findings = graded(72)
    assert busbw(findings) == {("nccl.all_reduce.domain.busbw", Status.PASS, 846.82)}
    one = next(f for f in findings if f.check == "nccl.all_reduce.domain.busbw")
    assert "8 GiB over one NVLink domain 846.8 GB/s = 101% of expected 840 GB/s" in one.message
    assert len([f for f in findings if f.check == "nccl.all_reduce.domain.busbw"]) == 18
    assert not [f for f in findings if f.status in (Status.FAIL, Status.ERROR)]


def test_two_and_twenty_racks_are_graded_against_the_cluster_expectation():
    assert busbw(graded(144)) == {("nccl.all_reduce.cluster.busbw", Status.PASS, 820.36)}
    twenty = graded(1440)
    assert busbw(twenty) == {("nccl.all_reduce.cluster.busbw", Status.PASS, 405.74)}
    cluster = [f for f in twenty if f.check == "nccl.all_reduce.cluster.busbw"]
    assert len(cluster) == 360 and "101% of expected 400 GB/s" in cluster[0].message


def test_hosts_of_two_inventory_domains_are_not_one_domain():
    hosts = trays(18)
    inv = inventory(hosts, **{h: {"nvlink_domain": "rackA" if i < 9 else "rackB"} for i, h in enumerate(hosts)})
    assert busbw(graded(72, hosts, inv)) == {("nccl.all_reduce.cluster.busbw", Status.PASS, 846.82)}
    scope = one_domain(job(hosts), BenchContext(GB200, inv))
    assert not scope.one_domain and scope.reason == "hosts in 2 inventory domains (rackA, rackB)"
    assert one_domain(job(hosts), BenchContext(GB200, inventory(hosts))).reason == (
        "18 trays x 4 GPUs = the 72 GPUs of one NVLink domain")


def test_a_slow_domain_warns_and_a_short_job_fails_its_rank_count():
    text = corpus_text(f"nccl-tests/all_reduce-gb200-{TAILS[72]}-tail.txt")
    assert "834.57" in text and "846.82" in text
    slow = text.replace("834.57", "640.11").replace("846.82", "651.20")   # the real layout, a slower domain
    assert busbw(graded(72, text=slow)) == {("nccl.all_reduce.domain.busbw", Status.WARN, 651.2)}
    short = graded(72, hosts=trays(17))             # 17 trays planned, the tail's last rank is 71
    ranks = {(f.check, f.status, f.value) for f in short if f.check.endswith(".ranks")}
    assert ranks == {("nccl.all_reduce.ranks", Status.FAIL, 72)} and not busbw(short)


def test_gb300_domain_expectation_stands_on_the_gb200_measurement_and_says_so():
    gb300 = load_profile("gb300-nvl72-tray")
    exp = gb300.expect("nccl.all_reduce.domain.busbw_gbps")
    assert exp.value == 840 and "GB300 NVL72" in exp.source and "no published GB300" in exp.source
    assert busbw(graded(72, profile=gb300)) == {("nccl.all_reduce.domain.busbw", Status.PASS, 846.82)}
