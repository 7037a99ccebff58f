"""history.py (index, lock, retention), regression.py (pure analysis) and sweep.annotate_and_record."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from healthcheck.core.model import Finding, Status
from healthcheck.ops.history import HistoryIndex, SweepLockedError, sweep_lock
from healthcheck.ops.nightly import annotate_and_record
from healthcheck.run.regression import (
    HostState,
    diff_verdicts,
    extract_measurements,
    growth_findings,
    regression_findings,
    worse_by,
)
from healthcheck.store.results import HostResult, RunResults, load_results, write_results

NOW = datetime(2026, 11, 22, 3, 15, tzinfo=timezone.utc)
HOSTS = ("gpu001", "gpu002", "gpu003", "gpu004")


def host(name: str, busbw: float = 450.0, temp: float = 40.0, dram_ce: int = 0,
         fail: str | None = None) -> HostResult:
    findings = [Finding(host=name, check="nccl.all_reduce.node.busbw", status=Status.PASS, value=busbw,
                        unit="GB/s", message="ok"),
                Finding(host=name, check="gpu.temp", status=Status.PASS, value="38-41", unit="C",
                        message="folded range: not a number")]
    if fail:
        findings.append(Finding(host=name, check=fail, status=Status.FAIL, message="broken"))
    gpus = [{"index": 0, "temp_c": temp, "ecc_aggregate": {"dram_correctable": dram_ce}},
            {"index": 1, "temp_c": 35.0, "ecc_aggregate": {"dram_correctable": None}}]
    return HostResult(name=name, findings=findings, observations={"gpu": {"gpus": gpus}})


def write_night(base: Path, run_id: str, hosts: dict[str, HostResult], started: datetime) -> Path:
    run_dir = base / "runs" / run_id
    run_dir.mkdir(parents=True)
    write_results(run_dir, RunResults(run={"id": run_id, "started": started.isoformat()}, hosts=hosts))
    (run_dir / "findings.jsonl").write_text("")
    return run_dir


# --- pure pieces ----------------------------------------------------------------------------
def test_extract_measurements_from_findings_and_observations():
    results = RunResults(run={"id": "r"}, hosts={"gpu001": host("gpu001", busbw=400, temp=41, dram_ce=3)})
    got = {(m.check, m.component): (m.metric, m.direction, m.value, m.unit)
           for m in extract_measurements(results)}
    assert got == {("nccl.all_reduce.node.busbw", "node"): ("busbw", "higher", 400.0, "GB/s"),
                   ("gpu.temp_c", "gpu0"): ("temperature", "lower", 41.0, "C"),
                   ("gpu.temp_c", "gpu1"): ("temperature", "lower", 35.0, "C"),
                   ("gpu.ecc.aggregate.dram_correctable", "gpu0"): ("errors", "counter", 3.0, "count")}


def test_hpl_measured_once_per_node_not_again_from_its_fleet_finding():
    findings = [Finding(host="gpu001", check=check, status=Status.PASS, value=365400.0, unit="GFLOPS", message="ok")
                for check in ("hpl.node.gflops", "hpl.node.fleet", "hpl.cluster.gflops_per_node")]
    findings.append(Finding(host="gpu001", check="hpl.gpu_warning", status=Status.WARN, value=1410.0, unit="MHz",
                            message="low clock"))
    results = RunResults(run={"id": "r"}, hosts={"gpu001": HostResult(name="gpu001", findings=findings)})
    assert sorted(m.check for m in extract_measurements(results) if m.metric == "hpl") == \
        ["hpl.cluster.gflops_per_node", "hpl.node.gflops"]


def test_pair_busbw_pinned_on_the_partner_is_not_this_nodes_measurement():
    from healthcheck.benchmarks.attribution import PairBlame, apply_blame

    slow = [Finding(host=h, check="nccl.all_reduce.pair.busbw", status=Status.FAIL, value=141.18, unit="GB/s",
                    component="pair node01-node03", source="j13", message="busbw 141.2 GB/s") for h in
            ("node01", "node03")]
    restated = apply_blame(slow, [PairBlame("j13", ("node01", "node03"), "node", ("node03",), "bad")])
    assert [f.status for f in restated] == [Status.PASS, Status.FAIL]
    results = RunResults(run={"id": "r"}, hosts={f.host: HostResult(name=f.host, findings=[f]) for f in restated})
    assert [(m.host, m.value) for m in extract_measurements(results)] == [("node03", 141.18)]


def test_worse_by_direction():
    assert worse_by("higher", 380, 440) == pytest.approx(60 / 440)
    assert worse_by("higher", 500, 440) == 0
    assert worse_by("lower", 52, 42) == pytest.approx(10 / 42)
    assert worse_by("lower", 30, 42) == 0


def test_regression_against_baseline_and_fleet_with_both_numbers():
    results = RunResults(run={}, hosts={h: host(h, busbw=380 if h == "gpu001" else 450) for h in HOSTS})
    ms = extract_measurements(results)
    findings = regression_findings(ms, {("gpu001", "nccl.all_reduce.node.busbw", "node"): (440.0, 2)}, 0.10)
    by_check = {f.check: f for f in findings}
    base, fleet = by_check["history.regression.baseline"], by_check["history.regression.fleet"]
    assert (base.host, base.status, base.value, base.unit) == ("gpu001", Status.WARN, 380.0, "GB/s")
    assert base.message == ("nccl.all_reduce.node.busbw: 380 GB/s is 14% worse than this node's baseline "
                            "440 GB/s (median of its last 2 passing runs)")
    assert base.expected == ">= 396 GB/s"
    assert fleet.message == ("nccl.all_reduce.node.busbw: 380 GB/s is 16% worse than the fleet median "
                             "450 GB/s (4 hosts in this run)")
    assert len(findings) == 2  # no fleet finding for temperatures, none for the healthy hosts


def test_counter_growth_reports_growth_not_total_and_ignores_resets():
    ms = extract_measurements(RunResults(run={}, hosts={"gpu001": host("gpu001", dram_ce=12),
                                                       "gpu002": host("gpu002", dram_ce=1)}))
    previous = {("gpu001", "gpu.ecc.aggregate.dram_correctable", "gpu0"): (5.0, "night2"),
                ("gpu002", "gpu.ecc.aggregate.dram_correctable", "gpu0"): (9.0, "night2")}
    [f] = growth_findings(ms, previous)
    assert (f.host, f.check, f.component, f.value) == ("gpu001", "history.counter.growth", "gpu0", 7.0)
    assert f.message == "gpu.ecc.aggregate.dram_correctable gpu0 grew by 7 since run night2 (was 5, now 12)"


def test_diff_verdicts():
    prev = {"a": HostState(Status.PASS), "b": HostState(Status.FAIL, ("gpu.count",)),
            "c": HostState(Status.ERROR, ("host.reachable",)), "gone": HostState(Status.PASS)}
    cur = {"a": HostState(Status.FAIL, ("xid.79",)), "b": HostState(Status.WARN),
           "c": HostState(Status.FAIL, ("gpu.count",)), "new": HostState(Status.FAIL, ("gpu.count",))}
    changes = diff_verdicts(prev, cur, "night1", {"c": 3})
    assert [(i["host"], i["was"]) for i in changes["new_failures"]] == [("a", "PASS"), ("new", None)]
    assert changes["recovered"] == [{"host": "b", "verdict": "WARN", "was": "FAIL", "checks": ["gpu.count"]}]
    assert changes["still_failing"] == [{"host": "c", "verdict": "FAIL", "was": "ERROR", "checks": ["gpu.count"],
                                         "new_checks": ["gpu.count"], "runs": 3}]
    assert changes["new_hosts"] == ["new"] and changes["missing_hosts"] == ["gone"]


# --- three nights: one node degrading, one recovering ---------------------------------------
def test_three_nights_degrading_and_recovering(tmp_path):
    nights = [
        {"gpu001": host("gpu001", 450, 40, 0), "gpu002": host("gpu002", fail="gpu.pcie.width"),
         "gpu003": host("gpu003"), "gpu004": host("gpu004")},
        {"gpu001": host("gpu001", 430, 44, 3), "gpu002": host("gpu002"),
         "gpu003": host("gpu003"), "gpu004": host("gpu004", fail="xid.79")},
        {"gpu001": host("gpu001", 380, 52, 10), "gpu002": host("gpu002"),
         "gpu003": host("gpu003", fail="gpu.count"), "gpu004": host("gpu004", fail="xid.79")},
    ]
    records = []
    for i, hosts in enumerate(nights, start=1):
        run_dir = write_night(tmp_path, f"night{i}", hosts, NOW - timedelta(days=3 - i))
        records.append(annotate_and_record(run_dir, tmp_path, now=NOW))
    r1, r2, r3 = records
    assert r1.changes["previous_run"] is None and [i["host"] for i in r1.changes["new_failures"]] == ["gpu002"]
    assert r1.findings == []
    assert r2.changes["recovered"][0]["host"] == "gpu002"
    assert [i["host"] for i in r2.changes["new_failures"]] == ["gpu004"]
    assert [(f.check, f.value) for f in r2.findings] == [("history.counter.growth", 3.0)]  # 430 and 44: within 10%
    assert [i["host"] for i in r3.changes["new_failures"]] == ["gpu003"]
    assert [(i["host"], i["runs"]) for i in r3.changes["still_failing"]] == [("gpu004", 2)]
    got = sorted((f.host, f.check, f.component, f.value) for f in r3.findings)
    assert got == [("gpu001", "history.counter.growth", "gpu0", 7.0),
                   ("gpu001", "history.regression.baseline", "gpu0", 52.0),
                   ("gpu001", "history.regression.baseline", "node", 380.0),
                   ("gpu001", "history.regression.fleet", "node", 380.0)]
    temp = next(f for f in r3.findings if f.component == "gpu0" and f.check.endswith("baseline"))
    assert temp.message == ("gpu.temp_c gpu0: 52 C is 24% worse than this node's baseline 42 C "
                            "(median of its last 2 passing runs)")
    # results.json of night 3: findings added, changes and trends at top level, schema intact
    doc = json.loads((tmp_path / "runs" / "night3" / "results.json").read_text())
    assert doc["schema"] == "healthcheck.results/3" and doc["changes"] == r3.changes
    trends = doc["trends"]["gpu001"]
    days = [(NOW - timedelta(days=d)).isoformat() for d in (2, 1, 0)]
    assert trends["nccl.all_reduce.node.busbw"] == {"metric": "busbw", "unit": "GB/s",
                                                    "values": [[days[0], 450.0], [days[1], 430.0],
                                                               [days[2], 380.0]]}
    assert [v for _, v in trends["gpu.temp_c"]["values"]] == [40.0, 44.0, 52.0]   # hottest GPU per run
    assert [v for _, v in trends["gpu.ecc.aggregate.dram_correctable"]["values"]] == [0.0, 3.0, 10.0]
    assert trends["gpu.temp_c"]["unit"] == "C"
    reloaded = load_results(tmp_path / "runs" / "night3")
    assert reloaded.hosts["gpu001"].verdict is Status.WARN
    assert sum(f.check.startswith("history.") for f in reloaded.findings()) == 4  # in the findings table


def test_baseline_ignores_runs_where_the_host_failed(tmp_path):
    for i, (busbw, fail) in enumerate([(450, None), (100, "xid.79"), (440, None)], start=1):
        run_dir = write_night(tmp_path, f"n{i}", {"gpu001": host("gpu001", busbw, fail=fail)},
                              NOW - timedelta(days=5 - i))
        annotate_and_record(run_dir, tmp_path, now=NOW)
    with HistoryIndex.open(tmp_path) as index:
        baselines = index.baselines(before_seq=None, runs=5)
    assert baselines[("gpu001", "nccl.all_reduce.node.busbw", "node")] == (445.0, 2)


def test_reannotating_a_run_is_idempotent(tmp_path):
    first = write_night(tmp_path, "n1", {"gpu001": host("gpu001", 450)}, NOW - timedelta(days=1))
    annotate_and_record(first, tmp_path, now=NOW)
    second = write_night(tmp_path, "n2", {"gpu001": host("gpu001", 300)}, NOW)
    a = annotate_and_record(second, tmp_path, now=NOW)
    b = annotate_and_record(second, tmp_path, now=NOW)
    assert [f.check for f in a.findings] == [f.check for f in b.findings] == ["history.regression.baseline"]
    assert a.seq == b.seq and b.changes["previous_run"] == "n1"
    assert len(load_results(second).hosts["gpu001"].findings) == 3
    with HistoryIndex.open(tmp_path) as index:
        assert [r.run_id for r in index.runs()] == ["n2", "n1"]


# --- retention ------------------------------------------------------------------------------
def test_retention_forgets_old_runs_and_deletes_only_dirs_under_runs(tmp_path):
    outside = tmp_path / "elsewhere" / "old-outside"
    outside.mkdir(parents=True)
    started = (NOW - timedelta(days=50)).isoformat()
    write_results(outside, RunResults(run={"id": "old-outside", "started": started},
                                      hosts={"gpu001": host("gpu001")}))
    annotate_and_record(outside, tmp_path, keep_days=365, now=NOW)
    for run_id, age in (("d40", 40), ("d20", 20)):
        annotate_and_record(write_night(tmp_path, run_id, {"gpu001": host("gpu001")},
                                        NOW - timedelta(days=age)), tmp_path, keep_days=365, now=NOW)
    record = annotate_and_record(write_night(tmp_path, "d0", {"gpu001": host("gpu001")}, NOW), tmp_path,
                                 keep_days=30, now=NOW)
    assert sorted(record.pruned) == ["d40", "old-outside"]
    assert not (tmp_path / "runs" / "d40").exists() and (tmp_path / "runs" / "d20").is_dir()
    assert outside.is_dir()  # not ours to delete: it is not under HISTORY/runs
    with HistoryIndex.open(tmp_path) as index:
        assert [r.run_id for r in index.runs()] == ["d0", "d20"]
        assert index.db.execute("SELECT COUNT(*) FROM measurements WHERE seq NOT IN "
                                "(SELECT seq FROM runs)").fetchone() == (0,)


# --- lock -----------------------------------------------------------------------------------
HOLDER = """
import sys
from pathlib import Path
from healthcheck.ops.history import sweep_lock
with sweep_lock(Path(sys.argv[1])):
    print("locked", flush=True)
    sys.stdin.read()
"""


def test_lock_contention_with_another_process(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(SweepLockedError) as info, sweep_lock(tmp_path):
            pass
        assert f"pid={proc.pid}" in info.value.holder
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    with sweep_lock(tmp_path) as path:  # released when the holder exits
        assert path == tmp_path / "sweep.lock"


def test_lock_is_exclusive_within_one_process_too(tmp_path):
    with sweep_lock(tmp_path), pytest.raises(SweepLockedError), sweep_lock(tmp_path):
        pass
    with sweep_lock(tmp_path):
        pass


def test_retention_removes_a_killed_sweeps_unrecorded_run_dir(tmp_path):
    """A sweep killed before it was recorded leaves HISTORY/runs/<stamp> with no index entry:
    retention removes it once it is past the keep window (and at least an hour old)."""
    killed = tmp_path / "runs" / "killed"
    (killed / "raw" / "gpu001").mkdir(parents=True)
    (killed / "manifest.json").write_text(json.dumps({"started": (NOW - timedelta(days=2)).isoformat()}))
    young = tmp_path / "runs" / "still-running"
    young.mkdir()
    (young / "manifest.json").write_text(json.dumps({"started": (NOW - timedelta(minutes=10)).isoformat()}))
    record = annotate_and_record(write_night(tmp_path, "d0", {"gpu001": host("gpu001")}, NOW), tmp_path,
                                 keep_days=0, now=NOW)
    assert record.pruned == ["killed"]
    assert not killed.exists() and young.is_dir() and (tmp_path / "runs" / "d0").is_dir()
