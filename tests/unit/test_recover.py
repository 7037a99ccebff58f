"""A run that could not finish writing: results rebuilt from findings.jsonl, and a sweep that
stops cleanly when findings.jsonl itself cannot be written (issue 13.2, 13.3)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from healthcheck.run.execute import execute_run
from healthcheck.run.options import OutputOptions, RunOptions, TargetOptions, TransportOptions
from healthcheck.store import rundir
from healthcheck.store.recover import load_or_rebuild
from healthcheck.store.rundir import RunDirError

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "inventories" / "samples" / "h100-4node"


def test_truncated_results_json_is_rebuilt_from_findings(tmp_path):
    run = execute_run(RunOptions(target=TargetOptions(replay=SAMPLE),
                                 outputs=OutputOptions(out=tmp_path, render=False))).run_dir
    text = (run / "results.json").read_text()
    (run / "results.json").write_text(text[: len(text) // 2])
    results, note = load_or_rebuild(run)
    assert note is not None and note.startswith("results.json unreadable (JSONDecodeError")
    assert {n: h.verdict.value for n, h in results.hosts.items()} == \
           {"h100-node01": "PASS", "h100-node02": "PASS", "h100-node03": "FAIL", "h100-node04": "WARN"}
    proc = subprocess.run([sys.executable, "-m", "healthcheck", "results", str(tmp_path)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2
    assert proc.stderr == f"healthcheck: {tmp_path} has neither a readable results.json nor findings.jsonl: " \
                          "not a run directory\n"


def test_unwritable_findings_log_stops_the_sweep_cleanly(tmp_path, monkeypatch):
    """The second append fails with ENOSPC (injected): hosts not started are ERROR host.swept naming why."""
    calls = []
    real_append = rundir.FindingsLog.append_lines

    def append_lines(self, data):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_append(self, data)

    monkeypatch.setattr(rundir.FindingsLog, "append_lines", append_lines)
    outcome = execute_run(RunOptions(target=TargetOptions(replay=SAMPLE),
                                     outputs=OutputOptions(out=tmp_path, render=False),
                                     transport=TransportOptions(forks=1)))
    assert outcome.fatal == f"{outcome.run_dir / 'findings.jsonl'} cannot be written: No space left on device"
    verdicts = {n: h.verdict.value for n, h in outcome.results.hosts.items()}
    assert verdicts == {"h100-node01": "PASS", "h100-node02": "PASS", "h100-node03": "ERROR", "h100-node04": "ERROR"}
    [swept] = outcome.results.hosts["h100-node04"].findings
    assert swept.message == (f"not swept: the sweep stopped: {outcome.fatal} before this host started")
    assert outcome.results.run["stopped"] == outcome.fatal


def test_run_dir_that_cannot_be_created_is_a_usage_error(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(RunDirError, match=r"cannot create the run directory under .*file: File exists"):
        execute_run(RunOptions(target=TargetOptions(replay=SAMPLE),
                               outputs=OutputOptions(out=tmp_path / "file", render=False)))
