"""FEC mode and BER (fec_parse, ib_fec): the corpus CX7 mlxlink --show_mo, our mlxlink -c and
ethtool --show-fec fixtures."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace

import pytest

from healthcheck.core.model import CommandResult, Host, Status
from healthcheck.core.profiles import Expectation, load_profile
from healthcheck.core.spec import EvalContext, ParseError
from healthcheck.probes.fec_parse import (
    EthFec,
    LinkPhy,
    parse_ber,
    parse_ethtool_fec,
    parse_mlxlink,
    parse_mlxlink_report,
)
from healthcheck.probes.infiniband import COMMANDS, evaluate_infiniband, parse_infiniband
from tests.conftest import corpus_text, fixture_text

H100 = load_profile("h100-sxm5-8x")
HEALTHY = "mlxlink/mlxlink-c-2dev-healthy.txt"
FAULTY = "mlxlink/mlxlink-c-3dev-mlx5_1-ber-mlx5_2-no-fec.txt"
SHOW_MO = "ib/mlxlink-show-mo-cx7-ndr-active-linkup-elided.txt"
ETH_HEALTHY = "ethtool/ethtool-fec-2port-healthy.txt"
ETH_OFF = "ethtool/ethtool-fec-2port-ens2f0np0-fec-off.txt"
SYSFS = "ib/sysfs-h100-8x-ndr-healthy.txt"


def own(rel: str) -> str:
    return fixture_text(rel).split("\n", 1)[1]


def phy_findings(text: str | None, profile=H100, sysfs: str | None = None, eth: str | None = None) -> list:
    outputs = {} if text is None else {
        "mlxlink": CommandResult(host="gpu001", command_id="mlxlink", stdout=text.encode(), rc=0)}
    if eth is not None:
        outputs["ethtool-fec"] = CommandResult(host="gpu001", command_id="ethtool-fec", stdout=eth.encode(), rc=0)
    if sysfs is not None:
        outputs["ib-sysfs"] = CommandResult(host="gpu001", command_id="ib-sysfs", stdout=sysfs.encode(), rc=0)
    obs = parse_infiniband(outputs)
    findings = evaluate_infiniband(obs, EvalContext(host=Host(name="gpu001"), profile=profile))
    return [f for f in findings if f.check.startswith("ib.phy")]


def test_the_corpus_show_mo_reads_the_ndr_fec_line():
    report = parse_mlxlink_report("mlx5_0", corpus_text(SHOW_MO))
    assert report.state == "Active" and report.speed == "IB-NDR"
    assert report.fec == "Ethernet_Consortium_LL_50G_RS_FEC_PLR -(272,257+1)" and not report.fec_off
    assert report.effective_ber is None and report.raw_ber is None  # --show_mo prints no BER


def test_ber_values_in_mlxlink_notation():
    assert parse_ber("15E-255") == pytest.approx(1.5e-254, rel=1e-9)
    assert parse_ber("3E-12") == pytest.approx(3e-12)
    for garbage in ("lots", "1E99999", "1E-123456789"):
        with pytest.raises(ParseError):
            parse_ber(garbage)


def test_healthy_reports_every_field():
    mlx5_0, mlx5_1 = parse_mlxlink(own(HEALTHY))
    assert mlx5_0 == LinkPhy(device="mlx5_0", state="Active", speed="IB-NDR",
                             fec="Ethernet_Consortium_LL_50G_RS_FEC_PLR -(272,257+1)",
                             effective_ber=pytest.approx(1.5e-254, rel=1e-9), raw_ber=pytest.approx(3e-12),
                             effective_errors=0, recommendation="No issue was observed.")
    assert mlx5_1.raw_ber == pytest.approx(2e-11)


def test_garbage_and_truncation():
    assert parse_mlxlink("healthcheck: mlxlink not installed\n") is None
    with pytest.raises(ParseError, match="truncated"):
        parse_mlxlink(own(HEALTHY).replace("# mlxlink end\n", ""))
    with pytest.raises(ParseError, match="no Operational Info"):
        parse_mlxlink_report("mlx5_0", "random words\n\x00\x01")
    (failed,) = parse_mlxlink("# mlxlink mlx5_0\n-E- Failed to open device\n# mlxlink end\n")
    assert failed.error == "-E- Failed to open device" and failed.fec is None
    bad_ber = own(HEALTHY).replace("Raw Physical BER                   : 3E-12", "Raw Physical BER : lots")
    assert parse_mlxlink(bad_ber)[0].error == "not an mlxlink BER value: 'lots'"


def test_healthy_ports_pass():
    findings = phy_findings(own(HEALTHY))
    assert [(f.check, f.component, f.status) for f in findings] == [
        ("ib.phy.ber", "mlx5_0/1", Status.PASS), ("ib.phy.fec", "mlx5_0/1", Status.PASS),
        ("ib.phy.ber", "mlx5_1/1", Status.PASS), ("ib.phy.fec", "mlx5_1/1", Status.PASS)]
    assert "FEC Ethernet_Consortium_LL_50G_RS_FEC_PLR -(272,257+1) on IB-NDR" in findings[1].message


def test_a_high_effective_ber_fails_and_no_fec_on_hdr_warns():
    by = {(f.check, f.component): f for f in phy_findings(own(FAULTY))}
    ber = by["ib.phy.ber", "mlx5_1/1"]
    assert ber.status is Status.FAIL and ber.value == pytest.approx(4e-11)
    assert ber.message.startswith("mlx5_1/1: effective physical BER 4e-11, expected <= 1e-12")
    assert "ibdiagnet" in ber.message
    assert "raw BER 2e-06" in ber.message and "2183 effective errors" in ber.message
    assert "reseat the cable or transceiver" in ber.remedy
    fec = by["ib.phy.fec", "mlx5_2/1"]
    assert fec.status is Status.WARN and fec.value == "No FEC"
    assert fec.message.startswith("mlx5_2/1: FEC No FEC on the IB-HDR link") and "IEEE 802.3" in fec.message
    assert by["ib.phy.ber", "mlx5_2/1"].status is Status.PASS
    assert by["ib.phy.ber", "mlx5_0/1"].status is Status.PASS and by["ib.phy.fec", "mlx5_1/1"].status is Status.PASS


def test_a_profile_raw_ber_limit_grades_the_raw_ber():
    strict = replace(H100, expectations={**H100.expectations, "ib.phy.raw_ber": Expectation(
        key="ib.phy.raw_ber", op="le", value=1e-12, severity="WARN", source="site rule")})
    by = {f.component: f for f in phy_findings(own(HEALTHY), strict) if f.check == "ib.phy.ber"}
    assert by["mlx5_0/1"].status is Status.WARN and "raw physical BER" in by["mlx5_0/1"].message
    assert by["mlx5_1/1"].status is Status.WARN


def test_missing_tool_is_one_skip_and_no_profile_threshold_is_skip():
    sysfs = fixture_text("ib/sysfs-h100-8x-ndr-healthy.txt")
    (skip,) = phy_findings("healthcheck: mlxlink not installed\n", sysfs=sysfs)
    assert skip.status is Status.SKIP and skip.message.startswith("mlxlink not installed on the node")
    assert phy_findings("healthcheck: mlxlink not installed\n") == []  # no RDMA device: nothing to say
    no_ber = replace(H100, expectations={k: v for k, v in H100.expectations.items() if k != "ib.phy.effective_ber"})
    ber = [f for f in phy_findings(own(HEALTHY), no_ber) if f.check == "ib.phy.ber"]
    assert [f.status for f in ber] == [Status.SKIP, Status.SKIP]
    assert ber[0].message.startswith("mlx5_0/1: effective physical BER 1.5e-254 not graded: no "
                                     "ib.phy.effective_ber in profile h100-sxm5-8x")
    (error,) = phy_findings(own(HEALTHY).replace("# mlxlink end\n", ""))
    assert error.status is Status.ERROR and "truncated" in error.message


def test_the_command_runs_mlxlink_by_pci_address(tmp_path):
    """The shell command over a sysfs-like tree (its /sys prefix moved to tmp_path) with a fake mlxlink
    that prints the healthy fixture's mlx5_0 report and records its arguments; without mlxlink, one line."""
    root = tmp_path / "sys"
    for dev, bdf in (("mlx5_0", "0000:1a:00.0"), ("mlx5_1", "0000:9d:00.1")):
        (root / "devices" / bdf).mkdir(parents=True)
        (root / "class" / "infiniband" / dev).mkdir(parents=True)
        (root / "class" / "infiniband" / dev / "device").symlink_to(root / "devices" / bdf)
    report = own(HEALTHY).split("# mlxlink mlx5_1")[0].split("# mlxlink mlx5_0\n")[1]
    (tmp_path / "report.txt").write_text(report)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "mlxlink"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/args\ncat {tmp_path}/report.txt\n')
    fake.chmod(0o755)
    command = COMMANDS["mlxlink"].replace("/sys/class/infiniband", f"{root}/class/infiniband")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env, timeout=30).stdout
    assert [r.device for r in parse_mlxlink(out)] == ["mlx5_0", "mlx5_1"]
    assert (tmp_path / "args").read_text().splitlines() == ["-d 0000:1a:00.0 -c", "-d 0000:9d:00.1 -c"]
    fake.unlink()
    bare = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env, timeout=30).stdout
    assert parse_mlxlink(bare) is None


def test_ethtool_show_fec_reads_both_layouts():
    mlx5_0, mlx5_1 = parse_ethtool_fec(own(ETH_HEALTHY))
    assert mlx5_0 == EthFec(device="mlx5_0", netdev="ens1f0np0", speed_mbps=400000, configured=("Auto", "RS"),
                            active="RS")
    assert mlx5_1.configured == ("Auto",) and mlx5_1.active == "RS" and not mlx5_1.fec_off
    off = parse_ethtool_fec(own(ETH_OFF))[1]
    assert off.active == "None" and off.configured == ("Off",) and off.fec_off
    assert parse_ethtool_fec("healthcheck: ethtool not installed\n") is None
    with pytest.raises(ParseError, match="truncated"):
        parse_ethtool_fec(own(ETH_HEALTHY).replace("# ethtool-fec end\n", ""))
    (unsupported,) = parse_ethtool_fec("# ethtool-fec mlx5_0 ens1f0np0\nspeed:-1\n"
                                       "netlink error: Operation not supported\n# ethtool-fec end\n")
    assert unsupported.error == "netlink error: Operation not supported" and unsupported.speed_mbps is None


def test_ethtool_fec_off_on_a_400g_roce_port_warns():
    findings = phy_findings(None, sysfs=fixture_text(SYSFS), eth=own(ETH_OFF))
    by = {f.component: f for f in findings}
    assert by["mlx5_0 ens1f0np0"].status is Status.PASS
    assert by["mlx5_0 ens1f0np0"].message == "mlx5_0 ens1f0np0: active FEC RS (configured Auto RS) on 400G"
    off = by["mlx5_1 ens2f0np0"]
    assert off.status is Status.WARN and off.check == "ib.phy.fec" and off.value == "None"
    assert off.message.startswith("mlx5_1 ens2f0np0: active FEC None (configured Off) on the 400G link, which "
                                  "needs RS-FEC (source: IEEE 802.3 Clause 119")
    assert "ethtool --set-fec <netdev> encoding rs" in off.remedy
    slow = own(ETH_OFF).replace("speed:400000\nFEC parameters for ens2f0np0", "speed:100000\nFEC parameters for "
                                "ens2f0np0")
    assert {f.component: f.status for f in phy_findings(None, sysfs=fixture_text(SYSFS), eth=slow)} == {
        "mlx5_0 ens1f0np0": Status.PASS, "mlx5_1 ens2f0np0": Status.SKIP}
    (skip,) = phy_findings(None, sysfs=fixture_text(SYSFS), eth="healthcheck: ethtool not installed\n")
    assert skip.status is Status.SKIP and skip.message.startswith("ethtool not installed on the node")


def test_one_truncated_output_does_not_hide_the_other():
    findings = phy_findings(own(HEALTHY).replace("# mlxlink end\n", ""), eth=own(ETH_OFF))
    assert [(f.check, f.status) for f in findings if f.status is not Status.PASS] == [
        ("ib.phy.fec", Status.WARN), ("ib.phy", Status.ERROR)]


def test_the_ethtool_fec_command_reads_roce_netdevs_only(tmp_path):
    """The ethtool-fec shell command with /sys moved to tmp_path: an Ethernet netdev (type 1) is read with its
    speed, an IPoIB one (type 32) skipped; a fake ethtool prints the healthy fixture's first block."""
    root = tmp_path / "sys"
    for dev, netdev, kind in (("mlx5_0", "ens1f0np0", "1"), ("mlx5_1", "ib1", "32")):
        net = root / "class" / "infiniband" / dev / "device" / "net" / netdev
        net.mkdir(parents=True)
        (net / "type").write_text(kind + "\n")
        (root / "class" / "net" / netdev).mkdir(parents=True)
        (root / "class" / "net" / netdev / "speed").write_text("400000\n")
    body = own(ETH_HEALTHY).split("speed:400000\n")[1].split("# ethtool-fec")[0]
    (tmp_path / "body.txt").write_text(body)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "ethtool"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/args\ncat {tmp_path}/body.txt\n')
    fake.chmod(0o755)
    command = COMMANDS["ethtool-fec"].replace("/sys/", f"{root}/")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env, timeout=30).stdout
    assert parse_ethtool_fec(out) == (EthFec(device="mlx5_0", netdev="ens1f0np0", speed_mbps=400000,
                                             configured=("Auto", "RS"), active="RS"),)
    assert (tmp_path / "args").read_text() == "--show-fec ens1f0np0\n"
