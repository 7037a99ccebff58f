"""benchmarks/nccl_transport.py: which network NCCL used (NET/IB vs NET/Socket, HCAs, GDR), graded per host."""

from __future__ import annotations

from healthcheck.benchmarks import BenchContext
from healthcheck.benchmarks.nccl import evaluate_nccl, nccl_program, parse_nccl_tests
from healthcheck.benchmarks.nccl_transport import parse_nccl_transport
from healthcheck.benchmarks.plan import Job
from healthcheck.core.model import Host, Status
from healthcheck.core.profiles import Expectation, Profile
from tests.conftest import corpus_text, fixture_text

BOOTSTRAP = "nccl-tests/all_reduce-h100-2node-16rank-NCCL-WARN-bootstrap-family-33621-internal-error-mpirun-abort.txt"
SOCKET = "nccl-tests/all_reduce-h100-2node-16gpu-socket-fallback-22.9GBs-8G-16G.txt"
HEALTHY = "nccl-tests/all_reduce-h100-2node-16gpu-healthy-388GBs-8G-16G.txt"


def _profile(pair_busbw: float = 24.0, hcas: int | None = 8) -> Profile:
    """A small cluster whose pair expectation a TCP-socket run can meet: bandwidth alone would pass it."""
    exp = {"nccl.all_reduce.pair.busbw_gbps": Expectation("nccl.all_reduce.pair.busbw_gbps", "test", value=pair_busbw,
                                                          unit="GB/s")}
    if hcas is not None:
        exp["ib.hca.count"] = Expectation("ib.hca.count", "test: 8 compute HCAs", op="eq", value=hcas, unit="HCAs")
    return Profile(name="test", expectations=exp)


def _job(hosts: tuple[str, ...] = ("gpu-h100-01", "gpu-h100-02"), rail: str | None = None) -> Job:
    return Job(job_id="nccl-all_reduce_perf-pair-x", benchmark="nccl", test="all_reduce_perf", shape="pair",
               hosts=hosts, ranks_per_host=8, rail=rail)


def _ctx(profile: Profile, *hosts: str) -> BenchContext:
    return BenchContext(profile, {h: Host(h) for h in hosts})


def _transport(findings):
    return {f.host: f for f in findings if f.check == "nccl.all_reduce.transport"}


def _real_ib_lines() -> str:
    """The NCCL INFO lines of a real 2-node H100 run (NCCL 2.18.3, HPC-X IBext_v6, 8x mlx5 IB/SHARP each)."""
    return "\n".join(line for line in corpus_text(BOOTSTRAP).splitlines() if "NCCL INFO" in line)


def test_real_net_ib_lines_name_network_and_hcas_per_host() -> None:
    net = parse_nccl_transport(corpus_text(BOOTSTRAP))
    assert net.kind == "ib" and set(net.by_host) == {"h100-2", "h100-4"}
    h4 = net.by_host["h100-4"]
    assert h4.networks == {"IBext_v6"}
    assert h4.ib_devices == tuple(f"mlx5_{i}:1/IB/SHARP" for i in range(1, 9))
    assert h4.gdr is None  # no channel line in this excerpt: GDR not reported


def test_multi_node_job_over_ib_with_every_rail_passes() -> None:
    text = _real_ib_lines() + "\n" + fixture_text(HEALTHY).split("\n", 1)[1]
    job = _job(("h100-2", "h100-4"))
    found = _transport(evaluate_nccl(job, parse_nccl_tests(text), _ctx(_profile(380.0), "h100-2", "h100-4")))
    assert {h: f.status for h, f in found.items()} == {"h100-2": Status.PASS, "h100-4": Status.PASS}
    assert found["h100-4"].value == 8
    assert "NCCL used NET/IB (IBext_v6) over 8 HCA(s): mlx5_1:1/IB/SHARP" in found["h100-4"].message


def test_fewer_rails_than_the_profile_expects_fail() -> None:
    """Derived from the real lines: h100-4's NCCL saw only mlx5_1..mlx5_4 (4 HCAs missing, e.g. ports down)."""
    lines = _real_ib_lines().splitlines()
    cut = [line.split(" [4]mlx5_5")[0] + " [RO]; OOB ens7:172.27.32.104<0>"
           if line.startswith("h100-4") and "NET/IB : Using" in line else line for line in lines]
    text = "\n".join(cut) + "\n" + fixture_text(HEALTHY).split("\n", 1)[1]
    found = _transport(evaluate_nccl(_job(("h100-2", "h100-4")), parse_nccl_tests(text),
                                     _ctx(_profile(380.0), "h100-2", "h100-4")))
    assert (found["h100-4"].status, found["h100-4"].value) == (Status.FAIL, 4)
    assert found["h100-4"].message.startswith("pair h100-2-h100-4: NCCL used 4 of 8 (ib.hca.count")
    assert found["h100-2"].status is Status.PASS
    # a per-rail job is pinned to one HCA: one is what it should use
    rail = _transport(evaluate_nccl(_job(("h100-2", "h100-4"), rail="mlx5_1:1"), parse_nccl_tests(text),
                                    _ctx(_profile(380.0), "h100-2", "h100-4")))
    assert rail["h100-4"].status is Status.PASS


def test_socket_fallback_fails_although_the_bandwidth_passes() -> None:
    result = parse_nccl_tests(fixture_text(SOCKET))
    assert result.transport is not None and result.transport.kind == "socket"
    findings = evaluate_nccl(_job(), result, _ctx(_profile(), "gpu-h100-01", "gpu-h100-02"))
    busbw = [f for f in findings if f.check == "nccl.all_reduce.pair.busbw"]
    assert {f.status for f in busbw} == {Status.PASS}  # 22.9 GB/s vs 24: the false pass the issue describes
    found = _transport(findings)
    assert {f.status for f in found.values()} == {Status.FAIL}
    assert found["gpu-h100-01"].message == (
        "pair gpu-h100-01-gpu-h100-02: NCCL used TCP sockets (NET/Socket (Socket): eth0:10.1.0.11<0>, "
        "eth1:10.1.1.11<0>) instead of InfiniBand/RoCE: the busbw measured is not the fabric's")
    # a site without RDMA can say so in its profile
    tcp = _profile()
    tcp.expectations["nccl.net.transport"] = Expectation("nccl.net.transport", "site: Ethernet only", op="eq",
                                                         value="Socket")
    assert {f.status for f in _transport(evaluate_nccl(_job(), result, _ctx(tcp, "gpu-h100-01",
                                                                             "gpu-h100-02"))).values()} == {Status.PASS}


def test_gdr_from_channel_lines_and_single_node_jobs_are_not_graded() -> None:
    # channel lines in NCCL's published layout: '/GDRDMA' when GPUDirect RDMA carries the data
    on = "n1:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA"
    off = "n1:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0"
    assert parse_nccl_transport(on).by_host["n1"].gdr is True
    assert parse_nccl_transport(off).by_host["n1"].gdr is False
    node = Job(job_id="j", benchmark="nccl", test="all_reduce_perf", shape="node", hosts=("gpu-h100-01",),
               ranks_per_host=8)
    findings = evaluate_nccl(node, parse_nccl_tests(fixture_text(SOCKET)), _ctx(_profile(), "gpu-h100-01"))
    assert not _transport(findings)  # NVLink inside one node: no network to check


def test_without_nccl_info_lines_the_transport_is_skip_never_pass() -> None:
    found = _transport(evaluate_nccl(_job(), parse_nccl_tests(fixture_text(HEALTHY)),
                                     _ctx(_profile(380.0), "gpu-h100-01", "gpu-h100-02")))
    assert {f.status for f in found.values()} == {Status.SKIP}
    assert "run with NCCL_DEBUG=INFO" in found["gpu-h100-01"].message


def test_nccl_tests_run_with_nccl_debug_info() -> None:
    env = nccl_program(_job(), _profile(), {}).env
    assert (env["NCCL_DEBUG"], env["NCCL_DEBUG_SUBSYS"]) == ("INFO", "INIT,NET")
    assert nccl_program(_job(), _profile(), {"nccl.env": {"NCCL_DEBUG": "WARN"}}).env["NCCL_DEBUG"] == "WARN"
