"""Observe-only checks: profile syntax, marking, verdict, drain and JSON round trip."""

from __future__ import annotations

from pathlib import Path

import pytest

from healthcheck.core.grading import apply_observe, observed
from healthcheck.core.model import Finding, Status, host_verdict
from healthcheck.core.profiles import ProfileError, load_profile
from healthcheck.ops.drain import DrainPolicy, triggers


def profile(tmp_path: Path, body: str):
    (tmp_path / "p.yaml").write_text("name: p\n" + body)
    return load_profile("p", [tmp_path])


def test_patterns_cover_exact_ids_subtrees_and_globs():
    assert observed("rate.ib.symbol_error", ["rate"]) and observed("rate.ib.symbol_error", ["rate.*"])
    assert observed("pci.gpu.count", ["pci.gpu.count"]) and not observed("pci.gpu.countx", ["pci.gpu.count"])
    assert not observed("gpu.count", ["pci.gpu"])


def test_profile_list_and_expectation_flag_and_inheritance(tmp_path: Path):
    (tmp_path / "base.yaml").write_text("name: base\nobserve: [xid.45]\n")
    p = profile(tmp_path, "inherits: base\nobserve: [rate.*]\nexpect:\n"
                          "  pci.gpu.count: {op: eq, value: 8, observe: true, source: s}\n")
    assert p.observe == ("xid.45", "rate.*", "pci.gpu.count")
    with pytest.raises(ProfileError, match="observe must be a list"):
        profile(tmp_path, "observe: rate.*\n")


def test_marked_finding_keeps_its_status_but_decides_nothing(tmp_path: Path):
    p = profile(tmp_path, "observe: [xid.45]\n")
    bad = Finding(host="gpu001", check="xid.45", status=Status.FAIL, message="Xid 45 x3", remedy="Drain the node")
    ok = Finding(host="gpu001", check="gpu.count", status=Status.PASS, message="8 GPUs")
    marked = apply_observe([ok, bad], p)
    assert [f.observe for f in marked] == [False, True] and marked[1].status is Status.FAIL
    assert marked[1].message.endswith("[observe-only: not counted in the verdict, never drains]")
    assert apply_observe(marked, p) == marked                                    # idempotent
    assert host_verdict(marked) is Status.PASS and host_verdict([ok, bad]) is Status.FAIL
    assert not triggers(marked[1], DrainPolicy()) and triggers(bad, DrainPolicy())
    assert Finding.from_json(marked[1].to_json()) == marked[1]
    assert "observe" not in ok.to_json()                                         # only written when set


def test_findings_table_keeps_the_mark(tmp_path: Path):
    from healthcheck.store.findings_table import read_table, write_table

    marked = Finding(host="gpu001", check="xid.45", status=Status.FAIL, message="x", observe=True)
    plain = Finding(host="gpu001", check="gpu.count", status=Status.PASS, message="8 GPUs")
    write_table(tmp_path, [marked, plain])
    assert [f.observe for f in read_table(tmp_path)["gpu001"]] == [True, False]
