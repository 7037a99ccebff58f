"""Error rates between two collections: IB, NVLink and AER counters per hour, resets restart the baseline."""

from __future__ import annotations

from datetime import datetime, timezone

from healthcheck.core.model import CommandResult, Host, Status
from healthcheck.core.profiles import load_profile
from healthcheck.core.spec import EvalContext
from healthcheck.probes.rates import counter_rates, evaluate_rates, parse_counter_clock, parse_rates
from healthcheck.store.jsoncodec import to_jsonable
from tests.conftest import fixture_text

H100 = load_profile("h100-sxm5-8x")
BOOT = "5c3e1c0e-0d3b-4a53-9a57-4e0fb3a5d2c1"
T0 = 1795000000


def clock(epoch: int, boot: str = BOOT) -> str:
    return f"{epoch}\n{boot}\n"


def own(rel: str) -> str:
    """Our fixture without its first (comment) line."""
    return fixture_text(rel).split("\n", 1)[1]


def snapshot(epoch: int, ib: str, nvlink: str, aer: str, boot: str = BOOT):
    texts = {"counter-clock": clock(epoch, boot), "ib-sysfs": own(f"ib/{ib}"),
             "nvidia-smi-nvlink-e": own(f"nvlink/{nvlink}"), "pcie-aer": own(f"system/{aer}")}
    return parse_rates({cid: CommandResult(host="gpu001", command_id=cid, stdout=t.encode(), rc=0)
                        for cid, t in texts.items()})


BEFORE = ("sysfs-h100-8x-ndr-healthy.txt", "h100-8gpu-errors-all-zero.txt", "pcie-aer-previous-run.txt")
AFTER = ("sysfs-h100-link-downed-grew-fw-28.41.txt", "h100-8gpu-errors-gpu1-link4-replay12-recovery1-crc40.txt",
         "pcie-aer-gpu-fatal-cmplto.txt")


def at(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, timezone.utc)


def grade(now, before, profile=H100, collected_at="node", previous_at="node"):
    """Grade ``now`` against ``before``; the collector's recorded times default to the node clocks'."""
    previous = {"rates": to_jsonable(before)} if before is not None else {}
    ctx = EvalContext(host=Host(name="gpu001"), profile=profile, previous=previous,
                      collected_at=at(now.epoch_s) if collected_at == "node" else collected_at,
                      previous_at=at(before.epoch_s) if before is not None and previous_at == "node" else
                      (previous_at if previous_at != "node" else None))
    return evaluate_rates(now, ctx)


def by_check(findings, check):
    return [f for f in findings if f.check == check]


def test_clock_parser():
    assert parse_counter_clock(clock(T0)) == (T0, BOOT, None)
    assert parse_counter_clock(f"{T0}\n") == (T0, None, None)
    assert parse_counter_clock(f"{T0}\n{BOOT}\n350735.47 5543321.93\n") == (T0, BOOT, 350735.47)
    assert parse_counter_clock(f"{T0}\n{BOOT}\nnan 1\n") == (T0, BOOT, None)


def test_rates_over_twelve_hours_name_the_port_link_and_device():
    findings = grade(snapshot(T0 + 12 * 3600, *AFTER), snapshot(T0, *BEFORE))
    flap = by_check(findings, "rate.ib.link_downed")
    assert [(f.component, f.status, f.value) for f in flap] == [("mlx5_6/1", Status.FAIL, 0.583)]
    assert "7 in 12.00 h" in flap[0].message and "azure_ib_link_flapping" in flap[0].message
    assert not by_check(findings, "rate.ib.symbol_error")          # 12 in 12 h = 1/h, within 120/h
    replay = by_check(findings, "rate.nvlink.replay")
    assert [(f.component, f.status, f.value) for f in replay] == [("gpu1 link 4", Status.WARN, 1.0)]
    crc = by_check(findings, "rate.nvlink.crc")
    assert [(f.component, f.status) for f in crc] == [("gpu1 link 4", Status.WARN), ("gpu7 link 17", Status.WARN)]
    aer = by_check(findings, "rate.aer.correctable")
    assert aer == []                                                  # 800 in 12 h = 66.7/h, within 1920/h
    summary = by_check(findings, "rate.counters")[0]
    assert summary.status is Status.PASS and summary.value > 100


def test_same_counts_in_twenty_minutes_break_the_aer_rate():
    findings = grade(snapshot(T0 + 1200, *AFTER), snapshot(T0, *BEFORE))
    aer = by_check(findings, "rate.aer.correctable")
    assert [(f.component, f.value, f.status) for f in aer] == [("0000:1b:00.0", 2400.0, Status.WARN)]
    assert "Pcie.cpp" in aer[0].message


def test_counter_that_went_backwards_restarts_the_baseline_without_a_rate():
    findings = grade(snapshot(T0 + 3600, *BEFORE), snapshot(T0, *AFTER))
    assert not [f for f in findings if f.check.startswith("rate.") and f.status in (Status.FAIL, Status.WARN)]
    reset = by_check(findings, "rate.baseline")
    assert len(reset) == 1 and reset[0].status is Status.SKIP
    assert "went backwards" in reset[0].message and "mlx5_6/1 link_downed (7 -> 0)" in reset[0].message
    rates, backwards = counter_rates({"ib": {"p": {"x": 3}}}, {"ib": {"p": {"x": 10}}}, 1.0)
    assert rates == [] and backwards == ["p x (10 -> 3)"]


def test_reboot_first_run_and_short_interval_are_baselines():
    assert "rebooted" in grade(snapshot(T0 + 3600, *AFTER, boot=BOOT.replace("5c", "6d")),
                               snapshot(T0, *BEFORE))[0].message
    assert "baseline" in grade(snapshot(T0, *AFTER), None)[0].message
    short = grade(snapshot(T0 + 10, *AFTER), snapshot(T0, *BEFORE))
    assert [f.check for f in short] == ["rate.baseline"] and "too short" in short[0].message


def test_unreadable_source_is_left_to_its_probe_not_an_error_here():
    outputs = {"counter-clock": clock(T0), "nvidia-smi-nvlink-e": "garbage before any GPU header\n",
               "pcie-aer": own("system/pcie-aer-previous-run.txt")}
    snap = parse_rates({cid: CommandResult(host="gpu001", command_id=cid, stdout=t.encode(), rc=0)
                        for cid, t in outputs.items()})
    assert set(snap.counters) == {"aer"} and snap.counters["aer"]["0000:1b:00.0"]["correctable"] == 100


def test_nvlink_counters_read_as_the_comprehension_over_every_field():
    """The three ints of a link named directly, anything else through the comprehension: the same dicts as
    ``{k: v for k in COUNTERS if isinstance(v, int)}`` per link (clean, N/A, counters over threshold)."""
    from healthcheck.probes.nvlink import COUNTERS, parse_nvidia_smi_nvlink_e
    from healthcheck.probes.rates import _nvlink

    errors = fixture_text("nvlink/h100-8gpu-errors-gpu1-link4-replay12-recovery1-crc40.txt").split("\n", 1)[1]
    for text in (errors, errors.replace(": 0\n", ": N/A\n", 9)):
        expected = {f"gpu{c.gpu} link {c.link}": {k: getattr(c, k) for k in COUNTERS if isinstance(getattr(c, k), int)}
                    for c in parse_nvidia_smi_nvlink_e(text)}
        got = _nvlink(CommandResult(host="h", command_id="nvidia-smi-nvlink-e", stdout=text.encode(), rc=0))["nvlink"]
        assert got == expected and list(got) == list(expected)
        assert [list(v) for v in got.values()] == [list(v) for v in expected.values()]


def test_the_interval_is_the_collectors_and_a_node_clock_that_disagrees_is_an_error():
    """Issue 29.6: a node clock reset to 0 before, or in 2100 now, gave PASS "within hourly rates over
    640956.9 h". The collector recorded the two collections 24 h apart: the node's clock disagrees, ERROR."""
    day = at(T0), at(T0 + 24 * 3600)
    for now_epoch, before_epoch in ((T0 + 24 * 3600, 0), (4102444800, T0)):
        findings = grade(snapshot(now_epoch, *AFTER), snapshot(before_epoch, *BEFORE), collected_at=day[1],
                         previous_at=day[0])
        (clock_finding,) = findings
        assert (clock_finding.check, clock_finding.status) == ("rate.clock", Status.ERROR)
        assert clock_finding.message.startswith(f"no error rates: node clock {before_epoch} -> {now_epoch} (")
        assert "collector 2026-11-18T" in clock_finding.message and "(24.0 h apart)" in clock_finding.message
        assert not any(f.status is Status.PASS for f in findings)
    agree = grade(snapshot(T0 + 24 * 3600 + 90, *AFTER), snapshot(T0, *BEFORE), collected_at=day[1],
                  previous_at=day[0])
    flap = by_check(agree, "rate.ib.link_downed")
    assert [(f.status, f.value) for f in flap] == [(Status.FAIL, 0.292)]   # 7 in the collector's 24 h


def test_a_previous_clock_that_is_not_an_integer_or_unrecorded_times_give_no_rate():
    before = to_jsonable(snapshot(T0, *BEFORE))
    ctx = EvalContext(host=Host(name="gpu001"), profile=H100, previous={"rates": {**before, "epoch_s": True}},
                      collected_at=at(T0 + 3600), previous_at=at(T0))
    (finding,) = evaluate_rates(snapshot(T0 + 3600, *AFTER), ctx)
    assert (finding.check, finding.status) == ("rate.baseline", Status.SKIP) and "no previous collection" in \
        finding.message
    (unrecorded,) = grade(snapshot(T0 + 3600, *AFTER), snapshot(T0, *BEFORE), previous_at=None)
    assert (unrecorded.check, unrecorded.status) == ("rate.baseline", Status.SKIP)
    assert unrecorded.message.startswith("the collector's time of the previous collection is not recorded")
