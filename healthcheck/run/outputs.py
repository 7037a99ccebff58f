"""What a finished run writes: results.json (with the findings table and observation store), then the reports.

    error = write_outputs(opts, run_dir, results)      # None, or the first report that failed
    render_reports(run_dir)                            # again, from the run directory

A failure of results.json raises ``RunDirError`` (exit 2) and leaves no report behind; a failing
report is returned, never raised (``healthcheck report`` can retry it).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from healthcheck import reports
from healthcheck.core.defaults import DEFAULTS
from healthcheck.run.forked import Forked
from healthcheck.run.options import RunOptions
from healthcheck.store.results import RunResults, retire_journal, store_observations, write_results
from healthcheck.store.rundir import RunDirError, update_latest


def write_or_stop(run_dir: Path, what: str, write: Callable[[], object], journal: bool = True) -> None:
    """A write into the run directory itself; failing, it is a clean stop (``RunDirError``, exit 2).
    ``journal``: the run keeps a crash journal (a live run); a replay has none, its bundle is its input."""
    try:
        write()
    except OSError as exc:
        why = f"cannot write {what} in {run_dir}: {exc.strerror or exc}"
        if not journal:
            raise RunDirError(f"{why}: free space and replay the bundle again") from exc
        raise RunDirError(f"{why}; what is already on disk (raw/, findings.jsonl) is kept: free space and run "
                          f"`healthcheck results {run_dir}`") from exc


def write_outputs(opts: RunOptions, run_dir: Path, results: RunResults) -> str | None:
    """results.json (with the findings table), then the reports; returns the reports' error, if any.

    Where fork can be used (``run.forked``), the reports are written by a child process meanwhile, from
    the same results in memory, in their usual order, and the run waits for it (bounded). Either way a
    failure of results.json raises ``RunDirError`` with no report left behind, and a failing report is
    the first failing format, the ones after it not written, as when written one by one."""
    if not opts.outputs.render:
        _write_results(opts, run_dir, results)
        return None
    # hosts missing from the observation store go in first, so the child sees their offsets
    write_or_stop(run_dir, "results.json", lambda: store_observations(run_dir, results), _journal(opts))
    options = opts.outputs.report_options
    try:
        names = [spec.name for spec in reports.all_reporters()]  # every format imported before the fork
    except Exception:  # a format that cannot be imported: written one by one, it is the reports' error
        names = None
    child = None if names is None else Forked.start(lambda: render_reports(run_dir, results, options))
    if child is None:
        _write_results(opts, run_dir, results)
        return render_or_error(run_dir, results, options)
    try:
        _write_results(opts, run_dir, results)
    except BaseException:  # no results.json: no report either, as when written one by one
        child.finish(timeout_s=0)  # stopped and reaped, never left behind
        for name in names or ():
            _discard(run_dir, name)
        raise
    error = child.finish(DEFAULTS.report_timeout_s)
    if error is not None:
        _say_not_rendered(error)
    return error


def _write_results(opts: RunOptions, run_dir: Path, results: RunResults) -> None:
    """results.json and the findings table, then the crash journal (findings.jsonl) is no longer needed."""
    write_or_stop(run_dir, "results.json", lambda: write_results(run_dir, results), _journal(opts))
    with contextlib.suppress(OSError):  # not flushed or not removed: the journal stays (a copy, never a loss)
        retire_journal(run_dir)
    if opts.outputs.run_dir is None:
        update_latest(run_dir)


def _journal(opts: RunOptions) -> bool:
    """Whether the run keeps a crash journal (``findings.jsonl``): a live run does, a replay does not."""
    return opts.target.replay is None


def _discard(run_dir: Path, name: str) -> None:
    """What the stopped child may have written of report ``name`` (the file, its temporary file)."""
    path = run_dir / reports.get(name).filename
    for leftover in (path, path.with_name(path.name + ".tmp")):
        with contextlib.suppress(OSError):
            leftover.unlink()


def _say_not_rendered(error: str) -> None:
    print(f"healthcheck: reports not rendered ({error}); results.json is complete", file=sys.stderr)


def render_or_error(run_dir: Path, results: RunResults | None = None,
                    options: Mapping[str, Any] | None = None) -> str | None:
    """Render the reports; a failure is reported, not raised (``healthcheck report`` can retry)."""
    try:
        render_reports(run_dir, results, options)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        _say_not_rendered(error)
        return error
    return None


def render_reports(run_dir: Path, results: RunResults | None = None,
                   options: Mapping[str, Any] | None = None) -> list[Path]:
    """Write report.html, junit.xml, metrics.prom, summary.md (the reports package); from ``results``
    when the caller has them in memory, else from the run directory. ``options``: the reports' options
    (``metrics_detail``, ``junit_full``; ``OutputOptions.report_options``)."""
    if results is None and not any((options or {}).values()):
        return reports.write_all(run_dir)
    return reports.write_all(run_dir, results=results, options=options)
