from __future__ import annotations

from datetime import date

from healthcheck.grading import (
    apply_known_issues,
    compare,
    expected_text,
    finding_from_expectation,
    fleet_outliers,
    grade,
    majority,
)
from healthcheck.model import Finding, Status
from healthcheck.profiles import Expectation, KnownIssue, Profile


def exp(**kw) -> Expectation:
    return Expectation(key=kw.pop("key", "x.y"), source=kw.pop("source", "datasheet"), **kw)


def test_compare_ops():
    assert compare("eq", "NVIDIA H100 ", "nvidia h100")
    assert compare("ge", "81559", 80000)
    assert not compare("lt", 90, 87)
    assert compare("in", "Enabled", ["enabled", "n/a"])
    assert compare("match", "NVIDIA H100 80GB HBM3", r"H100")
    assert compare("between", 5, [1, 10])


def test_grade_with_warn_threshold_and_severity():
    temp = exp(op="le", value=87, warn=80, unit="C")
    assert [grade(temp, t) for t in (70, 83, 91)] == [Status.PASS, Status.WARN, Status.FAIL]
    soft = exp(op="eq", value="Enabled", severity="WARN")
    assert grade(soft, "Disabled") is Status.WARN


def test_bands_fraction_of_expected():
    busbw = exp(op="ge", value=480, unit="GB/s", bands={"acceptable": 0.6, "warn": 0.5})
    assert [grade(busbw, v) for v in (400, 288, 250, 200)] == \
           [Status.PASS, Status.PASS, Status.WARN, Status.FAIL]


def test_finding_says_measured_expected_source_and_remedy():
    f = finding_from_expectation("gpu001", "gpu.count", exp(key="gpu.count", op="eq", value=8, unit="GPUs",
                                 source="HGX H100 spec"), 7, source="nvidia-smi-q-x",
                                 remedy="Reseat the GPU")
    assert f.status is Status.FAIL
    assert (f.value, f.expected, f.unit, f.source, f.remedy) == (7, "== 8 GPUs", "GPUs", "nvidia-smi-q-x",
                                                                 "Reseat the GPU")
    assert f.message == "gpu count 7 GPUs, expected == 8 GPUs (source: HGX H100 spec)"


def test_missing_expectation_is_skip_never_pass():
    f = finding_from_expectation("n1", "gpu.count", None, 8, source="s", remedy="r",
                                 profile=Profile(name="p1"))
    assert f.status is Status.SKIP and "no expectation for gpu.count in profile p1" in f.message


def test_ungradeable_value_is_error():
    f = finding_from_expectation("n1", "gpu.memory", exp(op="ge", value=80000), "N/A", source="s", remedy="r")
    assert f.status is Status.ERROR and "cannot grade" in f.message


def test_known_issue_downgrades_until_expiry():
    profile = Profile(name="p", known_issues=(KnownIssue("xid.13", "app bug TICKET-1", date(2027, 1, 31)),))
    f = Finding(host="n1", check="xid.13", status=Status.FAIL, message="Xid 13 x3")
    [active] = apply_known_issues([f], profile, date(2026, 12, 1))
    assert active.status is Status.WARN and "known issue until 2027-01-31: app bug TICKET-1" in active.message
    [expired] = apply_known_issues([f], profile, date(2027, 2, 1))
    assert expired.status is Status.FAIL


def test_fleet_outliers_and_majority():
    assert fleet_outliers({"a": 480, "b": 470, "c": 300, "d": 475}) == {"c": 472.5}
    assert fleet_outliers({"a": 1, "b": 100}) == {}
    top, odd = majority({"a": "535.104", "b": "535.104", "c": "550.54"})
    assert top == "535.104" and odd == {"c": "550.54"}
    assert expected_text(exp(op="between", value=[1, 2], unit="W")) == "between 1 and 2 W"


def test_warn_finding_shows_the_warn_bound_it_crossed():
    counter = exp(key="ib.counter.link_downed", op="le", value=100, warn=0, unit="events", source="gcm")
    f = finding_from_expectation("n1", "ib.counter.link_downed", counter, 3, source="ib-sysfs",
                                 remedy="check the cable", component="mlx5_5/1")
    assert f.status is Status.WARN
    assert f.expected == "<= 0 events (FAIL beyond 100)"
    assert f.message.startswith("mlx5_5/1: ib counter link downed 3 events, expected <= 0 events")
