"""Repeat offenders through ``healthcheck sweep``: node02's GPU at x8 on 4 of 5 replayed nights is escalated.

The nights are capture bundles built from the real A10G corpus file by ``tests.integration.test_sweep``.
"""

from __future__ import annotations

import pytest

from tests.integration.test_sweep import bundle, latest_results, sweep

BAD = {"node02": (40, 0, "8x")}


@pytest.mark.corpus
def test_same_gpu_failing_four_of_five_nights_is_an_rma_candidate(tmp_path):
    history = tmp_path / "history"
    nights = [BAD, BAD, {}, BAD, BAD]
    seen = []
    for i, night in enumerate(nights[:4]):
        sweep(history, bundle(tmp_path / f"n{i}", night))
        seen.append([(o["component"], o["failures"], o["runs"]) for o in latest_results(history)["offenders"]])
    assert seen == [[], [], [], [("gpu0", 3, 4)]]       # night 2 passed; night 4 is the third failure
    out = sweep(history, bundle(tmp_path / "n4", nights[4]))
    doc = latest_results(history)
    assert [(o["host"], o["check"], o["component"], o["failures"], o["runs"]) for o in doc["offenders"]] == \
        [("node02", "gpu.pcie.width", "gpu0", 4, 5)]
    findings = [f for f in doc["hosts"]["node02"]["findings"] if f["check"] == "offender.repeat"]
    assert len(findings) == 1 and findings[0]["status"] == "FAIL"
    assert "RMA candidate: gpu0 gpu.pcie.width failing on 4 of the last 5 runs" in findings[0]["message"]
    assert "offender.repeat" in out.output
    html = (history / "runs" / doc["run"]["id"] / "report.html").read_text()
    assert 'id="offenders"' in html and "RMA candidate" in html
    summary = (history / "runs" / doc["run"]["id"] / "summary.md").read_text()
    assert "### Repeat offenders" in summary and "failing on 4 of the last 5 runs" in summary


@pytest.mark.corpus
def test_thresholds_from_the_command_line(tmp_path):
    history = tmp_path / "history"
    sweep(history, bundle(tmp_path / "n0", BAD), "--offender-failures", "2", "--offender-window", "2")
    assert latest_results(history)["offenders"] == []
    sweep(history, bundle(tmp_path / "n1", BAD), "--offender-failures", "2", "--offender-window", "2")
    assert [(o["host"], o["failures"], o["runs"]) for o in latest_results(history)["offenders"]] == \
        [("node02", 2, 2)]
