"""``healthcheck sweep`` with an unusable history index (issue 29.10): exit 2, one line, nothing run.

Each bad ``history.sqlite`` is made here: garbage bytes, a real index cut to half its size, a folder,
and another program's SQLite database. The sweep (a replay of the shipped sample bundle) says in one
line why, and how to start a new index keeping the old file; it runs nothing and touches nothing. The
documented way out (``mv`` the file aside) then gives a recorded sweep, the old file kept.
"""

from __future__ import annotations

import os
import shlex
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

SAMPLE = ROOT / "inventories" / "samples" / "h100-4node"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def sweep(history: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "healthcheck", "sweep", "--replay", str(SAMPLE), "--history",
                           str(history), "--probes", "gpu,system"], capture_output=True, text=True, timeout=300,
                          env=ENV)


def _garbage(path: Path) -> None:
    path.write_bytes(b"this is not a database\n" * 200)


def _truncated(path: Path) -> None:
    assert sweep(path.parent).returncode == 1     # a real index with one run (the sample has a FAIL host)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _folder(path: Path) -> None:
    (path / "inside").mkdir(parents=True)


def _other_schema(path: Path) -> None:
    db = sqlite3.connect(path)
    db.executescript("CREATE TABLE runs (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO runs VALUES (1, 'x');")
    db.commit()
    db.close()


def _snapshot(path: Path) -> object:
    return sorted(p.name for p in path.iterdir()) if path.is_dir() else path.read_bytes()


@pytest.mark.parametrize("make", [_garbage, _truncated, _folder, _other_schema],
                         ids=["garbage", "truncated", "a-folder", "another-schema"])
def test_an_unusable_history_is_one_line_exit_2_and_a_way_out(tmp_path: Path, make) -> None:  # type: ignore[no-untyped-def]
    history = tmp_path / "history"
    history.mkdir()
    index = history / "history.sqlite"
    make(index)
    before = _snapshot(index)
    runs_before = sorted((history / "runs").iterdir()) if (history / "runs").is_dir() else []
    out = sweep(history)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith(f"healthcheck sweep: history index {index} is unusable (")
    mv = lines[0].split("to keep it and start a new index: ", 1)[1].split(" (the run directories", 1)[0]
    assert mv.startswith(f"mv {index} {index}.bad-")
    assert _snapshot(index) == before   # untouched
    assert (sorted((history / "runs").iterdir()) if (history / "runs").is_dir() else []) == runs_before  # no run
    subprocess.run(shlex.split(mv), check=True, timeout=30)   # the documented way out, as printed
    again = sweep(history)
    assert again.returncode == 1, again.stderr   # the sample's faulty node03, graded and recorded
    assert "since (no earlier run): 1 new failure(s)" in again.stdout
    kept = shlex.split(mv)[2]
    assert _snapshot(Path(kept)) == before   # the old index kept as it was
