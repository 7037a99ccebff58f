"""Repeat offenders: N failing runs of the host's last M, the current one included, counted once per run."""

from __future__ import annotations

from healthcheck.core.model import Finding, Status
from healthcheck.ops.offenders import PastRun, failure_keys, offender_findings, repeat_offenders
from healthcheck.store.results import HostResult, RunResults

KEY = ("gpu007", "gpu.row_remap.failure", "gpu3")


def fail(host: str, check: str, component: str, status: Status = Status.FAIL) -> Finding:
    return Finding(host=host, check=check, component=component, status=status, message=f"{component} {check}")


def test_identical_findings_are_one_key_and_annotations_do_not_count():
    xid = [fail("gpu007", "xid.95", "gpu1") for _ in range(1000)]
    results = RunResults(run={"id": "r5"}, hosts={"gpu007": HostResult(name="gpu007", findings=[
        *xid, fail("gpu007", "offender.repeat", "gpu1"), fail("gpu007", "history.regression.baseline", "gpu1"),
        fail("gpu007", "gpu.temp_c", "gpu2", Status.WARN)])})
    assert list(failure_keys(results)) == [("gpu007", "xid.95", "gpu1")]


def test_four_of_the_last_five_nights_is_an_rma_candidate():
    past = [PastRun("r4", frozenset({KEY}), frozenset({"gpu007"})),
            PastRun("r3", frozenset(), frozenset({"gpu007"})),
            PastRun("r2", frozenset({KEY}), frozenset({"gpu007"})),
            PastRun("r1", frozenset({KEY}), frozenset({"gpu007"})),
            PastRun("r0", frozenset({KEY}), frozenset({"gpu007"}))]   # outside the window of 5
    current = {KEY: fail(*KEY)}
    offenders = repeat_offenders(current, past, "r5", min_failures=3, window=5)
    assert [(o.failures, o.runs, o.run_ids) for o in offenders] == [(4, 5, ("r5", "r4", "r2", "r1"))]
    finding = offender_findings(offenders, 3, 5)[0]
    assert (finding.check, finding.status, finding.component, finding.value) == \
        ("offender.repeat", Status.FAIL, "gpu3", 4)
    assert finding.message.startswith("RMA candidate: gpu3 gpu.row_remap.failure failing on 4 of the last 5 runs")
    assert "RMA" in finding.remedy


def test_not_escalated_below_threshold_when_passing_now_or_when_host_was_not_swept():
    past = [PastRun("r4", frozenset({KEY}), frozenset({"gpu007"})),
            PastRun("r3", frozenset(), frozenset({"other"}))]
    assert repeat_offenders({KEY: fail(*KEY)}, past, "r5", min_failures=3, window=5) == []
    assert repeat_offenders({}, [PastRun("r4", frozenset({KEY}), frozenset({"gpu007"}))] * 4, "r5", 3, 5) == []
    runs = repeat_offenders({KEY: fail(*KEY)}, past, "r5", min_failures=2, window=5)
    assert [(o.failures, o.runs) for o in runs] == [(2, 2)]     # r3 did not sweep gpu007: not in its window
