"""The sweep history: a SQLite index of runs under a history directory, a sweep lock, retention.

    with sweep_lock(Path("/var/lib/healthcheck")):          # SweepLockedError if a sweep runs
        with HistoryIndex.open(Path("/var/lib/healthcheck")) as index:
            index.record(results, run_dir, measurements)
            index.baselines(before_seq=None, runs=5)         # (host, metric, component) -> (median, n)

Layout of a history directory::

    DIR/history.sqlite     runs, per-host verdicts, key measurements (regression.extract_measurements)
    DIR/sweep.lock         fcntl.flock'ed while a sweep runs; holds the holder's pid and start time
    DIR/runs/<UTC stamp>/  the run directories of the sweeps (deleted by retention)

Runs are ordered by ``seq`` (the order they were recorded), not by their clocks. The analysis
itself (regressions, growth, changes) is pure and lives in ``healthcheck.run.regression``.

An index that cannot be used (not a database, damaged, a folder, another program's tables) raises
``HistoryError``, one line saying how to start a new index while keeping the old file; ``check_index``
verifies it (``PRAGMA quick_check``) before a sweep runs, so a bad index costs no sweep.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sqlite3
import statistics
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from healthcheck.core.model import Status
from healthcheck.ops.historyschema import SCHEMA, HistoryError, schema_problem
from healthcheck.ops.offenders import PastRun, failure_keys
from healthcheck.run.regression import HostState, Measurement, host_states, trend_points
from healthcheck.store.results import RunResults

INDEX_FILE = "history.sqlite"
LOCK_FILE = "sweep.lock"
RUNS_DIR = "runs"
ORPHAN_MIN_AGE = timedelta(hours=1)  # an unrecorded run directory younger than this may still be running
_PASSING = ("PASS", "WARN", "SKIP")



def check_index(history_dir: Path) -> None:
    """Raise ``HistoryError`` unless ``DIR/history.sqlite`` is absent or a usable, undamaged index."""
    path = Path(history_dir) / INDEX_FILE
    if not os.path.lexists(path):
        return
    with HistoryIndex(path) as index:
        try:
            verdict = index.db.execute("PRAGMA quick_check").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise HistoryError(path, str(exc)) from None
        if verdict != "ok":
            raise HistoryError(path, f"damaged: {verdict}")


class SweepLockedError(RuntimeError):
    """Another sweep holds the history directory's lock; ``holder`` is what it wrote there."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(f"another sweep holds {path} ({holder or 'holder unknown'})")
        self.path = path
        self.holder = holder


@contextmanager
def sweep_lock(history_dir: Path) -> Iterator[Path]:
    """Hold an exclusive, non-blocking ``flock`` on ``DIR/sweep.lock`` for the duration.

    The kernel drops the lock when the process dies, so a killed sweep never leaves a stale lock.
    """
    history_dir.mkdir(parents=True, exist_ok=True)
    path = history_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SweepLockedError(path, os.pread(fd, 200, 0).decode(errors="replace").strip()) from None
        os.ftruncate(fd, 0)
        stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
        os.pwrite(fd, f"pid={os.getpid()} started={stamp}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)  # closing releases the flock


@dataclass(frozen=True)
class RunRow:
    seq: int
    run_id: str
    started: str
    run_dir: str
    verdict: str


class HistoryIndex:
    """The SQLite index. Open with ``HistoryIndex.open(dir)`` (a context manager)."""

    def __init__(self, path: Path) -> None:
        """Open the index at ``path`` (created when absent); ``HistoryError`` when it is not one."""
        self.path = path
        if os.path.lexists(path) and (path.is_symlink() or not path.is_file()):
            raise HistoryError(path, "not a regular file")
        try:
            self.db = sqlite3.connect(path, timeout=30)
        except sqlite3.Error as exc:
            raise HistoryError(path, str(exc)) from None
        try:
            problem = schema_problem(self.db)
            if problem is not None:
                raise HistoryError(path, problem)
            self.db.execute("PRAGMA foreign_keys = ON")
            self.db.executescript(SCHEMA)
        except sqlite3.DatabaseError as exc:
            self.db.close()
            raise HistoryError(path, str(exc)) from None
        except HistoryError:
            self.db.close()
            raise

    @classmethod
    def open(cls, history_dir: Path) -> HistoryIndex:
        history_dir.mkdir(parents=True, exist_ok=True)
        return cls(history_dir / INDEX_FILE)

    def __enter__(self) -> HistoryIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.db.close()

    # --- writing -------------------------------------------------------------------------
    def record(self, results: RunResults, run_dir: Path, measurements: Iterable[Measurement],
               seq: int | None = None) -> int:
        """Add a run; an earlier record of the same run id is replaced, keeping ``seq`` when given
        (re-annotation keeps the run's place in the order). Returns the run's ``seq``."""
        run_id = str(results.run.get("id") or Path(run_dir).name)
        started = str(results.run.get("started") or _now_iso())
        with self.db:
            self.db.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
            seq = self.db.execute(
                "INSERT INTO runs (seq, run_id, started, run_dir, verdict, hosts, recorded) "
                "VALUES (?,?,?,?,?,?,?)",
                (seq, run_id, started, str(Path(run_dir).resolve()), results.verdict.value,
                 len(results.hosts), _now_iso())).lastrowid
            self.db.executemany(
                "INSERT INTO host_runs (seq, host, verdict, failing) VALUES (?,?,?,?)",
                [(seq, name, state.verdict.value, json.dumps(list(state.failing)))
                 for name, state in host_states(results).items()])
            self.db.executemany(
                "INSERT INTO measurements (seq, host, metric, direction, check_id, component, value, unit) "
                "VALUES (?,?,?,?,?,?,?,?)",
                [(seq, m.host, m.metric, m.direction, m.check, m.component, m.value, m.unit)
                 for m in measurements])
            self.db.executemany("INSERT INTO failures (seq, host, check_id, component) VALUES (?,?,?,?)",
                                [(seq, *key) for key in failure_keys(results)])
        assert seq is not None
        return int(seq)

    def prune(self, keep_days: float, now: datetime, keep_seq: int | None = None,
              runs_root: Path | None = None) -> list[str]:
        """Forget runs started more than ``keep_days`` before ``now`` (never ``keep_seq``), and delete
        their run directories when they lie under ``runs_root``. Returns the pruned run ids."""
        cutoff = now - timedelta(days=keep_days)
        old = [r for r in self.runs() if r.seq != keep_seq and (_parse_time(r.started) or now) < cutoff]
        root = runs_root.resolve() if runs_root else None
        for r in old:
            run_dir = Path(r.run_dir)
            if root is not None and run_dir.resolve().is_relative_to(root) and run_dir.resolve() != root:
                shutil.rmtree(run_dir, ignore_errors=True)
        orphans = _orphans(root, {Path(r.run_dir).resolve() for r in self.runs()}, min(cutoff, now - ORPHAN_MIN_AGE)) \
            if root is not None and root.is_dir() else []
        for run_dir in orphans:  # sweeps killed before they were recorded (SIGKILL, OOM, reboot)
            shutil.rmtree(run_dir, ignore_errors=True)
        with self.db:
            self.db.executemany("DELETE FROM runs WHERE seq = ?", [(r.seq,) for r in old])
        return [r.run_id for r in old] + [p.name for p in orphans]

    # --- reading -------------------------------------------------------------------------
    def runs(self, limit: int | None = None, before_seq: int | None = None) -> list[RunRow]:
        """Recorded runs, newest first."""
        rows = self.db.execute(
            "SELECT seq, run_id, started, run_dir, verdict FROM runs WHERE seq < ? ORDER BY seq DESC LIMIT ?",
            (before_seq if before_seq is not None else 2**62, limit if limit is not None else -1)).fetchall()
        return [RunRow(*row) for row in rows]

    def recent_failures(self, before_seq: int | None, runs: int) -> list[PastRun]:
        """The FAIL keys and swept hosts of the last ``runs`` recorded runs before ``before_seq``, newest first
        (repeat offenders, ``healthcheck.ops.offenders``)."""
        out = []
        for r in self.runs(limit=runs, before_seq=before_seq):
            failed = self.db.execute("SELECT host, check_id, component FROM failures WHERE seq = ?", (r.seq,))
            hosts = self.db.execute("SELECT host FROM host_runs WHERE seq = ?", (r.seq,))
            out.append(PastRun(r.run_id, frozenset(tuple(row) for row in failed),
                               frozenset(h for (h,) in hosts)))
        return out

    def seq_of(self, run_id: str) -> int | None:
        row = self.db.execute("SELECT seq FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return int(row[0]) if row else None

    def host_states(self, seq: int) -> dict[str, HostState]:
        rows = self.db.execute("SELECT host, verdict, failing FROM host_runs WHERE seq = ?", (seq,))
        return {host: HostState(Status(verdict), tuple(json.loads(failing)))
                for host, verdict, failing in rows}

    def failing_streaks(self, hosts: Sequence[str], before_seq: int | None) -> dict[str, int]:
        """Per host, how many consecutive recorded runs before ``before_seq`` it failed (FAIL/ERROR)."""
        out = {}
        for host in hosts:
            rows = self.db.execute(
                "SELECT verdict FROM host_runs WHERE host = ? AND seq < ? ORDER BY seq DESC",
                (host, before_seq if before_seq is not None else 2**62))
            n = 0
            for (verdict,) in rows:
                if verdict in _PASSING:
                    break
                n += 1
            out[host] = n
        return out

    def baselines(self, before_seq: int | None, runs: int,
                  scan_runs: int | None = None) -> dict[tuple[str, str, str], tuple[float, int]]:
        """(host, metric id, component) -> (median, n) over the host's last ``runs`` passing runs.

        Only the last ``scan_runs`` recorded runs are scanned (default ``4 * runs + 10``).
        """
        seqs = [r.seq for r in self.runs(limit=scan_runs or 4 * runs + 10, before_seq=before_seq)]
        if not seqs:
            return {}
        rows = self.db.execute(
            f"SELECT m.host, m.check_id, m.component, m.value FROM measurements m "
            f"JOIN host_runs h ON h.seq = m.seq AND h.host = m.host "
            f"WHERE m.seq IN ({','.join('?' * len(seqs))}) AND h.verdict IN ('PASS', 'WARN', 'SKIP') "
            f"AND m.direction != 'counter' ORDER BY m.seq DESC", seqs)
        values: dict[tuple[str, str, str], list[float]] = {}
        for host, check, component, value in rows:
            bucket = values.setdefault((host, check, component), [])
            if len(bucket) < runs:
                bucket.append(value)
        return {k: (statistics.median(v), len(v)) for k, v in values.items()}

    def previous_counters(self, before_seq: int | None) -> dict[tuple[str, str, str], tuple[float, str]]:
        """(host, metric id, component) -> (value, run id) of counters in each host's previous run."""
        rows = self.db.execute(
            "SELECT m.host, m.check_id, m.component, m.value, r.run_id FROM measurements m "
            "JOIN runs r ON r.seq = m.seq WHERE m.direction = 'counter' AND m.seq = "
            "(SELECT MAX(h.seq) FROM host_runs h WHERE h.host = m.host AND h.seq < ?)",
            (before_seq if before_seq is not None else 2**62,))
        return {(host, check, comp): (value, run_id) for host, check, comp, value, run_id in rows}

    def trends(self, last_runs: int, upto_seq: int | None = None) -> dict[str, Any]:
        """The ``trends`` object of results.json over the last ``last_runs`` runs up to ``upto_seq``:
        host -> metric id -> {"metric", "unit", "values": [[run started, value], ...] oldest first}."""
        upto = (upto_seq + 1) if upto_seq is not None else None
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for r in reversed(self.runs(limit=last_runs, before_seq=upto)):
            rows = self.db.execute("SELECT host, metric, direction, check_id, component, value, unit "
                                   "FROM measurements WHERE seq = ?", (r.seq,))
            for host, by_check in trend_points(Measurement(*row) for row in rows).items():
                for check, (value, unit, metric) in by_check.items():
                    series = out.setdefault(host, {}).setdefault(
                        check, {"metric": metric, "unit": unit, "values": []})
                    series["values"].append([r.started, round(value, 3)])
        return {h: dict(sorted(v.items())) for h, v in sorted(out.items())}


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _orphans(root: Path, recorded: set[Path], cutoff: datetime) -> list[Path]:
    """Run directories under ``root`` that no recorded run points at, started before ``cutoff``
    (the manifest's start time, else the folder's mtime). Links are never followed."""
    found = []
    for entry in sorted(root.iterdir()):
        if entry.is_symlink() or not entry.is_dir() or entry.resolve() in recorded:
            continue
        started = None
        with suppress(OSError, ValueError, AttributeError):
            started = _parse_time(str(json.loads((entry / "manifest.json").read_text()).get("started", "")))
        if started is None:
            started = datetime.fromtimestamp(entry.stat().st_mtime, timezone.utc)
        if started < cutoff:
            found.append(entry)
    return found


def _parse_time(text: str) -> datetime | None:
    """ISO-8601 (naive times are UTC); None when unreadable (such a run is never pruned)."""
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)
