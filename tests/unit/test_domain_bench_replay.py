"""End to end without SSH: ``healthcheck run --replay`` of a GB200 NVL72 rack bundle whose ``raw/_jobs`` hold
one job of each domain-wide benchmark: nvloom (our fixture: a slow GPU pair), dcgmi mndiag (our fixture: one
GPU failing on r07t11) and nccl-tests over the 72 GPUs (the corpus's real single-rack tail, read at test time).
The jobs are rebuilt from their ids (no manifest) and graded with the rack's trays."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from healthcheck.cli.main import main
from healthcheck.store.results import load_results
from tests.conftest import corpus_text, fixture_text

HOSTS = [f"r07t{i:02d}" for i in range(1, 19)]
JOBS = {"nvloom-bisect_device_to_device_write_sm-domain-18nodes-r07t01":
        lambda: fixture_text("nvloom/gb200-nvl72-18trays-slow-pair-rank5-rank41.txt"),
        "mndiag-mnubergemm-domain-18nodes-r07t01": lambda: fixture_text("mndiag/gb200-nvl72-r07t11-gpu1-fail.json"),
        "nccl-all_reduce_perf-cluster-18nodes-r07t01":
        lambda: corpus_text("nccl-tests/all_reduce-gb200-nvl72-72gpu-single-rack-tail.txt")}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rackbench")
    for host in HOSTS:
        folder = root / "bundle" / "raw" / host
        folder.mkdir(parents=True)
        (folder / "nvidia-smi-q-x.out").write_text(fixture_text("nvidia-smi-xml/gb200-tray-4x-healthy.xml"))
        (folder / "nvidia-smi-q-x.rc").write_text("0\n")
    jobs = root / "bundle" / "raw" / "_jobs"
    jobs.mkdir()
    for job_id, text in JOBS.items():
        (jobs / f"{job_id}.out").write_text(text())
    out = root / "run"
    result = CliRunner().invoke(main, ["run", "--replay", str(root / "bundle"), "--run-dir", str(out),
                                       "--probes", "fabric", "--profile", "gb200-nvl72-tray"])
    assert result.exit_code == 1, result.output
    return out


def findings(run_dir: Path) -> list[dict]:
    """Every finding of the run (the findings table), as JSON objects."""
    return [f.to_json() for host in load_results(run_dir).hosts.values() for f in host.findings]


def test_failing_trays_are_the_ones_the_benchmarks_name(run_dir: Path) -> None:
    doc = json.loads((run_dir / "results.json").read_text())
    failed = sorted(h for h, r in doc["hosts"].items() if r["verdict"] == "FAIL")
    assert failed == ["r07t02", "r07t11"]
    r11 = {(f["check"], f["component"]) for f in doc["hosts"]["r07t11"]["findings"] if f["status"] == "FAIL"}
    assert ("mndiag.gpu", "gpu1") in r11 and ("nvloom.bisect_device_to_device_write_sm.domain", "gpu1") in r11


def test_nccl_over_the_rack_is_graded_against_the_domain(run_dir: Path) -> None:
    domain = [f for f in findings(run_dir) if f["check"] == "nccl.all_reduce.domain.busbw"]
    assert len(domain) == 18 and {(f["status"], f["value"]) for f in domain} == {("PASS", 846.82)}
    assert not [f for f in findings(run_dir) if f["check"] == "nccl.all_reduce.cluster.busbw"]


def test_job_records_carry_each_benchmark_metric(run_dir: Path) -> None:
    doc = json.loads((run_dir / "results.json").read_text())
    jobs = doc["hosts"]["r07t05"]["observations"]["benchmarks"]
    got = {name: (records[0]["status"], records[0]["metric"]) for name, records in jobs.items()}
    assert got == {"mndiag": ("FAIL", 1.0), "nccl": ("PASS", 846.82), "nvloom": ("FAIL", 743.35)}
