from __future__ import annotations

from datetime import date

from healthcheck.core.grading import (
    Grade,
    GradingError,
    Outcome,
    ValueGrades,
    apply_known_issues,
    compare,
    expected_text,
    finding_from_expectation,
    fleet_outliers,
    fold,
    grade,
    grade_bands,
    majority,
    passes,
    shown_value,
)
from healthcheck.core.model import Finding, Status
from healthcheck.core.profiles import Expectation, KnownIssue, Profile


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


# The grading helpers as they were before ``compare`` tried the thresholds first: the reference it must equal.
def _reference_compare(op, measured, value):
    import operator
    import re

    def norm(x):
        if isinstance(x, str):
            return x.strip().lower()
        if isinstance(x, float) and x.is_integer():
            return int(x)
        return x
    if op == "eq":
        return norm(measured) == norm(value)
    if op == "ne":
        return norm(measured) != norm(value)
    if op == "in":
        return norm(measured) in [norm(v) for v in value]
    if op == "match":
        return re.search(str(value), str(measured)) is not None
    if op == "between":
        low, high = value
        return float(low) <= float(measured) <= float(high)
    try:
        m, v = float(measured), float(value)
    except (TypeError, ValueError) as exc:
        raise GradingError(f"cannot compare {measured!r} {op} {value!r}") from exc
    return {"ge": operator.ge, "gt": operator.gt, "le": operator.le, "lt": operator.lt}[op](m, v)


def _reference_grade(e, measured):
    import math
    if isinstance(measured, float) and not math.isfinite(measured):
        raise GradingError(f"the node reported {measured}, not a measurement")
    if e.bands:
        return grade_bands(e, float(measured))
    if not _reference_compare(e.op, measured, e.value):
        return Status(e.severity)
    if e.warn is not None and not _reference_compare(e.op, measured, e.warn):
        return Status.WARN
    return Status.PASS


def _outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except Exception as exc:  # the same exception, with the same text, is part of the contract
        return (type(exc).__name__, str(exc))


_MEASURED = (0, 1, -1, 5, 80, 81559, 10**20, 0.0, -0.0, 0.5, 1.0, 80.0, 87.5, float("nan"), float("inf"),
             -float("inf"), True, False, "0", "80", " 81559 ", "Enabled", "enabled ", "N/A", "nan", "", "H100 80GB",
             "x" * 150, None, [1], (2,))
_EXPECTATIONS = (
    *(exp(op=op, value=v, warn=w, unit=u, severity=sev)
      for op in ("ge", "gt", "le", "lt") for v in (80, 0, 0.5, 80.0, "80", None) for w in (None, 70, "bad")
      for u in (None, "C") for sev in ("FAIL", "WARN")),
    *(exp(op=op, value=v) for op in ("eq", "ne") for v in (80, 1.0, 0, "Enabled", " ENABLED", True, None, -0.0)),
    exp(op="in", value=["enabled", 80, 1.0]), exp(op="between", value=[0, 87.5], unit="C"),
    exp(op="between", value=["1", 90]), exp(op="match", value="^-"), exp(op="match", value="H100"),
    exp(op="match", value="0$"), exp(op="ge", value=480, bands={"acceptable": 0.6, "warn": 0.5}),
    exp(op="le", value=10, warn=2, unit="errors", severity="ERROR"), exp(op="zz", value=1), exp(op="zz", value="x"),
)


def test_grade_and_compare_equal_the_reference():
    """Every op, with and without warn, against ints, floats (-0.0, nan, inf), bools, strings, None and
    containers: the same status or the same exception with the same text."""
    for e in _EXPECTATIONS:
        for m in _MEASURED:
            want = _outcome(_reference_grade, e, m)
            assert _outcome(grade, e, m) == want, (e, m)
            caught = want[0] in ("GradingError", "TypeError", "ValueError")
            assert _outcome(passes, e, m) == (("ok", want == ("ok", Status.PASS)) if want[0] == "ok" or caught
                                              else want), (e, m)
            for value in (e.value, e.warn):
                assert _outcome(compare, e.op, m, value) == _outcome(_reference_compare, e.op, m, value), (e, m)


def test_value_grades_tell_equal_values_of_other_types_apart():
    """0 and -0.0 or 0.0, 1 and True: equal, and graded apart where the type shows (``match``, ``eq``),
    each value's finding the one it gets graded alone."""
    for e, values in ((exp(op="match", value="^-"), (0, -0.0, 0.0, 0, -0.0)),
                      (exp(op="match", value="True"), (1, True, 1, True))):
        assert [ValueGrades("n1", "x.y", e, source="s", remedy="r").passes(m) for m in values] == [
            grade(e, m) is Status.PASS for m in values]
        grades = ValueGrades("n1", "x.y", e, source="s", remedy="r")
        assert [grades.passes(m) for m in values] == [grade(e, m) is Status.PASS for m in values]
        assert [grades.grade(m).status for m in values] == [grade(e, m) for m in values]
        assert [grades.finding("gpu0", m) for m in values] == [
            finding_from_expectation("n1", "x.y", e, m, source="s", remedy="r", component="gpu0") for m in values]


def test_expected_text_and_grade_follow_a_list_changed_in_place_and_equal_expectations():
    allowed = ["Enabled"]
    e = exp(op="in", value=allowed)
    assert (expected_text(e), grade(e, "Disabled")) == ("one of Enabled", Status.FAIL)
    allowed.append("Disabled")
    assert (expected_text(e), grade(e, "Disabled")) == ("one of Enabled, Disabled", Status.PASS)
    a, b = exp(op="le", value=87, unit="C"), exp(op="le", value=87, unit="C")
    assert expected_text(a) == expected_text(b) == "<= 87 C"
    assert expected_text(a, 80) == "<= 80 C"


def test_a_findings_message_is_built_from_its_parts():
    """``lead``, the component (or a label), the graded text, ``note``, the citation, ``detail``; a message
    that names no component (no expectation, cannot grade) takes the label only when one is given."""
    e = exp(op="le", value=0, unit="errors", source="NVIDIA; more")
    grades = ValueGrades("n1", "gpu.ecc.dram", e, source="smi", remedy="r")
    f = grades.finding("gpu3", 5, label="gpu3 (bus)", lead="L; ", note=" [n]", detail=" (d)")
    assert f.message == "L; gpu3 (bus): gpu ecc dram 5 errors, expected <= 0 errors [n] (source: NVIDIA) (d)"
    assert (f.component, f.status, f.remedy, f.source) == ("gpu3", Status.FAIL, "r", "smi")
    assert grades.finding("node", 0).message == "gpu ecc dram 0 errors, within <= 0 errors"
    assert grades.finding("gpu3", "x", note=" [n]").message == (
        "cannot grade gpu.ecc.dram: cannot compare 'x' le 0 [n]")
    assert grades.finding("gpu3", "x", label="gpu3 (bus)").message.startswith("gpu3 (bus): cannot grade")
    assert ValueGrades("n1", "a.b", e, source="s", remedy="r", what="A").finding("c", 1).message.startswith("c: A 1")


def test_fold_keeps_bad_components_folds_alike_ones_and_leaves_a_lone_one_whole():
    def outcome(component: str, status: Status, value: object, text: str = "t") -> Outcome:
        return Outcome(component, Grade("gpu.x_y", status, value, "<= 5", "W", text), f"{component} (b)")

    node = Outcome("node", Grade("gpu.x_y", Status.SKIP, None, None, None, "no expectation", named=False))
    out = fold("n1", "smi", [outcome("gpu0", Status.PASS, 1), None, outcome("gpu1", Status.FAIL, 9), node, node,
                             outcome("gpu2", Status.PASS, 3), outcome("gpu3", Status.SKIP, None, "idle"),
                             Outcome("gpu0", Grade("gpu.z", Status.PASS, 1, None, None, "z 1"), "gpu0 (b)")],
               total=3, noun="GPUs")
    assert [(f.check, f.component, f.status.value, f.value, f.message) for f in out] == [
        ("gpu.x_y", "node", "SKIP", None, "no expectation"),
        ("gpu.x_y", "gpu1", "FAIL", 9, "gpu1 (b): t"),
        ("gpu.x_y", "node", "PASS", "1-3", "gpu0,gpu2: x y 1-3 W, within <= 5"),
        ("gpu.x_y", "gpu3", "SKIP", None, "gpu3 (b): idle"),
        ("gpu.z", "gpu0", "PASS", 1, "gpu0 (b): z 1")]
    alike = fold("n1", "smi", [outcome(f"gpu{i}", Status.SKIP, None, "idle") for i in range(3)], total=3,
                 noun="GPUs", names={"gpu.x_y": "unused for a SKIP"})
    assert [(f.component, f.message) for f in alike] == [("node", "all 3 GPUs: idle")]


def test_shown_value_is_the_one_value_a_range_or_mixed():
    assert [shown_value(v) for v in ([7, 7], [29, 34, 31], ["No", "No"], ["Yes", "No"], [1, 1.0], [None, None])] == [
        7, "29-34", "No", "mixed", "mixed", None]
