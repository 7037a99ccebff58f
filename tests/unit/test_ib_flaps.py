"""Link flaps of fabric ports: kernel link-down lines (corpus syslog and dmesg) in the window, link_downed growth."""

from __future__ import annotations

from datetime import datetime, timezone

from healthcheck.core.model import CommandResult, Host, Status
from healthcheck.core.profiles import EMPTY_PROFILE, load_profile
from healthcheck.core.spec import EvalContext
from healthcheck.probes.infiniband import COMMANDS, evaluate_infiniband, ib_commands, parse_infiniband
from healthcheck.store.jsoncodec import to_jsonable
from tests.conftest import corpus_text, fixture_text

H100 = load_profile("h100-sxm5-8x")
HEALTHY = "ib/sysfs-h100-8x-ndr-healthy.txt"
# our fixture's mlx5_6 port 1 carries the IPoIB netdev ib6 (the sysfs file device/net/ib6/dev_port, 0-based)
IB6 = "/sys/class/infiniband/mlx5_6/device/net/ib6/dev_port:0\n# ib-sysfs end"


def own(rel: str) -> str:
    return fixture_text(rel).split("\n", 1)[1]


def flaps(sysfs: str, log: str | None, now: datetime, profile=H100, previous=None):
    outputs = {"ib-sysfs": sysfs} | ({"kernel-log": log} if log is not None else {})
    obs = parse_infiniband({cid: CommandResult(host="gpu001", command_id=cid, stdout=t.encode(), rc=0)
                            for cid, t in outputs.items()})
    ctx = EvalContext(host=Host(name="gpu001"), profile=profile, now=now, previous=previous or {})
    return [f for f in evaluate_infiniband(obs, ctx) if f.check == "ib.link_flap"]


def test_six_lost_carrier_lines_of_a_port_in_the_window_fail_naming_port_and_netdev():
    """Corpus misc/syslog-ib6-lost-carrier-link-flap (AzNHC's own test data): 6x 'ib6: lost carrier'."""
    log = corpus_text("misc/syslog-ib6-lost-carrier-link-flap.txt")
    sysfs = own(HEALTHY).replace("# ib-sysfs end", IB6)
    (flap,) = flaps(sysfs, log, datetime(2026, 8, 17, 12, 0, tzinfo=timezone.utc))
    assert (flap.component, flap.status, flap.value, flap.source) == ("mlx5_6/1", Status.FAIL, 6, "kernel-log")
    assert flap.message.startswith("mlx5_6/1 (ib6): 6 link-down lines in the kernel log in the last 24 h "
                                   "(2026-08-17 06:18:01 .. 2026-08-17 06:18:06 UTC)")
    assert 'e.g. "ib6: lost carrier"' in flap.message and "azure_ib_link_flapping" in flap.message
    assert "mlxlink" in flap.remedy
    # two days later the lines are out of the 24 h window: the port did not flap in it
    (quiet,) = flaps(sysfs, log, datetime(2026, 8, 19, 12, 0, tzinfo=timezone.utc))
    assert (quiet.component, quiet.status) == ("node", Status.PASS)
    assert "netdevs of 1 of 8 fabric ports" in quiet.message


def test_an_ipoib_netdev_of_no_known_port_is_still_named():
    log = corpus_text("misc/syslog-ib6-lost-carrier-link-flap.txt")
    (flap,) = flaps(own(HEALTHY), log, datetime(2026, 8, 17, 12, 0, tzinfo=timezone.utc))
    assert (flap.component, flap.status, flap.value) == ("ib6", Status.FAIL, 6)
    assert "an IPoIB netdev whose HCA port is not known" in flap.message


def test_boot_link_downs_of_unused_ethernet_ports_are_not_fabric_flaps():
    """Corpus misc/dmesg-boot-h100-cx7-mlx5-iso: 'mlx5_core 0000:9d:00.1 enp157s0f1np1: Link down' on
    unplugged ConnectX-6 Dx Ethernet ports at boot; the IB fabric ports are not among them."""
    log = corpus_text("misc/dmesg-boot-h100-cx7-mlx5-iso.txt")
    (only,) = flaps(own(HEALTHY), log, datetime(2025, 1, 18, 0, 0, tzinfo=timezone.utc))
    assert (only.check, only.status, only.value) == ("ib.link_flap", Status.PASS, 0)
    # the same line for a fabric port's netdev counts: derived from the real line
    mapped = own(HEALTHY).replace("# ib-sysfs end", "/sys/class/infiniband/mlx5_0/device/net/enp157s0f1np1/dev_port:0"
                                  "\n# ib-sysfs end")
    (flap,) = flaps(mapped, log, datetime(2025, 1, 18, 0, 0, tzinfo=timezone.utc))
    assert (flap.component, flap.status, flap.value) == ("mlx5_0/1", Status.WARN, 1)
    assert 'e.g. "mlx5_core 0000:9d:00.1 enp157s0f1np1: Link down"' in flap.message


def test_link_downed_growth_since_the_previous_run_is_a_flap_without_a_kernel_log():
    before = parse_infiniband({"ib-sysfs": CommandResult(host="gpu001", command_id="ib-sysfs",
                                                         stdout=own(HEALTHY).encode(), rc=0)})
    (flap,) = flaps(own("ib/sysfs-h100-link-downed-grew-fw-28.41.txt"), None, datetime.now(timezone.utc),
                    previous={"infiniband": to_jsonable(before)})
    assert (flap.component, flap.status, flap.value, flap.source) == ("mlx5_6/1", Status.FAIL, 7, "ib-sysfs")
    assert "link_downed +7 since the previous run" in flap.message
    # no kernel log, no growth: nothing said either way (not a PASS on no evidence)
    assert flaps(own(HEALTHY), None, datetime.now(timezone.utc)) == []


def test_without_a_profile_the_aznhc_rule_grades_a_single_flap_as_warn():
    log = ("# kernel-log source=journalctl uptime_s=5000\n"
           "Aug 17 06:18:01 node kernel: mlx5_core 0000:17:00.0 ib6: Link down\n")
    sysfs = own(HEALTHY).replace("# ib-sysfs end", IB6)
    (flap,) = flaps(sysfs, log, datetime(2026, 8, 17, 12, 0, tzinfo=timezone.utc), profile=EMPTY_PROFILE)
    assert (flap.component, flap.status, flap.value) == ("mlx5_6/1", Status.WARN, 1)
    assert "a rule for any hardware" in flap.message


def test_the_kernel_log_and_netdevs_are_collected():
    assert "device/net/*/dev_port" in COMMANDS["ib-sysfs"]
    assert "journalctl -k" in ib_commands({"kernel_log_window_h": 6})["kernel-log"]
    assert "-21600s" in ib_commands({"kernel_log_window_h": 6})["kernel-log"]
