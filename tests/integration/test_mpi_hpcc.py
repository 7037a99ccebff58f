"""A real Open MPI ``mpirun`` of Debian's ``hpcc`` across two loopback sshd test hosts, through the
benchmark launcher (argv builder + launch script) and the ssh transport; HPL and PingPong parsed
and graded, then re-graded from ``raw/_jobs`` by replay.

The non-obvious mpirun flags come from ../shared/research/mpi-on-loopback-ssh-hosts.md: every
test host is the same machine, so each orted gets its own TMPDIR (session-dir race), TCP is
pinned to ``lo``, and ``mpi_yield_when_idle`` keeps latency sane on 2 shared cores.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from healthcheck.core.model import Host, Status
from healthcheck.core.profiles import Expectation, Profile
from healthcheck.run.benchmarks import execute_benchmarks, load_outcomes, replay_benchmarks

pytestmark = [pytest.mark.sshd, pytest.mark.mpi]

if not (shutil.which("mpirun") and shutil.which("hpcc")):
    pytest.skip("Open MPI mpirun and Debian hpcc not installed (apt-get install openmpi-bin hpcc)",
                allow_module_level=True)


def _options(cluster) -> dict:
    launcher = {
        "kind": "mpirun", "allow_run_as_root": os.geteuid() == 0, "map_by": "node",
        "env": {"HWLOC_COMPONENTS": "-gl"},
        "mca": {
            "plm_rsh_agent": f"ssh -F {cluster.ssh_config} -p {cluster.port}",
            # $HC_TEST_HOST is expanded by the remote shell: one session dir per test host
            "orte_launch_agent": f"env TMPDIR={cluster.base}/hosts/$HC_TEST_HOST/tmp HWLOC_COMPONENTS=-gl orted",
            "oob_tcp_if_include": "lo", "btl": "tcp,self", "btl_tcp_if_include": "lo",
            "mpi_yield_when_idle": "1",
        },
    }
    return {"benchmarks": ["hpl"], "plan": "acceptance", "hpl.shapes": ["cluster"], "launcher": launcher,
            "hpl.flavor": "hpcc", "hpl.binary": "/usr/bin/hpcc", "hpl.n": 500, "hpl.nb": 50,
            "hpl.ranks_per_node": 1, "hpl.timeout_s": 150}


def _profile() -> Profile:
    low = {"acceptable": 0.6, "warn": 0.5}
    return Profile(name="loopback-cpu", expectations={
        # deliberately tiny: loopback TCP on 2 shared cores; the test checks the plumbing, not a cluster.
        # HPCC is graded against the xhpl (CPU FP64) expectation; 0.01 is no Rpeak, so the above-peak
        # ERROR (wrong expectation) is switched off for this test only.
        "hpl.xhpl.node.gflops": Expectation("hpl.xhpl.node.gflops", "test: any positive rate", value=0.01,
                                            unit="GFLOPS", bands=low),
        "hpcc.pingpong.latency_us": Expectation("hpcc.pingpong.latency_us", "test: loopback TCP",
                                                op="le", value=100000.0, unit="us"),
    }, settings={"benchmarks": {"hpl": {"above_peak_ratio": 1e12}}})


def test_hpcc_across_two_ssh_hosts(ssh_cluster_factory, tmp_path: Path) -> None:
    from healthcheck.transport import TransportSettings, open_transport

    cluster = ssh_cluster_factory(2)
    for h in cluster.hosts:
        (h.root / "tmp").mkdir()
    hosts = [Host(name=h.name, address=h.address, port=h.port, user=cluster.user, profile="loopback-cpu")
             for h in cluster.hosts]
    transport = open_transport("ssh", TransportSettings(ssh_config=cluster.ssh_config))
    run_dir = tmp_path / "run"
    findings, observations = execute_benchmarks(run_dir, hosts, {"loopback-cpu": _profile()}, transport,
                                                _options(cluster), failed_hosts=set())

    by_check = {(f.host, f.check): f for f in findings}
    for h in ("node01", "node02"):
        residual = by_check[(h, "hpl.residual")]
        assert residual.status is Status.PASS, residual.message
        assert 0 <= float(residual.value) < 16.0
        gflops = by_check[(h, "hpl.cluster.gflops_per_node")]
        assert gflops.status is Status.PASS, gflops.message
        assert float(gflops.value) > 0
        latency = by_check[(h, "hpcc.pingpong.latency")]
        assert latency.status is Status.PASS and float(latency.value) > 0, latency.message
        assert by_check[(h, "hpcc.pingpong.bandwidth")].status is Status.SKIP  # no expectation: never PASS
    summary = observations["node01"]["benchmarks"]["hpl"][0]
    assert summary["hosts"] == ["node01", "node02"] and summary["metric"] > 0
    # the launch went through ssh: node01 got the transport's login plus its orted's, node02 its orted's; each
    # host also got the two fabric counter snapshots around the job (healthcheck/run/fabric_jobs.py)
    assert [h.connections() for h in cluster.hosts] == [4, 3]
    fabric = run_dir / "raw" / "_fabric" / "hpl-hpl-cluster-2nodes-node01"
    assert sorted(p.name for p in fabric.iterdir()) == [f"{h}.{kind}" for h in ("node01", "node02")
                                                         for kind in ("after.out", "before.out", "json")]
    assert "# ib-sysfs: no /sys/class/infiniband devices" in (fabric / "node02.before.out").read_text()
    assert not [f for f in findings if ".fabric" in f.check]  # no InfiniBand on the testbed: nothing to grade

    outcomes = load_outcomes(run_dir)
    assert [o.job.job_id for o in outcomes] == ["hpl-hpl-cluster-2nodes-node01"]
    assert "==> hpccoutf.txt <==" in outcomes[0].stdout and outcomes[0].rc == 0
    replayed, _ = replay_benchmarks(run_dir, hosts, {"loopback-cpu": _profile()}, {})
    assert sorted((f.host, f.check, f.status) for f in replayed) == \
        sorted((f.host, f.check, f.status) for f in findings)
