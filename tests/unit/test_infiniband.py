"""InfiniBand/RoCE probe: sysfs and ibstat parsers on the corpus and our fixtures, grading and growth."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from healthcheck.core.model import CommandResult, Host, Status
from healthcheck.core.profiles import Expectation, load_profile
from healthcheck.core.spec import EvalContext, ParseError
from healthcheck.probes.ib_parse import IbObservation, parse_ib_sysfs, parse_ibstat, parse_peermem_module, parse_rate
from healthcheck.probes.infiniband import COMMANDS, evaluate_infiniband, fabric_ports, parse_infiniband
from healthcheck.store.jsoncodec import to_jsonable
from tests.conftest import corpus_files, corpus_text, fixture_text

H100 = load_profile("h100-sxm5-8x")
LOADED = "nvidia_peermem\n# peermem end\n"


def own(rel: str) -> str:
    """Our fixture without its first (comment) line."""
    return fixture_text(f"ib/{rel}").split("\n", 1)[1]


def result(cid: str, text: str, rc: int = 0) -> CommandResult:
    return CommandResult(host="gpu001", command_id=cid, stdout=text.encode(), rc=rc)


def evaluate(outputs: dict[str, str], profile=H100, previous=None):
    obs = parse_infiniband({cid: result(cid, text) for cid, text in outputs.items()})
    ctx = EvalContext(host=Host(name="gpu001"), profile=profile, previous=previous or {})
    return obs, evaluate_infiniband(obs, ctx)


def by_check(findings, check):
    return [f for f in findings if f.check == check]


def test_parse_rate_forms():
    assert parse_rate("400 Gb/sec (4X NDR)") == (400.0, "4X", "NDR")
    assert parse_rate("100 Gb/sec (2X HDR)") == (100.0, "2X", "HDR")
    assert parse_rate("10 Gb/sec (4X)") == (10.0, "4X", None)
    assert parse_rate("garbage") == (None, None, None)


def test_sysfs_corpus_h100_cx7():
    text = corpus_text("ib/sysfs-class-infiniband-h100-cx7-ndr-counters-UPSTREAM-EDITED.txt")
    devices = parse_ib_sysfs(text + "# ib-sysfs end\n")
    assert [d.name for d in devices] == ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8",
                                         "mlx5_9", "mlx5_bond_0"]
    mlx5_1 = devices[1]
    assert (mlx5_1.hca_type, mlx5_1.fw_ver) == ("MT4129", "28.41.1000")
    port = mlx5_1.ports[0]
    assert (port.state, port.phys_state, port.rate_gbps, port.width, port.speed, port.link_layer) == \
        ("ACTIVE", "LinkUp", 400.0, "4X", "NDR", "InfiniBand")
    assert port.counters["link_downed"] == 255 and port.counters["port_rcv_errors"] == 14
    assert port.hw_counters["roce_adp_retrans"] == 3
    bond = devices[-1].ports[0]
    assert (devices[-1].hca_type, bond.rate_text, bond.width, bond.link_layer) == \
        ("MT41692", "200 Gb/sec (2X NDR)", "2X", "Ethernet")


def test_sysfs_without_end_marker_is_truncated():
    text = corpus_text("ib/sysfs-class-infiniband-h100-cx7-ndr-counters-UPSTREAM-EDITED.txt")
    with pytest.raises(ParseError, match="truncated"):
        parse_ib_sysfs(text)


@pytest.mark.parametrize("path", corpus_files("ib", "ibstat-*.txt"), ids=lambda p: p.name)
def test_ibstat_conformance(path):
    text = corpus_text(f"ib/{path.name}")
    report = parse_ibstat(text)
    assert report.devices
    for device in report.devices:
        assert device.hca_type and device.hca_type.startswith("MT")
        for port in device.ports:
            assert port.state in ("ACTIVE", "DOWN", "INIT", "ARMED") and port.rate_gbps is not None


def test_ibstat_ports_down_disabled():
    report = parse_ibstat(corpus_text("ib/ibstat-h100-node-eth400-2ports-down.txt"))
    assert len(report.devices) == 12
    down = sorted((p.name, p.state, p.phys_state, p.rate_gbps) for d in report.devices for p in d.ports
                  if p.state != "ACTIVE")
    assert down == [("mlx5_11/1", "DOWN", "Disabled", 40.0), ("mlx5_5/1", "DOWN", "Disabled", 40.0)]
    assert report.devices[0].fw_ver == "28.39.1002"


def test_ibstat_ibpanic_keeps_devices_before_it():
    report = parse_ibstat(corpus_text("ib/ibstat-a100-azure-ibpanic-exit255.txt"))
    assert report.panic is not None and report.panic.device == "mlx5_8"
    assert "stat of IB device 'mlx5_8' failed" in report.panic.message
    assert len(report.devices) == 8 and report.devices[0].hca_type == "MT4124"


def test_ibstat_dual_port_and_short_form():
    full = parse_ibstat(corpus_text("ib/ibstat-2x-mlx4-connectx3-dualport-fdr56-active.txt"))
    assert [p.name for d in full.devices for p in d.ports] == ["mlx4_0/1", "mlx4_0/2", "mlx4_1/1", "mlx4_1/2"]
    assert {p.rate_gbps for d in full.devices for p in d.ports} == {56.0}
    short = parse_ibstat(corpus_text("ib/ibstat-s-short-mlx4.txt"))
    assert [(d.name, d.fw_ver, d.ports) for d in short.devices] == [("mlx4_0", "2.42.5000", ()),
                                                                    ("mlx4_1", "2.42.5000", ())]


def test_ibstatus_and_garbage_are_not_ibstat():
    with pytest.raises(ParseError):
        parse_ibstat(corpus_text("ib/ibstatus-a100-8x-hdr200-all-active.txt"))
    with pytest.raises(ParseError):
        parse_ibstat(own("bad/ibstat-garbage.txt"))


def test_truncated_sysfs_fixture_raises():
    with pytest.raises(ParseError, match="truncated"):
        parse_infiniband({"ib-sysfs": result("ib-sysfs", own("bad/sysfs-truncated-mid-line.txt"))})


def test_healthy_h100_passes_and_storage_ports_are_left_out():
    _, findings = evaluate({"ib-sysfs": own("sysfs-h100-8x-ndr-healthy.txt"),
                            "peermem-module": LOADED})
    assert {f.status for f in findings} == {Status.PASS}, [f.message for f in findings if f.status != Status.PASS]
    assert by_check(findings, "ib.hca.count")[0].value == 8
    assert by_check(findings, "ib.port.count")[0].value == 8
    [rate] = by_check(findings, "ib.port.rate")  # the 8 fabric ports pass: one finding
    assert (rate.component, rate.value) == ("node", "400 Gb/sec (4X NDR)")
    assert rate.message == "all 8 ports: rate 400 Gb/sec (4X NDR), within == 400 Gb/s, == 4X, == NDR"
    [counters] = by_check(findings, "ib.port.counters")
    assert counters.message == "all 8 ports: error-counter checks within thresholds: 11"
    assert by_check(findings, "ib.gpudirect_rdma")[0].message.endswith("(nvidia_peermem)")


def test_degraded_ports_each_named():
    _, findings = evaluate({"ib-sysfs": own("sysfs-h100-degraded-2x-hdr-down-symbol-errors.txt"),
                            "peermem-module": "# peermem end\n"})
    bad_rate = {f.component: f for f in by_check(findings, "ib.port.rate") if f.status is Status.FAIL}
    assert set(bad_rate) == {"mlx5_4/1", "mlx5_9/1", "mlx5_10/1"}
    assert "width 2X instead of 4X" in bad_rate["mlx5_4/1"].message
    assert "speed HDR instead of NDR" in bad_rate["mlx5_9/1"].message
    assert bad_rate["mlx5_9/1"].value == "200 Gb/sec (4X HDR)"
    state = [f for f in by_check(findings, "ib.port.state") if f.status is Status.FAIL]
    assert [(f.component, f.value) for f in state] == [("mlx5_10/1", "DOWN / Disabled")]
    sym = by_check(findings, "ib.counter.symbol_error")
    assert [(f.component, f.value, f.status) for f in sym] == [("mlx5_5/1", 250, Status.FAIL)]
    downed = by_check(findings, "ib.counter.link_downed")
    assert [(f.component, f.value, f.status) for f in downed] == [("mlx5_5/1", 3, Status.WARN)]
    peer = by_check(findings, "ib.gpudirect_rdma")[0]
    assert peer.status is Status.FAIL and "neither nvidia_peermem nor nv_peer_mem" in peer.message


def test_counter_growth_since_previous_run_is_flapping():
    before, _ = evaluate({"ib-sysfs": own("sysfs-h100-8x-ndr-healthy.txt")})
    _, findings = evaluate({"ib-sysfs": own("sysfs-h100-link-downed-grew-fw-28.41.txt")},
                           previous={"infiniband": to_jsonable(before)})
    growth = {(f.check, f.component): f for f in findings if f.check.startswith("ib.counter_growth.")}
    flap = growth[("ib.counter_growth.link_downed", "mlx5_6/1")]
    assert flap.status is Status.FAIL and flap.value == 7 and "flapping" in flap.message
    sym = growth[("ib.counter_growth.symbol_error", "mlx5_0/1")]
    assert sym.status is Status.WARN and sym.value == 12
    assert len(growth) == 2
    # the absolute link_downed 7 is also above the warn level
    assert by_check(findings, "ib.counter.link_downed")[0].component == "mlx5_6/1"


def test_counter_reset_counts_from_zero():
    before, _ = evaluate({"ib-sysfs": own("sysfs-h100-link-downed-grew-fw-28.41.txt")})
    _, findings = evaluate({"ib-sysfs": own("sysfs-h100-8x-ndr-healthy.txt")},
                           previous={"infiniband": to_jsonable(before)})
    assert not [f for f in findings if f.check.startswith("ib.counter_growth.")]


def test_saturated_counter_is_explained():
    devices = parse_ib_sysfs(corpus_text("ib/sysfs-class-infiniband-h100-cx7-ndr-counters-UPSTREAM-EDITED.txt")
                             + "# ib-sysfs end\n")

    ctx = EvalContext(host=Host(name="gpu001"), profile=H100)
    findings = evaluate_infiniband(IbObservation(devices=devices, source="ib-sysfs"), ctx)
    downed = next(f for f in by_check(findings, "ib.counter.link_downed") if f.component == "mlx5_1/1")
    assert downed.status is Status.FAIL and "saturated at its 8-bit maximum" in downed.message
    # mlx5_bond_0 (BlueField-3, Ethernet, 2X) is not a ConnectX-7 and is not graded
    assert not [f for f in findings if "mlx5_bond_0" in f.component]


def test_roce_profile_grades_ibstat_fallback_ports_down():
    roce = replace(H100, expectations={**H100.expectations, "ib.port.link_layer": Expectation(
        key="ib.port.link_layer", op="eq", value="Ethernet", source="test: RoCE fabric")})
    obs, findings = evaluate({"ib-sysfs": "# ib-sysfs: no /sys/class/infiniband devices\n",
                              "ibstat": corpus_text("ib/ibstat-h100-node-eth400-2ports-down.txt")}, profile=roce)
    assert obs.source == "ibstat"
    assert by_check(findings, "ib.port.count")[0].value == 8
    down = [f.component for f in by_check(findings, "ib.port.state") if f.status is Status.FAIL]
    assert down == ["mlx5_5/1", "mlx5_11/1"]
    rates = [f for f in by_check(findings, "ib.port.rate") if f.status is Status.FAIL]
    assert [f.component for f in rates] == ["mlx5_5/1", "mlx5_11/1"]
    assert "rate 40.0 instead of 400" in rates[0].message


def test_ibstat_polling_port_on_ib_node():
    _, findings = evaluate({"ibstat": own("ibstat-h100-8x-ib-mlx5_3-down-polling.txt")})
    bad = [(f.check, f.component, f.value) for f in findings if f.status is Status.FAIL]
    assert bad == [("ib.port.state", "mlx5_3/1", "DOWN / Polling"), ("ib.port.rate", "mlx5_3/1", "10 Gb/sec")]
    assert by_check(findings, "ib.port.count")[0].status is Status.PASS


def test_ib_profile_on_roce_node_counts_zero_and_names_left_out_ports():
    _, findings = evaluate({"ibstat": corpus_text("ib/ibstat-h100-node-8x400G-roce-all-active.txt")})
    count = by_check(findings, "ib.port.count")[0]
    assert count.status is Status.FAIL and count.value == 0
    assert "mlx5_0/1 Ethernet" in count.message


def test_ibpanic_is_a_failure_naming_the_device():
    a100 = load_profile("a100-sxm4-80gb-8x")
    _, findings = evaluate({"ibstat": corpus_text("ib/ibstat-a100-azure-ibpanic-exit255.txt")}, profile=a100)
    panic = by_check(findings, "ib.ibstat")[0]
    assert (panic.status, panic.component) == (Status.FAIL, "mlx5_8")
    assert by_check(findings, "ib.hca.count")[0].value == 8


def test_no_devices_expected_vs_unexpected():
    l40s = load_profile("l40s-pcie-4x")
    none = "# ib-sysfs: no /sys/class/infiniband devices\n"
    _, findings = evaluate({"ib-sysfs": none}, profile=l40s)
    assert [(f.check, f.status) for f in findings] == [("ib.hca.count", Status.SKIP)]
    _, findings = evaluate({"ib-sysfs": none})
    assert by_check(findings, "ib.hca.count")[0].status is Status.FAIL


def test_hca_list_not_in_the_bundle_is_skip_never_zero_hcas():
    """A bundle holding the kernel log but neither ib-sysfs nor ibstat (a node run with a smaller probe set)."""
    obs, findings = evaluate({"kernel-log": "", "peermem-module": LOADED})
    assert obs.devices_collected is False
    assert [(f.check, f.status) for f in findings] == [("ib.hca.count", Status.SKIP),
                                                       ("ib.gpudirect_rdma", Status.PASS)]
    assert "ib-sysfs and ibstat were not collected" in findings[0].message


def test_peermem_module_and_commands():
    known = ("nvidia_peermem", "nv_peer_mem")
    assert parse_peermem_module(LOADED, known) == ("nvidia_peermem",)
    assert parse_peermem_module("nv_peer_mem\n# peermem end\n", known) == ("nv_peer_mem",)
    assert parse_peermem_module("nvidia_peermem\n", known) is None  # truncated
    assert "/sys/module/$m" in COMMANDS["peermem-module"]
    _, findings = evaluate({"ib-sysfs": own("sysfs-h100-8x-ndr-healthy.txt"), "peermem-module": "nvidia_peermem\n"})
    assert [f.status for f in by_check(findings, "ib.gpudirect_rdma")] == [Status.ERROR]
    assert '"$sysfs"/class/infiniband/*/ports/*/counters/*' in COMMANDS["ib-sysfs"]
    assert "# ib-sysfs end" in COMMANDS["ib-sysfs"]


def test_link_downed_growth_through_cli_previous_run(tmp_path):
    """`healthcheck run --previous RUN_DIR`: run 1 records the counters, run 2 (same host, link_downed
    0 -> 7 on mlx5_6) grades the growth as flapping; without --previous there is no growth finding."""
    from click.testing import CliRunner

    from healthcheck.cli.main import main
    from healthcheck.store.results import load_results

    def bundle(name: str, fixture: str) -> Path:
        raw = tmp_path / name / "raw" / "gpu001"
        raw.mkdir(parents=True)
        (raw / "ib-sysfs.out").write_text(own(fixture))
        (raw / "ib-sysfs.rc").write_text("0")
        return tmp_path / name

    def run(src: Path, out: str, *extra: str):
        args = ["run", "--replay", str(src), "--run-dir", str(tmp_path / out), "--profile", "h100-sxm5-8x",
                "--probes", "infiniband", *extra]
        CliRunner().invoke(main, args, catch_exceptions=False)
        return load_results(tmp_path / out).hosts["gpu001"].findings

    run(bundle("b1", "sysfs-h100-8x-ndr-healthy.txt"), "run1")
    later = bundle("b2", "sysfs-h100-link-downed-grew-fw-28.41.txt")
    growth = {(f.check, f.component): f for f in run(later, "run2", "--previous", str(tmp_path / "run1"))
              if f.check.startswith("ib.counter_growth.")}
    flap = growth[("ib.counter_growth.link_downed", "mlx5_6/1")]
    assert (flap.status, flap.value) == (Status.FAIL, 7) and "flapping" in flap.message
    assert set(growth) == {("ib.counter_growth.link_downed", "mlx5_6/1"),
                           ("ib.counter_growth.symbol_error", "mlx5_0/1")}
    assert not [f for f in run(later, "run3") if f.check.startswith("ib.counter_growth.")]


def test_ibstat_only_width_and_speed_unknown_are_not_graded_the_rate_is():
    """ibstat prints no width or speed: with only ibstat, every healthy port used to be ERROR."""
    _, findings = evaluate({"ibstat": corpus_text("ib/ibstat-h100-node-ib400-some-ports-down.txt")})
    [rate] = by_check(findings, "ib.port.rate")  # the 8 ports pass: one finding, which keeps the note
    assert rate.status is Status.PASS and rate.message == ("all 8 ports: rate 400 Gb/sec, within == 400 Gb/s "
                                                           "(width, speed not reported by ibstat: not graded)")
    assert {f.status for f in by_check(findings, "ib.port.state")} == {Status.PASS}


def test_ports_down_outside_the_fabric_are_named_never_dropped():
    """Real H100 node: 8x MT4129 IB all Active, 4x MT4125 Ethernet of which mlx5_2, mlx5_7, mlx5_8 are Down."""
    _, findings = evaluate({"ibstat": corpus_text("ib/ibstat-h100-node-ib400-some-ports-down.txt")})
    other = {f.component: f for f in by_check(findings, "ib.port.other")}
    assert set(other) == {"mlx5_2/1", "mlx5_7/1", "mlx5_8/1"}
    assert {f.status for f in other.values()} == {Status.WARN}
    assert other["mlx5_2/1"].message == ("mlx5_2/1 (Ethernet, HCA type MT4125 not in the profile): DOWN / Disabled")
    assert by_check(findings, "ib.hca.count")[0].status is Status.PASS  # the 8 compute HCAs are all there


def test_virtual_functions_of_another_type_at_the_profiles_rate_are_graded_and_the_type_warned():
    """Real A100 node (Azure): 9x MT4126 (the ConnectX VF id), 8 IB ports Active at 200 Gb/s, mlx5_0 Ethernet;
    the profile lists MT4123/MT4124. The ports are the profile's fabric (IB at 200): counted and graded, and
    the type difference is its own WARN, never ``ib.hca.count 0 HCAs``."""
    a100 = load_profile("a100-sxm4-80gb-8x")
    _, findings = evaluate({"ibstat": corpus_text("ib/ibstat-a100-node-all-active.txt")}, profile=a100)
    count = by_check(findings, "ib.hca.count")[0]
    assert (count.status, count.value) == (Status.PASS, 8)
    assert [(f.status, f.value) for f in by_check(findings, "ib.port.count")] == [(Status.PASS, 8)]
    (kind,) = by_check(findings, "ib.hca.type")
    assert (kind.status, kind.value, kind.expected) == (Status.WARN, "MT4126", "one of MT4123, MT4124")
    assert kind.message.startswith("8 of 8 fabric HCAs are of a type the profile does not list (mlx5_1 MT4126, ")
    assert "graded as fabric ports by link layer InfiniBand at the profile's rate (== 200 Gb/s)" in kind.message
    assert "add their CA type to ib.hca.type" in kind.remedy
    assert {f.status for f in by_check(findings, "ib.port.rate")} == {Status.PASS}
    assert [f.message for f in by_check(findings, "ib.port.state")] == [
        "all 8 ports: state ACTIVE / LinkUp, within == ACTIVE, == LinkUp"]
    assert not [f for f in findings if f.status in (Status.FAIL, Status.ERROR)]
    # derived fault: mlx5_2's port Down/Polling at rate 10; its type runs the fabric, so it stays a fabric port
    head, rest = corpus_text("ib/ibstat-a100-node-all-active.txt").split("CA 'mlx5_2'", 1)
    down = head + "CA 'mlx5_2'" + rest.replace("State: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 200",
                                               "State: Down\n\t\tPhysical state: Polling\n\t\tRate: 10", 1)
    _, findings = evaluate({"ibstat": down}, profile=a100)
    assert [(f.status, f.value) for f in by_check(findings, "ib.hca.count")] == [(Status.PASS, 8)]
    assert [(f.component, f.status, f.value) for f in by_check(findings, "ib.port.state")
            if f.status is not Status.PASS] == [("mlx5_2/1", Status.FAIL, "DOWN / Polling")]


def test_wrong_profile_grades_the_ports_on_their_rate_not_a_count_of_zero():
    """The H100 sample node (8x MT4129 IB at NDR 400 + 4 Ethernet) under the A100 profile (MT4123/MT4124, 200):
    the 8 IB ports are counted and fail on their rate; the type is a WARN; nothing is ERROR."""
    a100 = load_profile("a100-sxm4-80gb-8x")
    sample = Path(__file__).parents[2] / "inventories" / "samples" / "h100-4node" / "raw" / "h100-node01"
    _, findings = evaluate({"ib-sysfs": (sample / "ib-sysfs.out").read_text()}, profile=a100)
    assert [(f.check, f.status, f.value) for f in findings if f.check.endswith(".count")] == \
        [("ib.hca.count", Status.PASS, 8), ("ib.port.count", Status.PASS, 8)]
    (kind,) = by_check(findings, "ib.hca.type")
    assert kind.status is Status.WARN and "(no HCA of a listed type or at the profile rate on it)" in kind.message
    rate = by_check(findings, "ib.port.rate")
    assert len(rate) == 8 and {f.status for f in rate} == {Status.FAIL}
    assert "rate 400.0 instead of 200" in rate[0].message
    assert not [f for f in findings if f.status is Status.ERROR]


def test_a_swapped_adapter_of_another_type_counts_at_the_fabric_rate_only():
    """Derived from our healthy 8x ConnectX-7 fixture: mlx5_6 reports MT4131 (another ConnectX at NDR 400) and
    is counted with a WARN; a storage HCA of another type at HDR 200 on the same link layer is left out."""
    text = own("sysfs-h100-8x-ndr-healthy.txt").replace("mlx5_6/hca_type:MT4129", "mlx5_6/hca_type:MT4131")
    _, findings = evaluate({"ib-sysfs": text})
    assert [(f.status, f.value) for f in by_check(findings, "ib.hca.count")] == [(Status.PASS, 8)]
    (kind,) = by_check(findings, "ib.hca.type")
    assert (kind.status, kind.value) == (Status.WARN, "MT4131") and "(mlx5_6 MT4131;" in kind.message
    assert "by link layer InfiniBand at the profile's rate (== 400 Gb/s)" in kind.message
    slow = text.replace("mlx5_6/ports/1/rate:400 Gb/sec (4X NDR)", "mlx5_6/ports/1/rate:200 Gb/sec (4X HDR)")
    _, findings = evaluate({"ib-sysfs": slow})
    count = by_check(findings, "ib.hca.count")[0]
    assert (count.status, count.value) == (Status.FAIL, 7) and "not counted: mlx5_6 MT4131" in count.message
    assert [(f.status, f.value) for f in by_check(findings, "ib.hca.type")] == [(Status.PASS, "MT4129")]


def test_without_a_profile_a_port_not_active_is_a_warning_naming_it():
    """NHC's check_hw_ib rule holds on any hardware: with no profile, the Down/Disabled port is WARN and the
    Active ones PASS (saying which rule graded them), so the host is checked, not ERROR host.checked."""
    from healthcheck.core.profiles import EMPTY_PROFILE

    _, findings = evaluate({"ib-sysfs": own("sysfs-h100-degraded-2x-hdr-down-symbol-errors.txt")},
                           profile=EMPTY_PROFILE)
    state = by_check(findings, "ib.port.state")
    bad = [(f.component, f.status, f.value) for f in state if f.status is not Status.PASS]
    assert bad == [("mlx5_10/1", Status.WARN, "DOWN / Disabled")]
    assert "NHC check_hw_ib" in next(f for f in state if f.component == "mlx5_10/1").message
    [up] = [f for f in state if f.status is Status.PASS]  # the 11 other ports: one finding naming the rule
    assert up.message == ("mlx5_0/1,mlx5_1/1,mlx5_2/1,mlx5_3/1,mlx5_4/1,mlx5_5/1,mlx5_6/1,mlx5_7/1,mlx5_8/1,mlx5_9/1,"
                          "mlx5_11/1: state ACTIVE / LinkUp, within == ACTIVE, == LinkUp (no ib.port.state in "
                          "the profile: graded by the rule for any hardware, NHC check_hw_ib)")
    assert {f.status for f in by_check(findings, "ib.port.rate")} == {Status.SKIP}
    _, polling = evaluate({"ibstat": own("ibstat-h100-8x-ib-mlx5_3-down-polling.txt")}, profile=EMPTY_PROFILE)
    assert [(f.component, f.value) for f in by_check(polling, "ib.port.state") if f.status is Status.WARN] == \
        [("mlx5_3/1", "DOWN / Polling")]


def test_without_a_profile_the_corpus_ports_down_are_named_and_the_host_is_checked():
    """Real H100 nodes (gpud testdata), no profile: the three MT4125 Ethernet ports Down/Disabled are WARN by
    name, the nine Active ports PASS; the host holds evidence, so no ``host.checked`` ERROR is added."""
    from healthcheck.core.profiles import EMPTY_PROFILE
    from healthcheck.core.verdicts import nothing_checked

    _, findings = evaluate({"ibstat": corpus_text("ib/ibstat-h100-node-ib400-some-ports-down.txt")},
                           profile=EMPTY_PROFILE)
    state = by_check(findings, "ib.port.state")
    assert [(f.component, f.value) for f in state if f.status is Status.WARN] == \
        [("mlx5_2/1", "DOWN / Disabled"), ("mlx5_7/1", "DOWN / Disabled"), ("mlx5_8/1", "DOWN / Disabled")]
    [up] = [f for f in state if f.status is Status.PASS]
    assert up.message.startswith("mlx5_0/1,mlx5_1/1,mlx5_3/1,mlx5_4/1,mlx5_5/1,mlx5_6/1,mlx5_9/1,mlx5_10/1,"
                                 "mlx5_11/1: state ACTIVE / LinkUp")
    assert not [f for f in findings if f.status in (Status.FAIL, Status.ERROR)]

    class Result:
        def __init__(self, found):
            self.findings = found

    assert nothing_checked({"gpu001": Result(findings)}) == []
    _, roce = evaluate({"ibstat": corpus_text("ib/ibstat-h100-node-8x400G-roce-all-active.txt")},
                       profile=EMPTY_PROFILE)
    assert {f.status for f in by_check(roce, "ib.port.state")} == {Status.PASS}


def test_roce_site_profile_selects_the_fabric_by_rate_on_a_real_node():
    """Real H100 RoCE node (8x MT4129 Ethernet 400G + 4x MT4125 Ethernet 100G): a RoCE profile at 400 counts the
    eight ConnectX-7 ports; the 100G MT4125 ports are of another type and rate, so they are left out and named."""
    roce = replace(H100, expectations={**H100.expectations, "ib.port.link_layer": Expectation(
        key="ib.port.link_layer", op="eq", value="Ethernet", source="test: RoCE fabric")})
    _, findings = evaluate({"ibstat": corpus_text("ib/ibstat-h100-node-8x400G-roce-all-active.txt")}, profile=roce)
    count = by_check(findings, "ib.hca.count")[0]
    assert (count.status, count.value) == (Status.PASS, 8)
    assert [(f.status, f.value) for f in by_check(findings, "ib.hca.type")] == [(Status.PASS, "MT4129")]
    assert [f.message for f in by_check(findings, "ib.port.rate")] == [
        "all 8 ports: rate 400 Gb/sec, within == 400 Gb/s (width, speed not reported by ibstat: not graded)"]
    # the same node with its ConnectX-7 listed as another id (a VF): still the fabric at 400, type WARN
    text = corpus_text("ib/ibstat-h100-node-8x400G-roce-all-active.txt").replace("MT4129", "MT4130")
    obs, findings = evaluate({"ibstat": text}, profile=roce)
    assert [(f.status, f.value) for f in by_check(findings, "ib.hca.count")] == [(Status.PASS, 8)]
    (kind,) = by_check(findings, "ib.hca.type")
    assert (kind.status, kind.value) == (Status.WARN, "MT4130")
    assert "by link layer Ethernet at the profile's rate (== 400 Gb/s)" in kind.message
    assert sorted(p.name for p in fabric_ports(obs.devices, roce).fabric) == \
        ["mlx5_0/1", "mlx5_10/1", "mlx5_11/1", "mlx5_3/1", "mlx5_4/1", "mlx5_5/1", "mlx5_6/1", "mlx5_9/1"]
    assert [f.message.split(":")[0] for f in by_check(findings, "ib.port.rate")] == ["all 8 ports"]


def test_a_name_selector_that_matches_nothing_is_the_profiles_error():
    """``ib.hca.names`` that names no HCA of the node: ERROR saying to fix the selector (the node was measured,
    the profile's names are wrong); an HCA type that matches nothing is never such an ERROR."""
    named = replace(H100, expectations={**H100.expectations, "ib.hca.names": Expectation(
        key="ib.hca.names", op="in", value=["ibp12s0", "ibp13s0"], source="test: site names")})
    _, findings = evaluate({"ib-sysfs": own("sysfs-h100-8x-ndr-healthy.txt")}, profile=named)
    count = by_check(findings, "ib.hca.count")[0]
    assert (count.status, count.value) == (Status.ERROR, 0)
    assert "fix ib.hca.names" in count.remedy and "not counted: mlx5_0 MT4129" in count.message
    _, findings = evaluate({"ibstat": corpus_text("ib/ibstat-h100-node-8x400G-roce-all-active.txt")})
    assert {f.status for f in by_check(findings, "ib.hca.count")} == {Status.FAIL}


@pytest.mark.parametrize("name", ["sysfs-h100-8x-ndr-healthy.txt", "sysfs-h100-degraded-2x-hdr-down-symbol-errors.txt"])
def test_port_state_and_rate_graded_once_per_distinct_values_as_each_port_alone(name):
    """``_PortFacets`` grades each facet's values once a host: every port's outcome is exactly what a port
    graded alone gives (healthy ports alike, degraded ones apart, ibstat's unprinted width and speed,
    and a value that cannot be a key)."""
    from healthcheck.probes.infiniband import _PortFacets

    obs, _ = evaluate({"ib-sysfs": own(name)})
    ports = list(fabric_ports(obs.devices, H100).fabric)
    ports += [replace(ports[0], width=None, speed=None, rate_text=None), replace(ports[1], rate_gbps=400),
              replace(ports[2], state=["ACTIVE"])]
    facets = _PortFacets("gpu001", H100, "ib-sysfs")
    for port in ports + ports:
        assert facets.outcomes(port) == _PortFacets("gpu001", H100, "ib-sysfs").outcomes(port)
    assert len(facets.grades["ib.port.state"]._grades) < len(ports)  # alike ports shared one grading


def test_counter_rules_pair_each_counter_with_its_growth_rule_by_name():
    from healthcheck.probes.infiniband import _counter_rules

    rules = _counter_rules("gpu001", H100, "ib-sysfs")
    names = {k.split(".", 2)[2] for k in H100.expectations if k.startswith(("ib.counter.", "ib.counter_growth."))}
    assert [rule.name for rule in rules] == sorted(names)
    for rule in rules:
        for grades, check in ((rule.grades, f"ib.counter.{rule.name}"),
                              (rule.growth, f"ib.counter_growth.{rule.name}")):
            exp = H100.expect(check)
            assert (grades is None) if exp is None else (grades.exp is exp and grades.check == check)
