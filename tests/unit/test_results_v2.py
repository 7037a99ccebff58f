"""results.json version 2: small document, full findings table, observation store, JSON Schema,
and runs written in version 1 (tests/fixtures/rundir-v1) still reported, summarised and replayed."""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from jsonschema import Draft202012Validator

from healthcheck.cli.main import main
from healthcheck.core.model import Finding, Host, Status
from healthcheck.run.execute import execute_run
from healthcheck.run.options import OutputOptions, RunOptions, SelectionOptions, TargetOptions
from healthcheck.store.findings_table import TABLE, TableError, findings_frame, read_table, write_table
from healthcheck.store.observation_store import STORE, read_observations
from healthcheck.store.results import RunResults, load_results, results_schema

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "inventories" / "samples" / "h100-4node"
V1 = ROOT / "tests" / "fixtures" / "rundir-v1" / "results.json"
PROBES = ["gpu", "system", "xid", "fabric"]  # what the v1 fixture ran


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("v2") / "run"
    execute_run(RunOptions(target=TargetOptions(replay=SAMPLE),
                           outputs=OutputOptions(run_dir=run_dir),
                           selection=SelectionOptions(probes=PROBES)))
    return run_dir


@pytest.fixture
def old(tmp_path: Path) -> Path:
    """A version-1 run directory: the sample's raw/ and manifest.json with the v1 results.json."""
    run_dir = tmp_path / "old"
    shutil.copytree(SAMPLE, run_dir)
    shutil.copy(V1, run_dir / "results.json")
    return run_dir


def key(f: Finding) -> tuple:
    # messages are left out: their wording evolves (the v1 fixture froze an older one); the graded facts do not
    return (f.host, f.check, f.component, f.status.value, f.value, f.expected)


def graded(f: Finding) -> tuple:
    """What must not change between the version-1 writer and now; message texts may be reworded."""
    return (f.host, f.check, f.component, f.status.value)


def test_document_is_small_and_validates_against_the_shipped_schema(fresh: Path) -> None:
    doc = json.loads((fresh / "results.json").read_text())
    assert doc["schema"] == "healthcheck.results/3"
    assert doc["files"] == {"findings": TABLE, "observations": STORE}
    Draft202012Validator.check_schema(results_schema())
    assert list(Draft202012Validator(results_schema()).iter_errors(doc)) == []
    node03 = doc["hosts"]["h100-node03"]
    assert node03["verdict"] == "FAIL" and node03["counts"]["FAIL"] >= 3
    assert {f["status"] for h in doc["hosts"].values() for f in h["findings"]} <= {"WARN", "ERROR", "FAIL", "SKIP"}
    assert "gpus" not in node03["observations"]["gpu"] and node03["observations"]["gpu"]["count"] == 8
    table = read_table(fresh)
    for name, host in doc["hosts"].items():
        assert sum(host["counts"].values()) == len(table[name])
        assert host["counts"]["PASS"] == sum(f.status is Status.PASS for f in table[name]) > 0


def test_schema_rejects_what_readers_could_not_use(fresh: Path) -> None:
    doc = json.loads((fresh / "results.json").read_text())
    host = doc["hosts"]["h100-node03"]
    host["findings"][0]["status"] = "BROKEN"
    host["findings"].append({**host["findings"][1], "status": "PASS"})
    del doc["hosts"]["h100-node01"]["counts"]
    errors = sorted(e.json_path for e in Draft202012Validator(results_schema()).iter_errors(doc))
    assert "$.hosts['h100-node01']" in errors
    assert any(path.startswith("$.hosts['h100-node03'].findings[0]") for path in errors)
    assert any(path.startswith(f"$.hosts['h100-node03'].findings[{len(host['findings']) - 1}]") for path in errors)


def assert_same_grading(after: Iterable[Finding], before: Iterable[Finding]) -> None:
    """The same findings that did not pass, and the same checks passed on each host: the writer of version 1
    listed a PASS per InfiniBand port, per GPU's NVLink count and fabric state, which now fold into one."""
    after, before = list(after), list(before)
    assert sorted(graded(f) for f in after if f.status is not Status.PASS) == \
        sorted(graded(f) for f in before if f.status is not Status.PASS)
    assert {(f.host, f.check) for f in after if f.status is Status.PASS} == \
        {(f.host, f.check) for f in before if f.status is Status.PASS}


def test_same_verdicts_and_findings_as_the_version_1_writer(fresh: Path) -> None:
    before = RunResults.from_json(json.loads(V1.read_text()))
    after = load_results(fresh)
    assert {n: h.verdict for n, h in after.hosts.items()} == {n: h.verdict for n, h in before.hosts.items()} == {
        "h100-node01": Status.PASS, "h100-node02": Status.PASS, "h100-node03": Status.FAIL,
        "h100-node04": Status.WARN}
    assert_same_grading(after.findings(), before.findings())
    now, then = after.summary(), before.summary()
    assert {**now, "findings_by_status": None} == {**then, "findings_by_status": None}
    assert {**now["findings_by_status"], "PASS": 131} == {**then["findings_by_status"], "PASS": 131}
    assert (now["findings_by_status"]["PASS"], then["findings_by_status"]["PASS"]) == (131, 187)


def test_full_observations_are_in_the_store(fresh: Path) -> None:
    doc = json.loads((fresh / "results.json").read_text())
    full = load_results(fresh, observations=True).hosts["h100-node03"].observations
    assert len(full["gpu"]["gpus"]) == 8 and full["gpu"]["count"] == 8
    assert read_observations(fresh, doc["hosts"]["h100-node03"]["observations_at"]) == full
    assert read_observations(fresh, [0, 3]) is None and read_observations(fresh, "x") is None
    with gzip.open(fresh / STORE, "rt") as fh:  # an ordinary .jsonl.gz: zcat reads it
        lines = [json.loads(line) for line in fh]      # one line per probe of each host, in the run's order
    assert sorted({line["host"] for line in lines}) == sorted(doc["hosts"])
    assert sorted(line["probe"] for line in lines if line["host"] == "h100-node03") == sorted(full)


def test_version_1_run_directory_reports_summarises_and_replays(old: Path, tmp_path: Path) -> None:
    cli = CliRunner()
    shown = cli.invoke(main, ["results", str(old)])
    assert shown.exit_code == 1 and "h100-node03" in shown.output and "gpu.row_remap.pending" in shown.output
    rendered = cli.invoke(main, ["report", str(old)])
    assert rendered.exit_code == 0, rendered.output
    assert 'healthcheck_host_verdict{host="h100-node03",verdict="FAIL"} 1.0' in (old / "metrics.prom").read_text()
    assert "gpu.row_remap.pending" in (old / "report.html").read_text()
    assert "results schema healthcheck.results/1 ·" in (old / "report.html").read_text()  # as read, not as rewritten
    replayed = cli.invoke(main, ["run", "--replay", str(old), "--probes", ",".join(PROBES),
                                 "--run-dir", str(tmp_path / "again")])
    assert replayed.exit_code == 1, replayed.output
    before = RunResults.from_json(json.loads(V1.read_text()))
    assert_same_grading(load_results(tmp_path / "again").findings(), before.findings())


def test_report_command_reads_the_run_once_and_writes_what_a_fresh_load_writes(fresh: Path, tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``healthcheck report`` hands the results it loaded to the reports (results.json and the table were read
    twice: ~40% of its time); the files equal those rendered from the directory by ``reports.write_all``."""
    from healthcheck import reports
    from healthcheck.store import findings_table

    assert "results schema healthcheck.results/3 ·" in (fresh / "report.html").read_text()  # the run's own page
    reference, again = tmp_path / "reference", tmp_path / "again"
    shutil.copytree(fresh, reference)
    shutil.copytree(fresh, again)
    reports.write_all(reference)
    tables_read = []
    real_read_table = findings_table.read_table
    monkeypatch.setattr("healthcheck.store.results.read_table",
                        lambda run_dir: tables_read.append(run_dir) or real_read_table(run_dir))
    rendered = CliRunner().invoke(main, ["report", str(again)])
    assert rendered.exit_code == 0, rendered.output
    assert tables_read == [again]
    for name in ("report.html", "junit.xml", "metrics.prom", "summary.md"):
        assert (again / name).read_bytes() == (reference / name).read_bytes(), name


def test_damaged_table_leaves_the_stated_verdicts_and_problems(fresh: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(fresh, run_dir)
    (run_dir / TABLE).write_bytes(b"\x1f\x8b garbage")
    results = load_results(run_dir)
    node03 = results.hosts["h100-node03"]
    assert node03.verdict is Status.FAIL and results.hosts["h100-node01"].verdict is Status.PASS
    assert {f.status for f in node03.findings} <= {Status.WARN, Status.ERROR, Status.FAIL, Status.SKIP}
    assert node03.counts()["PASS"] == json.loads((fresh / "results.json").read_text())[
        "hosts"]["h100-node03"]["counts"]["PASS"] > 0
    with pytest.raises(TableError):
        read_table(run_dir)


def test_the_table_has_a_column_for_every_finding_field(tmp_path: Path) -> None:
    import dataclasses

    from healthcheck.core.model import FINDING_FIELDS

    assert tuple(f.name for f in dataclasses.fields(Finding)) == (*FINDING_FIELDS, "observe")
    observed = Finding("n1", "gpu.temp", Status.FAIL, "hot", observe=True)
    write_table(tmp_path, [observed, Finding("n1", "gpu.count", Status.PASS, "ok")])
    assert read_table(tmp_path)["n1"][0] == observed


def test_table_keeps_value_types_and_reads_into_pandas(tmp_path: Path) -> None:
    values = [True, 1, 1.0, "1", None, 0, False, 2.5]
    findings = [Finding(f"n{i % 3}", "gpu.check", Status.PASS if i % 2 else Status.FAIL, f"m{i}",
                        component=f"gpu{i}", value=v, expected=">= 1" if i else None, unit=None if i else "C")
                for i, v in enumerate(values)]
    write_table(tmp_path, findings)
    back = [f for fs in read_table(tmp_path).values() for f in fs]
    assert sorted(back, key=lambda f: f.message) == findings
    assert [type(f.value) for f in sorted(back, key=lambda f: f.message)] == [type(v) for v in values]
    frame = findings_frame(tmp_path)
    assert len(frame) == 8
    by_host = frame.groupby(["host", "status"], observed=True).size().to_dict()
    assert by_host == {("n0", "FAIL"): 2, ("n0", "PASS"): 1, ("n1", "FAIL"): 1, ("n1", "PASS"): 2,
                       ("n2", "FAIL"): 1, ("n2", "PASS"): 1}
    assert frame["unit"].isna().sum() == 7 and list(frame["value"])[:3] == [True, 1, 1.0]


def test_grading_in_worker_processes_gives_the_same_findings(tmp_path: Path) -> None:
    one = execute_run(RunOptions(target=TargetOptions(replay=SAMPLE),
                                 outputs=OutputOptions(run_dir=tmp_path / "one"),
                                 selection=SelectionOptions(probes=PROBES, grade_workers=1)))
    two = execute_run(RunOptions(target=TargetOptions(replay=SAMPLE),
                                 outputs=OutputOptions(run_dir=tmp_path / "two"),
                                 selection=SelectionOptions(probes=PROBES, grade_workers=2)))
    assert sorted(map(key, one.results.findings())) == sorted(map(key, two.results.findings()))
    assert read_table(tmp_path / "one") == read_table(tmp_path / "two")
    assert not (tmp_path / "two" / "raw" / "h100-node01").exists()  # referenced, not copied
    assert json.loads((tmp_path / "two" / "raw" / "_source.json").read_text()) == {
        "raw": str((SAMPLE / "raw").resolve())}


def test_a_crash_in_a_grading_worker_is_that_hosts_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import healthcheck.run.gradepool as gradepool

    real = gradepool.grade_host

    def flaky(host: Host, *args: Any, **kwargs: Any) -> Any:
        if host.name == "h100-node02":
            raise RuntimeError("parser bug")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(gradepool, "grade_host", flaky)  # inherited by the forked workers
    out = execute_run(RunOptions(target=TargetOptions(replay=SAMPLE),
                                 outputs=OutputOptions(run_dir=tmp_path / "run"),
                                 selection=SelectionOptions(probes=PROBES, grade_workers=2)))
    [crash] = out.results.hosts["h100-node02"].findings
    assert (crash.check, crash.status, crash.message) == ("host.grade", Status.ERROR,
                                                          "grading crashed: RuntimeError: parser bug")
    assert out.results.hosts["h100-node03"].verdict is Status.FAIL
    assert load_results(tmp_path / "run").hosts["h100-node02"].verdict is Status.ERROR


def test_a_killed_grading_worker_leaves_errors_not_a_crashed_run(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    import healthcheck.run.gradepool as gradepool

    real = gradepool.grade_host

    def dies(host: Host, *args: Any, **kwargs: Any) -> Any:
        if host.name == "h100-node01":
            os._exit(9)  # the OOM killer's view of a worker
        return real(host, *args, **kwargs)

    monkeypatch.setattr(gradepool, "grade_host", dies)
    out = execute_run(RunOptions(target=TargetOptions(replay=SAMPLE),
                                 outputs=OutputOptions(run_dir=tmp_path / "run"),
                                 selection=SelectionOptions(probes=PROBES, grade_workers=2)))
    assert set(out.results.hosts) == {"h100-node01", "h100-node02", "h100-node03", "h100-node04"}
    node01 = out.results.hosts["h100-node01"]
    assert node01.verdict is Status.ERROR and "worker process died" in node01.findings[0].message
    assert json.loads((tmp_path / "run" / "results.json").read_text())["summary"]["verdict"] == "ERROR"
