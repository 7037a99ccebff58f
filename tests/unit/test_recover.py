"""A run that could not finish writing: results rebuilt from findings.jsonl (a live run's journal,
tests/integration/test_faults_ssh.py kills one) or the findings table, and a sweep that stops cleanly
when its run directory cannot be written (issue 13.2, 13.3)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from healthcheck.core.model import Finding, Status
from healthcheck.run import outputs
from healthcheck.run.execute import execute_run
from healthcheck.run.options import OutputOptions, RunOptions, TargetOptions, TransportOptions
from healthcheck.store import rundir
from healthcheck.store.observation_store import ObservationStore
from healthcheck.store.recover import load_or_rebuild
from healthcheck.store.results import HostResult, RunResults, retire_journal, write_results
from healthcheck.store.rundir import RunDirError

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "inventories" / "samples" / "h100-4node"


def test_a_finished_replay_keeps_no_journal_and_a_truncated_results_json_is_rebuilt_from_the_table(tmp_path):
    run = execute_run(RunOptions(target=TargetOptions(replay=SAMPLE),
                                 outputs=OutputOptions(out=tmp_path, render=False))).run_dir
    assert not (run / "findings.jsonl").exists()  # one findings store: the table
    text = (run / "results.json").read_text()
    (run / "results.json").write_text(text[: len(text) // 2])
    results, note = load_or_rebuild(run)
    assert note is not None and note.startswith("results.json unreadable (JSONDecodeError")
    assert "rebuilt from findings.table.json.gz (4 hosts;" in note
    assert {n: h.verdict.value for n, h in results.hosts.items()} == \
           {"h100-node01": "PASS", "h100-node02": "PASS", "h100-node03": "FAIL", "h100-node04": "WARN"}
    proc = subprocess.run([sys.executable, "-m", "healthcheck", "results", str(tmp_path)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2
    assert proc.stderr == f"healthcheck: {tmp_path} has neither a readable results.json, findings.jsonl nor " \
                          "findings.table.json.gz: not a run directory\n"


def test_the_journal_is_removed_once_results_and_table_are_written(tmp_path):
    """``retire_journal``: the run's own journal goes only after results.json and the table are on disk."""
    log = rundir.FindingsLog(tmp_path)
    log.append([Finding(host="gpu001", check="gpu.count", status=Status.PASS, message="8 GPUs")])
    with pytest.raises(FileNotFoundError):
        retire_journal(tmp_path)  # no results.json yet: the journal is kept
    assert log.path.is_file()
    write_results(tmp_path, RunResults(run={"id": "r"}, hosts={"gpu001": HostResult("gpu001", log.read())}))
    retire_journal(tmp_path)
    assert not log.path.exists()
    results, note = load_or_rebuild(tmp_path)
    assert note is None and [f.check for f in results.hosts["gpu001"].findings] == ["gpu.count"]


def test_a_replay_killed_before_its_results_names_every_host_not_graded(tmp_path):
    """A replay writes no journal: killed before results.json, every host is ERROR host.swept, never PASS."""
    run = execute_run(RunOptions(target=TargetOptions(replay=SAMPLE),
                                 outputs=OutputOptions(out=tmp_path, render=False))).run_dir
    for name in ("results.json", "findings.table.json.gz"):
        (run / name).unlink()
    results, note = load_or_rebuild(run)
    assert note == ("results.json missing: rebuilt from manifest.json (4 hosts; the run did not finish, "
                    "observations are not included)")
    assert {h.verdict.value for h in results.hosts.values()} == {"ERROR"}
    [swept] = results.hosts["h100-node01"].findings
    assert (swept.check, swept.remedy) == ("host.swept", "Replay the bundle again (a replay keeps no journal: "
                                                         "its bundle is its input)")


def test_unwritable_observation_store_stops_the_replay_cleanly(tmp_path, monkeypatch):
    """The second append fails with ENOSPC (injected): hosts not started are ERROR host.swept naming why."""
    calls = []
    real_append = ObservationStore.append

    def append(self, member):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_append(self, member)

    monkeypatch.setattr(ObservationStore, "append", append)
    outcome = execute_run(RunOptions(target=TargetOptions(replay=SAMPLE),
                                     outputs=OutputOptions(out=tmp_path, render=False),
                                     transport=TransportOptions(forks=1)))
    store = outcome.run_dir / "observations.jsonl.gz"
    assert outcome.fatal == f"{store} cannot be written: No space left on device"
    verdicts = {n: h.verdict.value for n, h in outcome.results.hosts.items()}
    assert verdicts == {"h100-node01": "PASS", "h100-node02": "PASS", "h100-node03": "ERROR", "h100-node04": "ERROR"}
    [swept] = outcome.results.hosts["h100-node04"].findings
    assert swept.message == (f"not swept: the sweep stopped: {outcome.fatal} before this host started")
    assert outcome.results.run["stopped"] == outcome.fatal


def test_a_replay_that_cannot_write_its_results_says_to_replay_again(tmp_path, monkeypatch):
    """No journal to rebuild from: the stop names the way back (the bundle), not ``healthcheck results``."""
    def full(run_dir, results):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(outputs, "write_results", full)
    with pytest.raises(RunDirError) as stop:
        execute_run(RunOptions(target=TargetOptions(replay=SAMPLE),
                               outputs=OutputOptions(run_dir=tmp_path / "run", render=False)))
    assert str(stop.value) == (f"cannot write results.json in {tmp_path / 'run'}: No space left on device: "
                               "free space and replay the bundle again")


def test_run_dir_that_cannot_be_created_is_a_usage_error(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(RunDirError, match=r"cannot create the run directory under .*file: File exists"):
        execute_run(RunOptions(target=TargetOptions(replay=SAMPLE),
                               outputs=OutputOptions(out=tmp_path / "file", render=False)))
