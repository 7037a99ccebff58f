"""results.json version 3: the asset inventory only in the observation store (read by the commands that
need it), a healthy host's entry bounded, and runs written in version 2 (tests/fixtures/rundir-v2)
still reported, summarised and listed."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from healthcheck.cli.main import main
from healthcheck.core.model import Status
from healthcheck.run.execute import execute_run
from healthcheck.run.options import OutputOptions, RunOptions, SelectionOptions, TargetOptions
from healthcheck.store.observation_store import read_observations
from healthcheck.store.results import load_results

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "inventories" / "samples" / "h100-4node"
V2 = ROOT / "tests" / "fixtures" / "rundir-v2"
PROBES = ["gpu", "system", "xid", "fabric", "assets"]  # what the v2 fixture ran
HEALTHY_HOST_BYTES = 5000  # a PASS host's entry: verdict, counts, its SKIPs, versions, system, scalars


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("v3") / "run"
    execute_run(RunOptions(target=TargetOptions(replay=SAMPLE), outputs=OutputOptions(run_dir=run_dir)))
    return run_dir


@pytest.fixture
def old(tmp_path: Path) -> Path:
    """A version-2 run directory: the sample's raw/ and manifest.json with the v2 files."""
    run_dir = tmp_path / "old"
    shutil.copytree(SAMPLE, run_dir)
    for name in ("results.json", "findings.table.json.gz", "observations.jsonl.gz"):
        shutil.copy(V2 / name, run_dir / name)
    return run_dir


def _graded(run_dir: Path) -> set[tuple[str, str, str, str]]:
    """Each finding that did not pass, and each check passed per host (the version-2 writer listed a PASS per
    InfiniBand port, per GPU's NVLink count and fabric state, where this writer folds the passing ones into one)."""
    return {(f.host, f.check, f.component if f.status is not Status.PASS else "", f.status.value)
            for f in load_results(run_dir).findings()}


def _serials(output: str) -> set[tuple[str, str]]:
    return {(row["host"], row["serial"]) for row in csv.DictReader(io.StringIO(output)) if row["kind"] == "gpu"}


def test_assets_are_in_the_store_once_and_read_on_request(fresh: Path) -> None:
    doc = json.loads((fresh / "results.json").read_text())
    assert doc["schema"] == "healthcheck.results/3"
    node01 = doc["hosts"]["h100-node01"]
    assert "gpus" not in node01["observations"]["assets"]  # its scalars only, as any other probe's
    stored = read_observations(fresh, node01["observations_at"])
    assert stored is not None and len(stored["assets"]["gpus"]) == 8
    assert "gpus" not in load_results(fresh).hosts["h100-node01"].observations["assets"]
    asked = load_results(fresh, observations=("assets",)).hosts["h100-node01"].observations
    assert asked["assets"] == stored["assets"] and "gpus" not in asked["gpu"]  # only the probe asked for
    listed = CliRunner().invoke(main, ["assets", str(fresh), "--csv"])
    assert listed.exit_code == 0, listed.output
    assert len(_serials(listed.output)) == 32  # 8 GPUs on each of the 4 hosts


def test_results_json_is_written_host_by_host_as_the_one_document(fresh: Path) -> None:
    """write_results streams ``json_chunks``; read back, it is exactly ``to_json`` of the same results."""
    results = load_results(fresh)
    results.extra["changes"] = {"new": ["h100-node03"]}
    streamed = b"".join(results.json_chunks())
    assert json.loads(streamed) == json.loads(json.dumps(results.to_json()))
    # the run's own extra sections first (the fleet stage's fabric_heat), then what was added, then the schema
    assert streamed.startswith(b'{"fabric_heat":{"heat":[],"heat_total":0,"timed_hosts":0},'
                               b'"changes":{"new":["h100-node03"]},"schema":"healthcheck.results/3"')
    assert list(json.loads(streamed)["hosts"]) == sorted(results.hosts)
    assert json.loads((fresh / "results.json").read_text()) == json.loads(json.dumps(load_results(fresh).to_json()))


def test_a_healthy_hosts_entry_is_bounded(fresh: Path) -> None:
    """No record list (GPUs, links, ports, parts) in results.json: a PASS host's entry stays small."""
    doc = json.loads((fresh / "results.json").read_text())
    healthy = [h for h in doc["hosts"].values() if h["verdict"] == "PASS"]
    assert len(healthy) == 2
    for host in healthy:
        assert len(json.dumps(host, separators=(",", ":"), ensure_ascii=False).encode()) < HEALTHY_HOST_BYTES
        assert {s for s, n in host["counts"].items() if n} <= {"PASS", "SKIP"}
        assert all(f["status"] == "SKIP" for f in host["findings"])


def test_version_2_run_directory_reports_summarises_and_lists_its_assets(old: Path, tmp_path: Path) -> None:
    cli = CliRunner()
    shown = cli.invoke(main, ["results", str(old)])
    assert shown.exit_code == 1 and shown.output.startswith("verdict FAIL: 4 hosts"), shown.output
    rendered = cli.invoke(main, ["report", str(old)])
    assert rendered.exit_code == 0, rendered.output
    assert "results schema healthcheck.results/2 ·" in (old / "report.html").read_text()
    assert 'healthcheck_host_verdict{host="h100-node03",verdict="FAIL"} 1.0' in (old / "metrics.prom").read_text()
    fresh = execute_run(RunOptions(target=TargetOptions(replay=SAMPLE), outputs=OutputOptions(run_dir=tmp_path / "v3"),
                                   selection=SelectionOptions(probes=PROBES))).run_dir
    assert _graded(old) == _graded(fresh)
    listed = [cli.invoke(main, ["assets", str(run), "--csv"]) for run in (old, fresh)]
    assert [r.exit_code for r in listed] == [0, 0]
    assert _serials(listed[0].output) == _serials(listed[1].output) and len(_serials(listed[0].output)) == 32
    diff = cli.invoke(main, ["diff", str(old), str(fresh)])
    assert diff.exit_code == 0, diff.output
