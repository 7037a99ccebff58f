"""``healthcheck drain``/``resume`` against a real slurmctld (Debian slurm-wlm + munge, started here).

Nodes gpu[001-010] are defined in our own slurm.conf (no slurmd); reasons are read back with
``scontrol show node`` and ``sinfo``. Each test uses its own nodes of the one module-wide controller.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from healthcheck.cli.main import main
from healthcheck.core.model import Finding, Status
from healthcheck.store.results import HostResult, RunResults, write_results
from healthcheck.transport.slurm_nodes import parse_scontrol_show_node, parse_sinfo_state_reason
from tests.slurmctld import SlurmCluster, missing_tools

pytestmark = [pytest.mark.slurm, pytest.mark.skipif(bool(missing_tools()),
                                                    reason=f"Slurm/munge tools absent: {missing_tools()}")]

NODES = [f"gpu{i:03d}" for i in range(1, 11)]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    with SlurmCluster.start(tmp_path_factory.mktemp("slurm"), nodes="gpu[001-010]") as cluster:
        yield cluster


@pytest.fixture(autouse=True)
def fleet_back_in_service(slurm):
    """Each test starts with no node drained: the circuit breaker counts the whole fleet's drained
    nodes (issue 13.11), so one test's drains must not leak into the next."""
    yield
    for name in NODES:
        if node(slurm, name).drained:
            slurm.scontrol("update", f"nodename={name}", "state=resume")


def write_run(run_dir: Path, failing: dict[str, list[tuple[str, str]]], hosts=NODES, run_id="RUN") -> Path:
    """A run directory whose results.json has every host passing except ``failing`` (host -> checks)."""
    results = {}
    for h in hosts:
        findings = [Finding(host=h, check="gpu.count", status=Status.PASS, value=8, unit="GPUs",
                            message="ok")]
        findings += [Finding(host=h, check=check, component=comp, status=Status.FAIL, value=1,
                             message=f"{check} failed", remedy="replace it")
                     for check, comp in failing.get(h, [])]
        results[h] = HostResult(name=h, findings=findings)
    run_dir.mkdir(parents=True)
    write_results(run_dir, RunResults(run={"id": run_id}, hosts=results))
    return run_dir


def node(slurm: SlurmCluster, name: str):
    return parse_scontrol_show_node(slurm.scontrol("show", "node", name).stdout).nodes[name]


def sinfo_reasons(slurm: SlurmCluster) -> dict[str, str]:
    text = slurm.tool("sinfo", "-h", "-N", "-o", "%N|%T|%E").stdout
    return {n: s.reason for n, s in parse_sinfo_state_reason(text).nodes.items() if s.reason}


def cli(slurm: SlurmCluster, *args: str):
    return CliRunner().invoke(main, list(args), env=slurm.env, catch_exceptions=False)


def test_dry_run_changes_nothing_then_apply_drains_with_our_reason(slurm, tmp_path):
    run_dir = write_run(tmp_path / "run1", {"gpu003": [("gpu.ecc.dbe", "gpu3")]}, run_id="20261122T031500Z")
    dry = cli(slurm, "drain", str(run_dir))
    assert dry.exit_code == 0, dry.output
    expected = ("scontrol update NodeName=gpu003 State=DRAIN "
                "'Reason=healthcheck: FAIL gpu.ecc.dbe gpu3=1 run=20261122T031500Z'")
    assert expected in dry.output.splitlines()
    assert "# dry-run: nothing changed" in dry.output
    assert not node(slurm, "gpu003").drained

    applied = cli(slurm, "drain", str(run_dir), "--apply")
    assert applied.exit_code == 0, applied.output
    assert "# applied gpu003 on localhost: ok" in applied.output
    n3 = node(slurm, "gpu003")
    assert "DRAIN" in n3.flags
    assert n3.reason == "healthcheck: FAIL gpu.ecc.dbe gpu3=1 run=20261122T031500Z"
    assert sinfo_reasons(slurm)["gpu003"] == n3.reason
    sinfo_r = slurm.tool("sinfo", "-R", "-h", "-o", "%n %E").stdout
    assert "gpu003 healthcheck: FAIL gpu.ecc.dbe gpu3=1 run=20261122T031500Z" in sinfo_r


def test_node_drained_by_someone_else_is_left_alone_and_never_resumed(slurm, tmp_path):
    slurm.scontrol("update", "NodeName=gpu005", "State=DRAIN", "Reason=maintenance by alice: PSU swap")
    failing = write_run(tmp_path / "fail", {"gpu005": [("xid.79", "gpu1")]})
    out = cli(slurm, "drain", str(failing), "--apply")
    assert out.exit_code == 0, out.output
    assert "# gpu005 (node gpu005): left alone: IDLE+DRAIN+NOT_RESPONDING with someone else's reason " \
           "'maintenance by alice: PSU swap'" in out.output
    assert "scontrol update NodeName=gpu005" not in out.output
    assert node(slurm, "gpu005").reason == "maintenance by alice: PSU swap"

    passing = write_run(tmp_path / "pass", {}, hosts=["gpu005"])
    out = cli(slurm, "resume", str(passing), "--apply")
    assert out.exit_code == 0, out.output
    assert node(slurm, "gpu005").drained
    assert sinfo_reasons(slurm)["gpu005"] == "maintenance by alice: PSU swap"


def test_resume_only_our_own_and_only_when_passing(slurm, tmp_path):
    first = write_run(tmp_path / "night1", {"gpu006": [("nvlink.link.active", "gpu2 link 5")],
                                            "gpu007": [("gpu.count", "node")]}, run_id="night1")
    assert cli(slurm, "drain", str(first), "--apply", "--max-fraction", "0.2").exit_code == 0
    assert node(slurm, "gpu006").ours and node(slurm, "gpu007").ours

    # Next night gpu006 passes, gpu007 still fails: only gpu006 comes back.
    second = write_run(tmp_path / "night2", {"gpu007": [("gpu.count", "node")]}, run_id="night2")
    dry = cli(slurm, "resume", str(second))
    assert "scontrol update NodeName=gpu006 State=RESUME" in dry.output.splitlines()
    assert "NodeName=gpu007" not in dry.output
    assert node(slurm, "gpu006").drained
    out = cli(slurm, "resume", str(second), "--apply")
    assert out.exit_code == 0, out.output
    n6, n7 = node(slurm, "gpu006"), node(slurm, "gpu007")
    assert not n6.drained and n6.reason == ""
    assert n7.drained and n7.reason.startswith("healthcheck: FAIL gpu.count")


def test_circuit_breaker_refuses_then_force_overrides(slurm, tmp_path):
    run_dir = write_run(tmp_path / "wide", {h: [("gpu.count", "node")] for h in ("gpu008", "gpu009")})
    before = sinfo_reasons(slurm)
    out = cli(slurm, "drain", str(run_dir), "--apply")
    assert out.exit_code == 3
    assert "# circuit breaker: 2 nodes to drain exceeds the limit of 1 (10% of a fleet of 10)" in out.output
    assert "REFUSED: nothing drained" in out.output
    assert sinfo_reasons(slurm) == before
    forced = cli(slurm, "drain", str(run_dir), "--apply", "--force")
    assert forced.exit_code == 0, forced.output
    assert node(slurm, "gpu008").ours and node(slurm, "gpu009").ours


def test_breaker_counts_nodes_already_drained_by_anyone(slurm, tmp_path):
    """Issue 13.11: nightly runs with one new failure each must not add up: with a limit of 2 of 20
    (10%), a node drained last night by us and one set down by an admin leave no room for a third."""
    slurm.scontrol("update", "nodename=gpu001", "state=drain", "reason=alice: bad fan")
    first = cli(slurm, "drain", str(write_run(tmp_path / "night1", {"gpu002": [("gpu.count", "node")]}, run_id="n1")),
                "--apply", "--max-fraction", "0.2")
    assert first.exit_code == 0, first.output
    assert node(slurm, "gpu002").ours
    third = write_run(tmp_path / "night2", {"gpu003": [("gpu.count", "node")]}, run_id="n2")
    out = cli(slurm, "drain", str(third), "--apply", "--max-fraction", "0.2")
    assert out.exit_code == 3, out.output
    assert ("# circuit breaker: 1 new + 2 already out of service (gpu001, gpu002: drained or down, by healthcheck "
            "or anyone) = 3 nodes exceeds the limit of 2 (20% of a fleet of 10)") in out.output
    assert not node(slurm, "gpu003").drained
    slurm.scontrol("update", "nodename=gpu001", "state=resume")  # the fan was replaced
    again = cli(slurm, "drain", str(third), "--apply", "--max-fraction", "0.2")
    assert again.exit_code == 0, again.output
    assert node(slurm, "gpu003").ours


def test_inventory_maps_host_names_to_slurm_node_names(slurm, tmp_path):
    hosts = [f"dgx-{i:02d}" for i in range(1, 11)]
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("groups:\n  gpu:\n    hosts: dgx-[01-10]\n"
                         "hosts:\n  dgx-[01-10]: {slurm_node: 'x-{name}'}\n  dgx-10: {slurm_node: gpu010}\n")
    run_dir = write_run(tmp_path / "mapped", {"dgx-10": [("ib.port.state", "mlx5_0/1")]}, hosts=hosts)
    out = cli(slurm, "drain", str(run_dir), "-i", str(inventory), "--apply")
    assert out.exit_code == 0, out.output
    assert "# dgx-10 (node gpu010): drain (IDLE+NOT_RESPONDING)" in out.output
    assert node(slurm, "gpu010").reason.startswith("healthcheck: FAIL ib.port.state mlx5_0/1")


def test_broken_run_is_refused(slurm, tmp_path):
    results = {h: HostResult(name=h, findings=[Finding(host=h, check="host.reachable", status=Status.ERROR,
                                                       message="Permission denied (publickey)")])
               for h in NODES[:6]}
    results.update({h: HostResult(name=h, findings=[Finding(host=h, check="gpu.count", status=Status.FAIL,
                                                            message="7 GPUs")]) for h in NODES[6:7]})
    run_dir = tmp_path / "broken"
    run_dir.mkdir()
    write_results(run_dir, RunResults(run={"id": "broken"}, hosts=results))
    out = cli(slurm, "drain", str(run_dir), "--apply")
    assert out.exit_code == 3
    assert "the run looks broken: 6 of 7 hosts are ERROR" in out.output


@pytest.mark.sshd
def test_apply_over_ssh_on_the_inventory_controller(slurm, tmp_path, ssh_cluster_factory):
    """The controller host named in the inventory runs scontrol over SSH (a real sshd whose scontrol
    talks to the same real slurmctld): the reason, with its spaces and ';', arrives as one argument."""
    import yaml

    cluster = ssh_cluster_factory(1, names=["ctl01"])
    shim = cluster.host("ctl01").bindir / "scontrol"
    shim.write_text(f"#!/bin/sh\nSLURM_CONF={slurm.env['SLURM_CONF']} exec /usr/bin/scontrol \"$@\"\n")
    shim.chmod(0o755)
    inventory = cluster.write_inventory(tmp_path / "inv.yaml", profile=None,
                                        extra_hosts={n: {} for n in NODES})
    doc = yaml.safe_load(inventory.read_text())
    inventory.write_text(yaml.safe_dump({**doc, "controller": "ctl01"}))
    run_dir = write_run(tmp_path / "remote", {"gpu004": [("gpu.ecc.dbe", "gpu3"), ("xid.79", "gpu3")]},
                        run_id="remote1")
    out = CliRunner().invoke(main, ["drain", str(run_dir), "-i", str(inventory), "-F", str(cluster.ssh_config),
                                    "--apply"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    assert "on ctl01" in out.output and "# applied gpu004 on ctl01: ok" in out.output
    assert node(slurm, "gpu004").reason == "healthcheck: FAIL gpu.ecc.dbe gpu3=1; FAIL xid.79 gpu3=1 run=remote1"
    assert cluster.host("ctl01").sessions() >= 2   # the state query, then the update


def test_apply_and_force_from_the_environment_change_nothing(slurm, tmp_path):
    """HEALTHCHECK_DRAIN_APPLY=1 left exported in a shell must not turn the dry-run into a drain."""
    run_dir = write_run(tmp_path / "env", {"gpu002": [("gpu.count", "node")]})
    env = {**slurm.env, "HEALTHCHECK_DRAIN_APPLY": "1", "HEALTHCHECK_DRAIN_FORCE": "1"}
    out = CliRunner().invoke(main, ["drain", str(run_dir)], env=env, catch_exceptions=False)
    assert out.exit_code == 0, out.output
    assert "# dry-run: nothing changed; --apply runs the 1 command(s) above" in out.output
    assert not node(slurm, "gpu002").drained


@pytest.mark.parametrize("with_inventory", [False, True])
def test_invented_hosts_never_widen_the_breaker(slurm, tmp_path, with_inventory):
    """Issue 29.2: a merged run with 100 invented (passing) host folders beside 2 failing real nodes. The
    fleet is the inventory's (-i) or the scheduler's 10 nodes, not the run's 102 hosts: limit 1, refused."""
    fakes = [f"fake{i:03d}" for i in range(100)]
    run_dir = write_run(tmp_path / "forged", {h: [("gpu.count", "node")] for h in ("gpu001", "gpu002")},
                        hosts=NODES + fakes)
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("groups:\n  gpu:\n    hosts: gpu[001-010]\n")
    extra = ["-i", str(inventory)] if with_inventory else []
    out = cli(slurm, "drain", str(run_dir), *extra, "--apply", "--max-fraction", "0.10")
    assert out.exit_code == 3, out.output
    where = f"inventory {inventory}" if with_inventory else "the scheduler's node list"
    assert f"2 node(s) to drain, limit 1 of 10 ({where})" in out.output
    assert (f"# not in the fleet ({where}): 100 host(s) of the run, never counted or drained: fake000, fake001, "
            "fake002, fake003, fake004, fake005, fake006, fake007 (+92 more)") in out.output
    assert not node(slurm, "gpu001").drained and not node(slurm, "gpu002").drained
