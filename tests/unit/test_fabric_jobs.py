"""Fabric counters around benchmark jobs: snapshots before/after each multi-node job, deltas per GB moved."""

from __future__ import annotations

from pathlib import Path

from healthcheck.benchmarks.plan import Job
from healthcheck.core.model import CommandResult, Finding, Host, Status
from healthcheck.core.profiles import load_profile
from healthcheck.probes.fabric_jobs import SNAPSHOT, parse_snapshot, port_deltas
from healthcheck.run.fabric_jobs import FABRIC_DIR, around_job, merge_fabric
from tests.conftest import fixture_text

H100 = load_profile("h100-sxm5-8x")
HW = ("ib/sysfs-roce-2port-hw-counters-t0.txt", "ib/sysfs-roce-2port-hw-counters-t1-mlx5_1-rnr-timeouts-cnp-storm.txt")
ETH = ("ethtool/ethtool-stats-2port-t0.txt", "ethtool/ethtool-stats-2port-t1-ens2f0np0-pause-storm-flaps.txt")
JOB = Job(job_id="nccl-all_reduce_perf-pair-node01-node02-node03", benchmark="nccl", test="all_reduce_perf",
          shape="pair", hosts=("node01", "node02", "node03"), ranks_per_host=8)


def own(rel: str) -> str:
    return fixture_text(rel).split("\n", 1)[1]


def healthy_after() -> str:
    """t1 of our fixtures with both ports growing like the healthy one (mlx5_0)."""
    hw = own(HW[1])
    for name, value in (("rnr_nak_retry_err", "2"), ("local_ack_timeout_err", "96000"), ("np_cnp_sent", "5413420"),
                        ("out_of_sequence", "880002"), ("roce_adp_retrans", "41000")):
        hw = hw.replace(f"mlx5_1/ports/1/hw_counters/{name}:{value}\n", f"mlx5_1/ports/1/hw_counters/{name}:"
                        f"{ {'np_cnp_sent': '13420', 'out_of_sequence': '2'}.get(name, '0')}\n")
    eth = own(ETH[1]).split("# ethtool-stats mlx5_1")[0]
    eth += own(ETH[0]).split("# ethtool-stats mlx5_1")[0].replace("mlx5_0 ens1f0np0", "mlx5_1 ens2f0np0")  # idle
    return hw + eth.replace("# ethtool-stats end\n", "") + "# ethtool-stats end\n"


class FakeTransport:
    """Answers the snapshot command with before/after texts per host; counts the calls."""

    def __init__(self, texts: dict[str, list[str]]) -> None:
        self.texts, self.calls = texts, []

    def run(self, host: Host, script: str, timeout: float, command_id: str = "") -> CommandResult:
        assert script == SNAPSHOT
        self.calls.append((host.name, command_id))
        text = self.texts[host.name].pop(0)
        return CommandResult(host=host.name, command_id=command_id, stdout=text.encode(), rc=0)


def test_snapshot_parses_both_sources_and_deltas_count_bytes_moved():
    before = parse_snapshot(own(HW[0]) + own(ETH[0]))
    after = parse_snapshot(own(HW[1]) + own(ETH[1]))
    deltas = {(d.family, d.port): d for d in port_deltas(before, after)}
    eth = deltas[("eth", "mlx5_1 ens2f0np0")]
    assert eth.counters["tx_prio3_pause"] == 41000380 and eth.bytes_moved == 9_000_000_000_000
    ib = deltas[("ib", "mlx5_1/1")]
    assert ib.bytes_moved == 4 * 9_000_000_000_000  # port_xmit_data + port_rcv_data count 4-byte words
    assert deltas[("ib_hw", "mlx5_1/1")].counters["rnr_nak_retry_err"] == 2
    assert deltas[("ib_hw", "mlx5_1/1")].bytes_moved == ib.bytes_moved


def test_a_pause_storm_during_the_job_is_named_per_gb_against_the_jobs_ports(tmp_path: Path):
    hosts = {n: Host(name=n, profile="h100-sxm5-8x") for n in JOB.hosts}
    before = own(HW[0]) + own(ETH[0])
    transport = FakeTransport({"node01": [before, healthy_after()], "node02": [before, own(HW[1]) + own(ETH[1])],
                               "node03": [before, healthy_after()]})
    assert around_job(tmp_path, JOB, hosts, transport, {}, lambda: "launched") == "launched"
    assert sorted(transport.calls)[:2] == [("node01", f"fabric-after-{JOB.job_id}"),
                                            ("node01", f"fabric-before-{JOB.job_id}")]
    stored = sorted(p.name for p in (tmp_path / FABRIC_DIR / JOB.job_id).iterdir())
    assert stored[:3] == ["node01.after.out", "node01.before.out", "node01.json"] and len(stored) == 9
    findings, observations = merge_fabric(tmp_path, list(hosts.values()), {"h100-sxm5-8x": H100}, [], {})
    bad = {(f.host, f.check, f.component): f for f in findings if f.status is not Status.PASS}
    pause = bad[("node02", "nccl.all_reduce.fabric.eth.tx_prio3_pause", "mlx5_1 ens2f0np0")]
    assert pause.status is Status.WARN and pause.value == 41000380
    assert "4,555.6 per GB moved (9,000.0 GB), 107,896x the job's median 0.04 per GB over 4 ports" in pause.message
    assert "during job nccl-all_reduce_perf-pair-node01-node02-node03" in pause.message
    rnr = bad[("node02", "nccl.all_reduce.fabric.ib_hw.rnr_nak_retry_err", "mlx5_1/1")]
    assert rnr.status is Status.FAIL and "over the job, expected le 0/h" in rnr.message
    assert ("node02", "nccl.all_reduce.fabric.ib_hw.np_cnp_sent", "mlx5_1/1") in bad
    flap = bad[("node02", "nccl.all_reduce.fabric.eth.link_down_events_phy", "mlx5_1 ens2f0np0")]
    assert (flap.status, flap.value) == (Status.FAIL, 3)
    assert {host for host, _, _ in bad} == {"node02"}
    passed = [(f.host, f.check) for f in findings if f.status is Status.PASS]
    assert passed == [("node01", "nccl.all_reduce.fabric"), ("node03", "nccl.all_reduce.fabric")]
    # each host's fabric_jobs observation: the documented counters that moved, with before and after
    (view,) = observations["node02"]["fabric_jobs"]["jobs"]
    assert (view["job_id"], view["check"], view["ports"]) == (JOB.job_id, "nccl.all_reduce", 6)
    rows = {(r[0], r[2]): r for r in view["rows"]}
    assert rows[("mlx5_1 ens2f0np0", "tx_prio3_pause")] == ["mlx5_1 ens2f0np0", "eth", "tx_prio3_pause", 1411,
                                                           41001791, 41000380, 4555.598]
    assert rows[("mlx5_1/1", "rnr_nak_retry_err")][3:6] == [0, 2, 2]
    assert not [k for k in rows if k[1] in ("port_xmit_data", "rx_bytes_phy", "tx_prio3_pause_duration")]
    assert set(observations) == {"node01", "node02", "node03"}
    # a replay of the run directory grades the stored snapshots the same way
    again, _ = merge_fabric(tmp_path, list(hosts.values()), {"h100-sxm5-8x": H100}, [], {})
    assert [f.message for f in again] == [f.message for f in findings]


def test_single_node_jobs_and_the_off_switch_take_no_snapshot(tmp_path: Path):
    transport = FakeTransport({})
    node = Job(job_id="nccl-x-node-node01", benchmark="nccl", test="all_reduce_perf", shape="node",
               hosts=("node01",), ranks_per_host=8)
    assert around_job(tmp_path, node, {}, transport, {}, lambda: 1) == 1
    assert around_job(tmp_path, JOB, {}, transport, {"fabric_counters": False}, lambda: 2) == 2
    assert transport.calls == [] and not (tmp_path / FABRIC_DIR).exists()


def test_a_failed_snapshot_is_a_warning_naming_host_and_job(tmp_path: Path):
    hosts = {n: Host(name=n, profile="h100-sxm5-8x") for n in JOB.hosts}
    before = own(HW[0]) + own(ETH[0])
    transport = FakeTransport({"node01": [before, healthy_after()], "node02": [before, "ssh: connection reset\n"],
                               "node03": [before, healthy_after()]})
    around_job(tmp_path, JOB, hosts, transport, {}, lambda: None)
    findings: list[Finding] = merge_fabric(tmp_path, list(hosts.values()), {"h100-sxm5-8x": H100}, [], {})[0]
    (warn,) = [f for f in findings if f.host == "node02"]
    assert (warn.check, warn.status) == ("nccl.all_reduce.fabric", Status.WARN)
    assert "fabric counters around job nccl-all_reduce_perf-pair-node01-node02-node03 not read" in warn.message
