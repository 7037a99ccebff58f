"""Fabric counters as rates: mlx5 hw_counters and ethtool -S of RoCE netdevs, on the corpus and our fixtures."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from healthcheck.core.model import CommandResult, Host, Status
from healthcheck.core.profiles import load_profile
from healthcheck.core.spec import EvalContext, ParseError
from healthcheck.probes.ethtool_parse import parse_ethtool_stats
from healthcheck.probes.fabric_counters import CATALOG, fleet_graded, info
from healthcheck.probes.rates import COMMANDS, evaluate_rates, parse_rates
from healthcheck.store.jsoncodec import to_jsonable
from tests.conftest import corpus_text, fixture_text

H100 = load_profile("h100-sxm5-8x")
BOOT = "5c3e1c0e-0d3b-4a53-9a57-4e0fb3a5d2c1"
T0 = 1795000000
ETH_T0, ETH_T1 = "ethtool/ethtool-stats-2port-t0.txt", "ethtool/ethtool-stats-2port-t1-ens2f0np0-pause-storm-flaps.txt"
HW_T0 = "ib/sysfs-roce-2port-hw-counters-t0.txt"
HW_T1 = "ib/sysfs-roce-2port-hw-counters-t1-mlx5_1-rnr-timeouts-cnp-storm.txt"


def own(rel: str) -> str:
    return fixture_text(rel).split("\n", 1)[1]


def snapshot(epoch: int, sysfs: str, ethtool: str, uptime: float = 86400.0):
    texts = {"counter-clock": f"{epoch}\n{BOOT}\n{uptime} 1.0\n", "ib-sysfs": own(sysfs), "ethtool-stats": own(ethtool)}
    return parse_rates({cid: CommandResult(host="gpu001", command_id=cid, stdout=t.encode(), rc=0)
                        for cid, t in texts.items()})


def grade(now, before, profile=H100):
    at = [datetime.fromtimestamp(s.epoch_s, timezone.utc) for s in (now, before)]
    ctx = EvalContext(host=Host(name="gpu001"), profile=profile, previous={"rates": to_jsonable(before)},
                      collected_at=at[0], previous_at=at[1])
    return evaluate_rates(now, ctx)


def test_ethtool_stats_keeps_the_fault_counters_of_each_roce_netdev():
    stats = parse_ethtool_stats(own(ETH_T0))
    assert sorted(stats) == ["mlx5_0 ens1f0np0", "mlx5_1 ens2f0np0"]
    port = stats["mlx5_1 ens2f0np0"]
    assert (port["rx_prio3_pause"], port["tx_pause_ctrl_phy"], port["link_down_events_phy"]) == (1604, 1411, 1)
    assert port["rx_bytes_phy"] == 911234664892
    # per-queue, software and duration counters are not kept
    assert not {"rx_packets", "ch0_events", "rx_prio3_pause_duration", "rx_prio3_bytes"} & set(port)


def test_ethtool_stats_edge_cases():
    assert parse_ethtool_stats("healthcheck: ethtool not installed\n") is None
    with pytest.raises(ParseError, match="truncated"):
        parse_ethtool_stats(own(ETH_T0).replace("# ethtool-stats end\n", ""))
    failed = ("# ethtool-stats mlx5_2 ens3f0np0\nno stats available\n"
              "# ethtool-stats mlx5_3 ens4f0np0\nNIC statistics:\n     rx_discards_phy: 7\n"
              "     rx_crc_errors_phy: N/A\n"
              "# ethtool-stats end\n")
    assert parse_ethtool_stats(failed) == {"mlx5_3 ens4f0np0": {"rx_discards_phy": 7}}
    with pytest.raises(ParseError, match="21 digits"):
        parse_ethtool_stats("# ethtool-stats a b\n     rx_discards_phy: " + "9" * 21 + "\n# ethtool-stats end\n")


def test_the_rates_command_reads_only_ethernet_netdevs_of_rdma_devices():
    command = COMMANDS["ethtool-stats"]
    assert command.startswith("sysfs=${HEALTHCHECK_SYSFS:-/sys}; ")  # /sys unless the node's environment moves it
    assert '"$sysfs"/class/infiniband/*/device/net/*' in command and '= 1 ] || continue' in command
    assert 'ethtool -S "${n##*/}"' in command and command.endswith("fi")
    assert "cat /proc/uptime" in COMMANDS["counter-clock"]


def test_corpus_cx7_hw_counters_are_read_for_rates():
    """The real CX7 sysfs layout: every port's hw_counters become the ``ib_hw`` family, by port name."""
    text = corpus_text("ib/sysfs-class-infiniband-h100-cx7-ndr-counters-UPSTREAM-EDITED.txt") + "# ib-sysfs end\n"
    obs = parse_rates({"ib-sysfs": CommandResult(host="gpu001", command_id="ib-sysfs", stdout=text.encode(), rc=0)})
    hw = obs.counters["ib_hw"]["mlx5_1/1"]
    assert (hw["roce_adp_retrans"], hw["rx_dct_connect"], hw["rnr_nak_retry_err"]) == (3, 422237, 0)
    assert obs.counters["ib"]["mlx5_1/1"]["link_downed"] == 255
    assert "ethtool" not in "".join(obs.counters)  # no ethtool-stats in this bundle: no eth family


def test_hw_and_ethtool_counters_graded_as_hourly_rates_per_port():
    findings = grade(snapshot(T0 + 12 * 3600, HW_T1, ETH_T1), snapshot(T0, HW_T0, ETH_T0))
    bad = {(f.check, f.component): (f.status, f.value) for f in findings if f.status is not Status.PASS}
    assert bad[("rate.ib_hw.rnr_nak_retry_err", "mlx5_1/1")] == (Status.FAIL, 0.167)
    assert bad[("rate.ib_hw.local_ack_timeout_err", "mlx5_1/1")] == (Status.WARN, 8000.0)
    assert bad[("rate.eth.link_down_events_phy", "mlx5_1 ens2f0np0")] == (Status.FAIL, 0.25)
    assert not [key for key in bad if "mlx5_0" in key[1]]
    rnr = next(f for f in findings if f.check == "rate.ib_hw.rnr_nak_retry_err")
    assert rnr.remedy.startswith("RNR NAK retries exhausted: a QP failed. RDMA transport retries/timeouts")
    assert "NVSentinel" in rnr.message and "[2 in 12.00 h]" in rnr.message
    summary = next(f for f in findings if f.check == "rate.counters")
    assert summary.status is Status.PASS and summary.value == 19  # 2 ports x 11 rated (7 ib, 3 ib_hw, 1 eth), 3 over


def test_every_catalogued_counter_has_meaning_unit_remedy_and_a_grading():
    for (family, counter), entry in CATALOG.items():
        assert family in ("ib", "ib_hw", "eth") and entry.meaning and entry.unit and entry.remedy
        assert entry.grading in ("profile", "fleet"), counter
    assert info("eth", "tx_prio5_pause").unit == "pause frames" and fleet_graded("eth", "rx_prio0_pause")
    assert not fleet_graded("ib", "symbol_error") and info("ib", "no_such_counter") is None
    profiled = {k.split(".", 2)[1:] and tuple(k.split(".", 2)[1:]) for k in H100.expectations
                if k.startswith(("rate.ib.", "rate.ib_hw.", "rate.eth."))}
    assert all(info(*key) is not None and not fleet_graded(*key) for key in profiled), profiled


def test_unreadable_ethtool_stats_is_an_error_naming_the_command():
    texts = {"counter-clock": f"{T0}\n{BOOT}\n", "ethtool-stats": own(ETH_T0).replace("# ethtool-stats end\n", "")}
    obs = parse_rates({cid: CommandResult(host="gpu001", command_id=cid, stdout=t.encode(), rc=0)
                       for cid, t in texts.items()})
    assert "eth" not in obs.counters
    findings = evaluate_rates(obs, EvalContext(host=Host(name="gpu001"), profile=H100))
    first = findings[0]
    assert (first.check, first.component, first.status) == ("rate.source", "ethtool-stats", Status.ERROR)
    assert "truncated" in findings[0].message


def fleet_observations(storm_host: str, hosts: int = 4) -> dict[str, dict]:
    """``rates`` observations (JSON form) of ``hosts`` nodes 12 h after boot: every node healthy (t1 of our
    healthy port mlx5_0 for both ports), ``storm_host`` with the pause-storm / CNP-storm fixtures."""
    healthy_eth = own(ETH_T1).split("# ethtool-stats mlx5_1")[0]
    healthy_eth += healthy_eth.replace("mlx5_0 ens1f0np0", "mlx5_1 ens2f0np0") + "# ethtool-stats end\n"
    healthy_hw = own(HW_T1).replace("mlx5_1/ports/1/hw_counters/np_cnp_sent:5413420",
                                    "mlx5_1/ports/1/hw_counters/np_cnp_sent:13420")
    out = {}
    for i in range(1, hosts + 1):
        name = f"gpu00{i}"
        hw, eth = (own(HW_T1), own(ETH_T1)) if name == storm_host else (healthy_hw, healthy_eth)
        texts = {"counter-clock": f"{T0}\n{BOOT}\n43200.00 600000.00\n", "ib-sysfs": hw, "ethtool-stats": eth}
        obs = parse_rates({cid: CommandResult(host=name, command_id=cid, stdout=t.encode(), rc=0)
                           for cid, t in texts.items()})
        out[name] = {"rates": to_jsonable(obs)}
    return out


def test_fleet_names_the_pause_storm_port_against_the_fleet_median():
    from healthcheck.probes.fabric_fleet import FabricCounterOutliers

    observations = fleet_observations("gpu003")
    hosts = {name: Host(name=name, profile="h100-sxm5-8x") for name in observations}
    findings = FabricCounterOutliers().evaluate_fleet(observations, hosts, {"h100-sxm5-8x": H100})
    warned = {(f.host, f.component, f.check) for f in findings if f.status is Status.WARN}
    assert ("gpu003", "mlx5_1 ens2f0np0", "fleet.fabric_counter.eth.tx_prio3_pause") in warned
    assert ("gpu003", "mlx5_1 ens2f0np0", "fleet.fabric_counter.eth.rx_discards_phy") in warned
    assert ("gpu003", "mlx5_1/1", "fleet.fabric_counter.ib_hw.np_cnp_sent") in warned
    assert {host for host, _, _ in warned} == {"gpu003"}
    pause = next(f for f in findings if f.check == "fleet.fabric_counter.eth.tx_prio3_pause")
    assert pause.value == 3416815.9 and pause.unit == "pause frames/h"
    assert "(41,001,791 in all), 23,191x the fleet median 147.3/h of 8 ports on 4 hosts" in pause.message
    assert "PFC pause frames sent on priority N" in pause.message and "mlnx_qos" in pause.remedy
    passed = [(f.host, f.value) for f in findings if f.check == "fleet.fabric_counters"]
    assert [host for host, _ in passed] == ["gpu001", "gpu002", "gpu004"] and passed[0][1] > 20


def test_the_fleet_keeps_of_each_host_only_the_fabric_counters_and_grades_them_alike():
    """What the fleet stage holds per host while it reads the store: the uptime and ib/ib_hw/eth counters."""
    from healthcheck.probes.fabric_fleet import FabricCounterOutliers

    check = FabricCounterOutliers()
    observations = fleet_observations("gpu003")
    for obs in observations.values():
        obs["rates"]["counters"]["nvlink"] = {"gpu0 link 0": {"replay_errors": 1}}
    kept = {name: {"rates": check.keep("rates", obs["rates"])} for name, obs in observations.items()}
    assert sorted(kept["gpu003"]["rates"]) == ["counters", "uptime_s"]
    assert sorted(kept["gpu003"]["rates"]["counters"]) == ["eth", "ib", "ib_hw"]
    hosts = {name: Host(name=name, profile="h100-sxm5-8x") for name in observations}
    assert check.evaluate_fleet(kept, hosts, {"h100-sxm5-8x": H100}) == \
        check.evaluate_fleet(observations, hosts, {"h100-sxm5-8x": H100})
    assert check.keep("rates", {"uptime_s": 5}) is None


def test_fleet_needs_three_hosts_and_an_uptime():
    from healthcheck.probes.fabric_fleet import FabricCounterOutliers, host_rates

    observations = fleet_observations("gpu002", hosts=2)
    hosts = {name: Host(name=name, profile="h100-sxm5-8x") for name in observations}
    assert FabricCounterOutliers().evaluate_fleet(observations, hosts, {"h100-sxm5-8x": H100}) == []
    assert host_rates({"uptime_s": None, "counters": {}}) is None and host_rates({"uptime_s": True}) is None
    assert host_rates({"uptime_s": 3600, "counters": {"eth": {"p": {"rx_prio3_pause": 7, "rx_bytes_phy": 9}}}}) == \
        {("eth", "rx_prio3_pause"): {"p": (7.0, 7)}}
