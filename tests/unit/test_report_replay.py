"""End to end without SSH: ``healthcheck run --replay`` of a hand-made bundle renders every report,
including benchmark curves re-parsed from ``raw/_jobs`` and node output that tries to inject HTML.

The bundle holds our own fixtures only: ``nvidia-smi -L`` lines written here, and the project's
nccl-tests / IMB fixtures under tests/fixtures as the stored benchmark job outputs.
"""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from healthcheck.cli.main import main
from healthcheck.store.results import load_results
from tests.conftest import fixture_text

HOSTS = ("node01", "node02", "node03")
EVIL = "<script>document.title='pwned'</script>"
NCCL = {"node01": "nccl-tests/all_reduce-h100-1node-8gpu-healthy-476GBs-8G-16G.txt",
        "node02": "nccl-tests/all_reduce-h100-8gpu-degraded-210GBs.txt",
        "node03": "nccl-tests/all_reduce-h100-1node-8gpu-healthy-476GBs-8G-16G.txt"}


def job(job_id: str, bench: str, test: str, shape: str, hosts: list[str]) -> dict:
    return {"job": {"job_id": job_id, "benchmark": bench, "test": test, "shape": shape, "hosts": hosts,
                    "ranks_per_host": 8 if bench == "nccl" else 1, "stage": 0, "rail": None,
                    "retest_of": None, "timeout_s": 600.0},
            "launcher": "mpirun", "command": "mpirun ...", "rc": 0, "timed_out": False,
            "transport_error": None, "duration_s": 30.0}


def make_bundle(root: Path) -> Path:
    bundle = root / "bundle"
    for i, host in enumerate(HOSTS):
        folder = bundle / "raw" / host
        folder.mkdir(parents=True)
        name = f"NVIDIA H100 80GB HBM3 {EVIL}" if host == "node03" else "NVIDIA H100 80GB HBM3"
        lines = "".join(f"GPU {g}: {name} (UUID: GPU-{i}{g})\n" for g in range(8))
        (folder / "nvidia-smi-l.out").write_bytes(lines.encode() + (b"\xff\xfe\n" if host == "node03" else b""))
        (folder / "nvidia-smi-l.rc").write_text("0\n")
    jobs = bundle / "raw" / "_jobs"
    jobs.mkdir()
    entries = []
    for host, fixture in NCCL.items():
        job_id = f"nccl-all_reduce_perf-node-{host}"
        (jobs / f"{job_id}.out").write_text(fixture_text(fixture))
        entries.append(job(job_id, "nccl", "all_reduce_perf", "node", [host]))
    (jobs / "imb-pingpong-pair-node01-node02.out").write_text(fixture_text("imb/imb-pingpong-degraded-link-4.8us.txt"))
    entries.append(job("imb-pingpong-pair-node01-node02", "imb", "PingPong", "pair", ["node01", "node02"]))
    for entry in entries:
        (jobs / f"{entry['job']['job_id']}.rc").write_text("0\n")
        (jobs / f"{entry['job']['job_id']}.err").write_text("")
    (jobs / "manifest.json").write_text(json.dumps({"schema": "healthcheck.bench-jobs/1", "jobs": entries}))
    return bundle


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("replay")
    out = root / "run"
    result = CliRunner().invoke(main, ["run", "--replay", str(make_bundle(root)), "--run-dir", str(out),
                                       "--probes", "gpu", "--profile", "h100-sxm5-8x"])
    assert result.exit_code in (0, 1), result.output
    return out


def test_every_report_is_written(run_dir: Path) -> None:
    for name in ("results.json", "report.html", "junit.xml", "metrics.prom", "summary.md"):
        assert (run_dir / name).stat().st_size > 0, name
    assert set(load_results(run_dir).hosts) == set(HOSTS)


def test_html_has_curves_from_raw_jobs_and_stays_escaped(run_dir: Path) -> None:
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    bench = page[page.index('id="bench"'):page.index('id="details"')]
    assert "all_reduce_perf: busbw vs message size per node (3 nodes)" in bench
    assert len(re.findall("<polyline", bench)) == 2  # rows re-parsed from raw/_jobs/*.out; node01 = node03
    assert "node[01,03] (2 nodes, identical)" in bench and "node02: below the pass threshold" in bench
    assert "imb PingPong: latency (µs) per pair (1 pair, 2 nodes)" in bench
    assert "node01 ↔ node02" in bench
    assert "<script>document.title" not in page
    assert "&lt;script&gt;document.title" in page


def test_machine_readable_reports_agree(run_dir: Path) -> None:
    results = load_results(run_dir)
    root = ET.parse(run_dir / "junit.xml").getroot()
    failures = sum(f.status.value == "FAIL" for f in results.findings())
    assert int(root.get("failures")) == failures
    assert {s.get("name") for s in root.findall("testsuite")} == set(HOSTS)
    metrics = {(s.name, s.labels.get("host")): s.value for fam in text_string_to_metric_families(
        (run_dir / "metrics.prom").read_text()) for s in fam.samples
        if s.name == "healthcheck_nccl_busbw_bytes_per_second"}
    assert metrics[("healthcheck_nccl_busbw_bytes_per_second", "node01")] > 400e9
    assert metrics[("healthcheck_nccl_busbw_bytes_per_second", "node02")] < 300e9
    summary = (run_dir / "summary.md").read_text()
    assert summary.startswith(f"## healthcheck {results.verdict.value}:")


def test_report_junit_full_lists_every_finding(run_dir: Path, tmp_path: Path) -> None:
    """``report --junit-full``: a testcase per finding, PASS included; the default counts the passing ones."""
    results = load_results(run_dir)
    bounded = ET.parse(run_dir / "junit.xml").getroot()
    not_passed = sum(f.status.value != "PASS" for f in results.findings())
    assert int(bounded.get("tests")) == len(bounded.findall(".//testcase")) == len(HOSTS) + not_passed
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    result = CliRunner().invoke(main, ["report", "--junit-full", str(copy)])
    assert result.exit_code == 0, result.output
    full = ET.parse(copy / "junit.xml").getroot()
    assert int(full.get("tests")) == len(full.findall(".//testcase")) == len(list(results.findings()))
    assert (full.get("failures"), full.get("errors")) == (bounded.get("failures"), bounded.get("errors"))
