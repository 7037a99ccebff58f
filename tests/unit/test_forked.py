"""healthcheck.run.forked: a job in a forked child, its error text back, always reaped; the run's reports
written that way give the same files and the same ``report_error`` as written one by one."""

from __future__ import annotations

import os
import shutil
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from healthcheck import reports
from healthcheck.inventories import SAMPLE_BUNDLE
from healthcheck.reports import html
from healthcheck.run import forked, outputs
from healthcheck.run.execute import execute_run
from healthcheck.run.forked import Forked, can_fork
from healthcheck.run.options import OutputOptions, RunOptions, TargetOptions
from healthcheck.store.results import load_results
from healthcheck.store.rundir import RunDirError

pytestmark = pytest.mark.skipif(not can_fork(), reason="needs os.fork and no other thread")


def reaped(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True  # no such child left: reaped, not a zombie
    return False


def test_a_job_runs_in_a_child_and_its_success_or_error_comes_back(tmp_path: Path) -> None:
    out = tmp_path / "written"
    job = Forked.start(lambda: out.write_text(str(os.getpid())))
    assert job is not None and job.finish(timeout_s=30) is None
    assert int(out.read_text()) == job.pid != os.getpid() and reaped(job.pid)

    def fail() -> None:
        raise OSError(28, "No space left on device")

    job = Forked.start(fail)
    assert job is not None and job.finish(timeout_s=30) == "OSError: [Errno 28] No space left on device"
    assert reaped(job.pid)


def test_a_child_past_its_bound_is_killed_and_reaped() -> None:
    job = Forked.start(lambda: time.sleep(60))
    assert job is not None
    started = time.monotonic()
    assert job.finish(timeout_s=0.5) == "TimeoutError: not finished in 0.5 s; the writer process was stopped"
    assert time.monotonic() - started < 30 and reaped(job.pid)


def test_a_child_that_dies_without_a_word_is_an_error() -> None:
    job = Forked.start(lambda: os._exit(3))
    assert job is not None and job.finish(timeout_s=30) == "ChildProcessError: writer exited with status 3"


def test_no_fork_while_another_thread_runs() -> None:
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, args=(30,))
    thread.start()
    try:
        assert not can_fork() and Forked.start(lambda: None) is None
    finally:
        stop.set()
        thread.join()


def crashing_html(digest: object) -> bytes:
    raise RuntimeError("template exploded")


crashing_html.__module__ = html.__name__  # keeps html's place, first, among the reporters


@pytest.mark.parametrize("fork", [True, False])
def test_a_report_crashing_in_the_child_is_the_same_report_error_and_results_json_is_complete(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], fork: bool) -> None:
    monkeypatch.setitem(reports._REPORTERS, "html", replace(html.REPORTER, render=crashing_html))
    if not fork:
        monkeypatch.setattr(forked, "can_fork", lambda: False)
    outcome = execute_run(RunOptions(target=TargetOptions(replay=SAMPLE_BUNDLE),
                                     outputs=OutputOptions(run_dir=tmp_path / "run")))
    assert outcome.report_error == "RuntimeError: template exploded"
    assert capsys.readouterr().err.count(
        "healthcheck: reports not rendered (RuntimeError: template exploded); results.json is complete") == 1
    assert not (tmp_path / "run" / "report.html").exists()
    assert load_results(tmp_path / "run").hosts.keys() == outcome.results.hosts.keys() == {
        "h100-node01", "h100-node02", "h100-node03", "h100-node04"}
    # forked or not, the formats are written in order and the first failure stops them
    assert not (tmp_path / "run" / "junit.xml").exists()


def test_forked_and_serial_writing_give_the_same_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outcome = execute_run(RunOptions(target=TargetOptions(replay=SAMPLE_BUNDLE),
                                     outputs=OutputOptions(run_dir=tmp_path / "run", render=False)))
    written = {}
    for fork in (True, False):
        monkeypatch.setattr(forked, "can_fork", lambda fork=fork: fork)
        run_dir = tmp_path / f"fork-{fork}"
        shutil.copytree(outcome.run_dir, run_dir)
        assert outputs.write_outputs(RunOptions(outputs=OutputOptions(run_dir=run_dir)), run_dir,
                                     outcome.results) is None
        written[fork] = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    assert {"results.json", "findings.table.json.gz", "report.html", "junit.xml", "metrics.prom",
            "summary.md"} <= written[True].keys()
    assert written[True] == written[False]


def test_a_fork_that_fails_leaves_the_work_to_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_fork() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    before = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    monkeypatch.setattr(os, "fork", no_fork)
    assert Forked.start(lambda: None) is None
    if before is not None:
        assert len(os.listdir("/proc/self/fd")) == before  # the pipe was closed


def test_results_json_failing_stops_the_report_child_and_leaves_no_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As when written one by one: no results.json, no report (the child is stopped, reaped, its files removed)."""
    started: list[int] = []
    start = Forked.start.__func__  # type: ignore[attr-defined]

    def recording(cls: type[Forked], job: object) -> Forked | None:
        child = start(cls, job)
        started.extend([child.pid] if child is not None else [])
        return child

    def full_disk(run_dir: Path, results: object) -> Path:
        deadline = time.monotonic() + 60
        while not (run_dir / "report.html").exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # the child has written report.html: it must not stay
        assert (run_dir / "report.html").exists()
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Forked, "start", classmethod(recording))
    monkeypatch.setattr(outputs, "write_results", full_disk)
    with pytest.raises(RunDirError, match=r"cannot write results\.json in .*: No space left on device"):
        execute_run(RunOptions(target=TargetOptions(replay=SAMPLE_BUNDLE),
                               outputs=OutputOptions(run_dir=tmp_path / "run")))
    assert len(started) == 1 and reaped(started[0])
    assert not [p.name for p in (tmp_path / "run").iterdir() if p.name.startswith("report.html")]
