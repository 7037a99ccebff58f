"""The history index's schema, and how an unusable index is told apart and named.

    problem = schema_problem(sqlite3.connect(path))   # None: a history index (or an empty database)
    raise HistoryError(path, "file is not a database")  # one line: why, and how to start a new index

A history directory may hold anything by the time a sweep runs (a disk error, a copy cut short, another
program's database at the same path): none of it may end a nightly sweep with a traceback.
"""

from __future__ import annotations

import shlex
import sqlite3
from datetime import datetime, timezone
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL UNIQUE, started TEXT NOT NULL,
    run_dir TEXT NOT NULL, verdict TEXT NOT NULL, hosts INTEGER NOT NULL, recorded TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS host_runs (
    seq INTEGER NOT NULL REFERENCES runs(seq) ON DELETE CASCADE, host TEXT NOT NULL,
    verdict TEXT NOT NULL, failing TEXT NOT NULL, PRIMARY KEY (seq, host));
CREATE TABLE IF NOT EXISTS measurements (
    seq INTEGER NOT NULL REFERENCES runs(seq) ON DELETE CASCADE, host TEXT NOT NULL,
    metric TEXT NOT NULL, direction TEXT NOT NULL, check_id TEXT NOT NULL, component TEXT NOT NULL,
    value REAL NOT NULL, unit TEXT);
CREATE INDEX IF NOT EXISTS measurements_by_host ON measurements (host, check_id, component, seq);
CREATE INDEX IF NOT EXISTS host_runs_by_host ON host_runs (host, seq);
CREATE TABLE IF NOT EXISTS failures (
    seq INTEGER NOT NULL REFERENCES runs(seq) ON DELETE CASCADE, host TEXT NOT NULL,
    check_id TEXT NOT NULL, component TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS failures_by_seq ON failures (seq);
"""


class HistoryError(RuntimeError):
    """The history index cannot be used; the message says why and how to start a new one."""

    def __init__(self, path: Path, why: str) -> None:
        aside = path.with_name(f"{path.name}.bad-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}")
        super().__init__(f"history index {path} is unusable ({why}); to keep it and start a new index: "
                         f"mv {shlex.quote(str(path))} {shlex.quote(str(aside))} (the run directories under "
                         f"{path.parent / 'runs'} stay)")
        self.path = path


def _expected_columns() -> dict[str, list[str]]:
    """Table -> column names, as ``SCHEMA`` creates them."""
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(SCHEMA)
        return {t: [row[1] for row in db.execute(f"PRAGMA table_info({t})")]
                for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")
                if not t.startswith("sqlite_")}
    finally:
        db.close()


_COLUMNS = _expected_columns()


def schema_problem(db: sqlite3.Connection) -> str | None:
    """Why ``db`` is not a history index (None: it is one, or it is empty). A table of ours missing from
    an older index is fine (it is created); one with other columns, or a database without our ``runs``
    table but with tables of its own, is another program's."""
    tables = {t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")
              if not t.startswith("sqlite_")}
    if tables and "runs" not in tables:
        return f"a database of something else: its tables are {', '.join(sorted(tables)[:5])}"
    for table in sorted(tables & set(_COLUMNS)):
        columns = [row[1] for row in db.execute(f"PRAGMA table_info({table})")]
        if columns != _COLUMNS[table]:
            return f"table {table} has columns {', '.join(columns[:8])}, not a healthcheck history's"
    return None
