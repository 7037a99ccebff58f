"""RoCE configuration per port (roce-config) and its consistency across the fleet (fleet.roce)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from healthcheck.core.model import CommandResult, Host, Status
from healthcheck.core.profiles import Expectation, load_profile
from healthcheck.core.spec import EvalContext, ParseError
from healthcheck.probes.infiniband import COMMANDS, evaluate_infiniband, parse_infiniband
from healthcheck.probes.roce_config import parse_roce_config, roce_v2_ipv4_index
from healthcheck.probes.roce_fleet import RoceConsistency
from healthcheck.store.jsoncodec import to_jsonable
from tests.conftest import fixture_text

H100 = load_profile("h100-sxm5-8x")
HEALTHY = "roce/roce-config-2port-healthy.txt"
DRIFTED = "roce/roce-config-2port-ens2f0np0-pfc-off-trust-pcp-mtu1500.txt"


def own(rel: str) -> str:
    return fixture_text(rel).split("\n", 1)[1]


def test_healthy_ports_read_every_field():
    ports = parse_roce_config(own(HEALTHY))
    assert ports["mlx5_0 ens1f0np0"] == {"mtu": "9000", "trust": "dscp", "pfc": "3", "ecn_np": "3", "ecn_rp": "3",
                                         "gid_index": "3"}
    drifted = parse_roce_config(own(DRIFTED))["mlx5_1 ens2f0np0"]
    assert drifted == {"mtu": "1500", "trust": "pcp", "pfc": "none", "ecn_np": "none", "ecn_rp": "none",
                       "gid_index": "5"}


def test_without_mlnx_qos_trust_and_pfc_are_absent_not_guessed():
    ports = parse_roce_config(own("roce/roce-config-2port-no-mlnx-qos.txt"))
    assert ports["mlx5_1 ens2f0np0"] == {"mtu": "9000", "ecn_np": "3", "ecn_rp": "3", "gid_index": "3"}
    with pytest.raises(ParseError, match="truncated"):
        parse_roce_config(own(HEALTHY).replace("# roce-config end\n", ""))


def test_gid_index_is_the_first_roce_v2_ipv4_mapped_entry():
    types = {0: "IB/RoCE v1", 1: "RoCE v2", 2: "IB/RoCE v1", 3: "RoCE v2"}
    gids = {1: "fe80:0000:0000:0000:0ac0:ebff:fe21:03da", 3: "0000:0000:0000:0000:0000:ffff:c0a8:d3f2"}
    assert roce_v2_ipv4_index(types, gids) == 3
    assert roce_v2_ipv4_index({1: "RoCE v2"}, {1: gids[1]}) is None


def test_the_command_reads_only_ethernet_netdevs_and_filters_empty_gids():
    command = COMMANDS["roce-config"]
    assert '= 1 ] || continue' in command and "ecn/roce_np/enable/*" in command
    assert "-v -x 0000:0000:0000:0000:0000:0000:0000:0000" in command and 'mlnx_qos -i "$i"' in command


def host_observations(texts: dict[str, str]) -> dict[str, dict]:
    out = {}
    for name, text in texts.items():
        obs = parse_infiniband({"roce-config": CommandResult(host=name, command_id="roce-config",
                                                             stdout=text.encode(), rc=0)})
        out[name] = {"infiniband": to_jsonable(obs)}
    return out


def test_the_drifted_node_is_named_field_by_field_against_the_majority():
    observations = host_observations({"gpu001": own(HEALTHY), "gpu002": own(HEALTHY), "gpu003": own(DRIFTED),
                                      "gpu004": own(HEALTHY)})
    hosts = {name: Host(name=name, profile="h100-sxm5-8x") for name in observations}
    findings = RoceConsistency().evaluate_fleet(observations, hosts, {"h100-sxm5-8x": H100})
    bad = [(f.host, f.component, f.check, f.status, f.value, f.expected) for f in findings
           if f.status is not Status.PASS]
    assert bad == [
        ("gpu003", "mlx5_1 ens2f0np0", "fleet.roce.mtu", Status.WARN, "1500", "9000"),
        ("gpu003", "mlx5_1 ens2f0np0", "fleet.roce.trust", Status.WARN, "pcp", "dscp"),
        ("gpu003", "mlx5_1 ens2f0np0", "fleet.roce.pfc", Status.WARN, "none", "3"),
        ("gpu003", "mlx5_1 ens2f0np0", "fleet.roce.ecn_np", Status.WARN, "none", "3"),
        ("gpu003", "mlx5_1 ens2f0np0", "fleet.roce.ecn_rp", Status.WARN, "none", "3"),
        ("gpu003", "mlx5_1 ens2f0np0", "fleet.roce.gid_index", Status.WARN, "5", "3")]
    pfc = next(f for f in findings if f.check == "fleet.roce.pfc")
    assert pfc.message == ("mlx5_1 ens2f0np0: PFC priorities none differs from the fleet majority 3 (7 of 8 ports "
                           "of profile h100-sxm5-8x)") and "mlnx_qos -i NETDEV --pfc" in pfc.remedy
    passed = [(f.host, f.value) for f in findings if f.check == "fleet.roce"]
    assert passed == [("gpu001", 2), ("gpu002", 2), ("gpu004", 2)]


def test_a_profile_pin_fails_the_ports_off_it_even_when_they_are_the_majority():
    pinned = replace(H100, expectations={**H100.expectations, "roce.trust": Expectation(
        key="roce.trust", op="eq", value="dscp", source="site RoCE design: DSCP trust")})
    observations = host_observations({"gpu001": own(DRIFTED), "gpu002": own(DRIFTED), "gpu003": own(HEALTHY)})
    hosts = {name: Host(name=name, profile="h100-sxm5-8x") for name in observations}
    findings = RoceConsistency().evaluate_fleet(observations, hosts, {"h100-sxm5-8x": pinned})
    trust = [(f.host, f.status) for f in findings if f.check == "fleet.roce.trust"]
    assert trust == [("gpu001", Status.FAIL), ("gpu002", Status.FAIL)]
    assert "off the profile pin == dscp (source: site RoCE design: DSCP trust)" in \
        next(f for f in findings if f.check == "fleet.roce.trust").message


def test_unreadable_roce_config_is_an_error_of_the_host():
    obs = parse_infiniband({"roce-config": CommandResult(host="gpu001", command_id="roce-config",
                                                         stdout=b"# roce-config mlx5_0 ens1f0np0\nmtu:9000\n", rc=0)})
    findings = evaluate_infiniband(obs, EvalContext(host=Host(name="gpu001"), profile=H100))
    (error,) = [f for f in findings if f.check == "ib.roce_config"]
    assert error.status is Status.ERROR and "truncated" in error.message


def test_the_node_commands_run_over_a_fake_sysfs_tree(tmp_path):
    """The roce-config and ethtool-stats shell commands, run by sh over a tree laid out like sysfs (roce-config
    with its /sys prefix moved to tmp_path, ethtool-stats and ib-sysfs through $HEALTHCHECK_SYSFS) with fake
    ethtool and mlnx_qos on PATH: their output parses."""
    import os
    import subprocess

    from healthcheck.probes.ethtool_parse import parse_ethtool_stats
    from healthcheck.probes.ib_parse import parse_ib_sysfs
    from healthcheck.probes.rates import COMMANDS as RATES

    root = tmp_path / "sys"

    def write(rel: str, text: str) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")

    write("class/infiniband/mlx5_0/device/net/ens1f0np0/type", "1")
    write("class/infiniband/mlx5_1/device/net/ib0/type", "32")  # IPoIB: not a RoCE netdev
    write("class/net/ens1f0np0/mtu", "9000")
    for prio in range(8):
        for side in ("np", "rp"):
            write(f"class/net/ens1f0np0/ecn/roce_{side}/enable/{prio}", "1" if prio == 3 else "0")
    write("class/infiniband/mlx5_0/ports/1/gid_attrs/types/3", "RoCE v2")
    write("class/infiniband/mlx5_0/ports/1/gids/3", "0000:0000:0000:0000:0000:ffff:c0a8:d3f2")
    write("class/infiniband/mlx5_0/ports/1/gids/9", "0000:0000:0000:0000:0000:0000:0000:0000")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, body in (("ethtool", 'echo "NIC statistics:"; echo "     rx_discards_phy: 5"; echo "     rx_packets: 9"'),
                       ("mlnx_qos", 'echo "Priority trust state: dscp"; echo "PFC configuration:"; '
                                    'echo "\tpriority    0   1   2   3   4   5   6   7"; '
                                    'echo "\tenabled     0   0   0   1   0   0   0   0   "')):
        (bin_dir / tool).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HEALTHCHECK_SYSFS": str(root)}

    def run(command: str) -> str:
        moved = command.replace("/sys/", f"{root}/")
        return subprocess.run(["sh", "-c", moved], capture_output=True, text=True, env=env, timeout=60,
                              check=True).stdout.replace(f"{root}/", "/sys/")

    assert parse_roce_config(run(COMMANDS["roce-config"])) == {"mlx5_0 ens1f0np0": {
        "mtu": "9000", "trust": "dscp", "pfc": "3", "ecn_np": "3", "ecn_rp": "3", "gid_index": "3"}}
    assert parse_ethtool_stats(run(RATES["ethtool-stats"])) == {"mlx5_0 ens1f0np0": {"rx_discards_phy": 5}}
    write("class/infiniband/mlx5_0/ports/1/counters/port_xmit_wait", "77")
    (port,) = [p for d in parse_ib_sysfs(run(RATES["ib-sysfs"])) for p in d.ports]
    assert (port.name, port.counters["port_xmit_wait"]) == ("mlx5_0/1", 77)
    unset = {k: v for k, v in env.items() if k != "HEALTHCHECK_SYSFS"}  # unset: the real /sys (no IB here)
    real = subprocess.run(["sh", "-c", RATES["ib-sysfs"]], capture_output=True, text=True, env=unset, timeout=60)
    assert str(root) not in real.stdout and "# ib-sysfs" in real.stdout


def test_the_fleet_stage_gives_fleet_roce_the_infiniband_observations_whole(tmp_path):
    """results.json keeps only top-level scalars; the fleet stage reads the infiniband observations whole
    from the observation store (``reads``), so the drifted port is named in a run, not only in a direct call."""
    from healthcheck import probes as probe_registry
    from healthcheck.run.plan import RunPlan
    from healthcheck.run.post import fleet_stage
    from healthcheck.store.observation_store import ObservationStore, encode_observations, key_observations
    from healthcheck.store.results import HostResult

    observations = host_observations({"gpu001": own(HEALTHY), "gpu002": own(DRIFTED), "gpu003": own(HEALTHY)})
    store = ObservationStore(tmp_path)
    results = {name: HostResult(name=name, observations=key_observations(obs), profile="h100-sxm5-8x",
                                observations_at=store.append(encode_observations(name, obs)))
               for name, obs in observations.items()}
    assert "roce" not in results["gpu002"].observations.get("infiniband", {})  # not in results.json
    plan = RunPlan(mode="replay", hosts=[Host(name=n, profile="h100-sxm5-8x") for n in results],
                   profiles={"h100-sxm5-8x": H100}, probes=[probe_registry.get("infiniband")], options={},
                   plans={"": []}, profile_of={})
    found = [(f.host, f.check, f.status) for f in fleet_stage(results, plan, tmp_path)
             if f.check.startswith("fleet.roce")]
    assert ("gpu002", "fleet.roce.pfc", Status.WARN) in found
    assert [f for f in found if f[1] == "fleet.roce"] == [("gpu001", "fleet.roce", Status.PASS),
                                                          ("gpu003", "fleet.roce", Status.PASS)]
    assert not [f for f in fleet_stage(results, plan) if f.check.startswith("fleet.roce")]  # no store: no ports
    unprobed = RunPlan(mode="replay", hosts=plan.hosts, profiles=plan.profiles, probes=[], options={}, plans={"": []},
                       profile_of={})
    assert not [f for f in fleet_stage(results, unprobed, tmp_path) if f.check.startswith("fleet.roce")]


def test_what_grading_took_for_the_fleet_checks_grades_as_the_store_does(tmp_path):
    """A host's ``compared`` (taken where its observations were whole: a grading worker, a live sweep) gives the
    fleet checks what the store would: the same findings with no store at all; it travels from a worker with
    the host's result and is let go once the fleet stage used it."""
    import pickle

    from healthcheck import probes as probe_registry
    from healthcheck.run.fleetinputs import fleet_inputs
    from healthcheck.run.gradepool import Graded
    from healthcheck.run.plan import RunPlan
    from healthcheck.run.post import fleet_stage
    from healthcheck.store.observation_store import ObservationStore, encode_observations, key_observations
    from healthcheck.store.results import HostResult

    observations = host_observations({"gpu001": own(HEALTHY), "gpu002": own(DRIFTED), "gpu003": own(HEALTHY)})
    plan = RunPlan(mode="replay", hosts=[Host(name=n, profile="h100-sxm5-8x") for n in observations],
                   profiles={"h100-sxm5-8x": H100}, probes=[probe_registry.get("infiniband")], options={},
                   plans={"": []}, profile_of={})
    store = ObservationStore(tmp_path)
    stored = {name: HostResult(name=name, observations=key_observations(obs), profile="h100-sxm5-8x",
                               observations_at=store.append(encode_observations(name, obs)))
              for name, obs in observations.items()}
    sent = {name: pickle.loads(pickle.dumps(Graded(name, [], {}, b"", compared=fleet_inputs(obs))))
            for name, obs in observations.items()}
    assert sent["gpu002"].compared["fleet.roce"]["infiniband"]["roce"]["mlx5_1 ens2f0np0"]["trust"] == "pcp"
    taken = {name: HostResult(name=name, observations=key_observations(obs), profile="h100-sxm5-8x",
                              compared=sent[name].compared) for name, obs in observations.items()}

    def graded(results, run_dir):
        return sorted((f.host, f.check, f.status.value, f.message) for f in fleet_stage(results, plan, run_dir))

    from_store = graded(stored, tmp_path)
    assert ("gpu002", "fleet.roce.pfc", "WARN") in [row[:3] for row in from_store]
    assert graded(taken, None) == from_store
    assert all(r.compared is None for r in taken.values())  # used once, not held through the reports
