"""A finished run seen against the history: regression findings, ``changes`` and ``trends``, recorded.

    record = annotate_and_record(run_dir, Path("/var/lib/healthcheck"))
    record.changes["new_failures"]      # [{"host": "gpu007", "verdict": "FAIL", "was": "PASS", ...}]

What it adds to the run's ``results.json`` (the rest of the schema is unchanged):

- ``history.*`` WARN findings in the hosts' findings (see ``healthcheck.run.regression``), in
  results.json and the findings table;
- ``"changes"``: what changed since the previous recorded run::

      {"previous_run": "20261121T031500Z" | null,
       "new_failures":  [{"host", "verdict", "was" (null: not in the previous run), "checks": [...]}],
       "recovered":     [{"host", "verdict", "was", "checks": [checks that failed before]}],
       "still_failing": [{"host", "verdict", "was", "checks", "new_checks",
                          "runs": consecutive failing runs, this one included}],
       "new_hosts": [...], "missing_hosts": [...],
       "assets": [{"host", "kind", "component", "field", "before", "after"}]}  (healthcheck.ops.assetdiff)

  (failing = verdict FAIL or ERROR; ``checks`` are the FAIL/ERROR check ids);
- ``"trends"``: the key metrics of the last N runs (this one included), per host and metric id,
  one point per run where the host had it: the worst component (lowest busbw, hottest GPU) or,
  for counters, the total over components::

      {"gpu001": {"gpu.temp_c": {"metric": "temperature", "unit": "C",
                                 "values": [["2026-11-20T03:15:02+00:00", 41.0], ...oldest first]},
                  "nccl.all_reduce.node.busbw": {"metric": "busbw", "unit": "GB/s", "values": [...]}}}

- ``"offenders"``: repeat offenders (``healthcheck.ops.offenders``), the same (host, check, component) failing
  on N of the host's last M runs, this one included, also added as ``offender.repeat`` FAIL findings::

      [{"host": "gpu007", "check": "gpu.row_remap.failure", "component": "gpu3", "failures": 4, "runs": 5,
        "run_ids": ["20261123T031500Z", ...newest first], "message": "the current finding's message"}]

Re-annotating a run replaces its earlier ``history.*`` and ``offender.*`` findings and its record in the index.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import Finding
from healthcheck.ops.assetdiff import diff_assets, stale_counter_keys
from healthcheck.ops.history import RUNS_DIR, HistoryIndex, check_index, sweep_lock
from healthcheck.ops.offenders import failure_keys, offender_findings, repeat_offenders
from healthcheck.probes.asset_changes import AssetChange
from healthcheck.run.execute import execute_run
from healthcheck.run.interrupt import InterruptGuard
from healthcheck.run.options import RunOptions
from healthcheck.run.outputs import render_reports
from healthcheck.run.regression import (
    diff_verdicts,
    extract_measurements,
    growth_findings,
    host_states,
    regression_findings,
)
from healthcheck.store.results import RunResults, load_results, write_results

TREND_RUNS = 14
ANNOTATIONS = ("history.", "offender.")   # findings this module adds (replaced when a run is re-annotated)


@dataclass
class SweepRecord:
    run_id: str
    seq: int
    changes: dict[str, Any]
    trends: dict[str, Any]
    findings: list[Finding] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    report_error: str | None = None
    recorded: bool = True              # False: interrupted or stopped, not in the history
    signal: str | None = None          # SIGINT or SIGTERM received during the sweep (exit 130 / 143)


def _asset_changes(previous_dir: str | None, results: RunResults) -> list[AssetChange]:
    """Hardware changes since the previous recorded run (empty when its directory is gone)."""
    if previous_dir is None or not (Path(previous_dir) / "results.json").is_file():
        return []
    return [c for c in diff_assets(load_results(Path(previous_dir), observations=("assets",)), results)
            if c.kind not in ("host.added", "host.missing")]


def latest_run_dir(history_dir: Path) -> Path | None:
    """The most recent recorded run whose directory still exists (probes compare counters with it)."""
    if not (Path(history_dir) / "history.sqlite").is_file():
        return None
    with HistoryIndex.open(Path(history_dir)) as index:
        for row in index.runs(limit=5):
            if (Path(row.run_dir) / "results.json").is_file():
                return Path(row.run_dir)
    return None


def run_sweep(opts: RunOptions, history_dir: Path, **grading: Any) -> tuple[RunResults, Path, SweepRecord]:
    """Under the sweep lock: run ``opts`` into ``HISTORY/runs/``, with the
    previous run for counter growth, annotate and record it, and render its reports once.

    SIGINT/SIGTERM as in ``healthcheck run``: the first ends the sweep (hosts not started are ERROR
    ``host.swept``), the second ends the grace of hosts in flight; results and reports are written
    from what was gathered, but an interrupted (or stopped) run is not recorded in the history (its
    hosts were not all checked: no "new failures", no offender counts); ``record.signal`` names the
    signal. A signal after every host was graded only waits for the record and the reports.
    Raises ``SweepLockedError`` when another sweep holds the lock, ``HistoryError`` (before anything
    runs) when the history index is unusable; ``grading`` goes to
    ``annotate_and_record``; a signal before the run directory exists raises ``KeyboardInterrupt``.
    """
    history_dir = Path(history_dir)
    with sweep_lock(history_dir), InterruptGuard() as guard:
        check_index(history_dir)  # an unusable index is said before the sweep, not after it (HistoryError)
        # rendered once below, with the history's changes and trends in
        opts = replace(opts, outputs=replace(opts.outputs, out=history_dir / RUNS_DIR, run_dir=None, render=False),
                       selection=replace(opts.selection,
                                         previous=opts.selection.previous or latest_run_dir(history_dir)))
        outcome = execute_run(opts)  # its own guard: ends the sweep early on the first signal
        guard.shield()  # from here on a signal is only recorded: the record and the reports get written
        if outcome.interrupted or outcome.fatal:
            record = SweepRecord(run_id=outcome.run_dir.name, seq=0, changes={}, trends={}, recorded=False)
        else:
            record = annotate_and_record(outcome.run_dir, history_dir, **grading)
        try:
            render_reports(outcome.run_dir)
        except Exception as exc:  # the run is recorded; `healthcheck report RUN_DIR` can retry
            record.report_error = f"{type(exc).__name__}: {exc}"
    record.signal = outcome.signal or guard.signal
    return load_results(outcome.run_dir), outcome.run_dir, record


def annotate_and_record(run_dir: Path, history_dir: Path, *,
                        baseline_runs: int = DEFAULTS.regression_baseline_runs,
                        drop_fraction: float = DEFAULTS.regression_drop_fraction,
                        keep_days: float = DEFAULTS.history_keep_days, trend_runs: int = TREND_RUNS,
                        offender_failures: int = DEFAULTS.offender_failures,
                        offender_window: int = DEFAULTS.offender_window,
                        now: datetime | None = None) -> SweepRecord:
    """Grade ``run_dir`` against the history in ``history_dir``, record it, prune, rewrite results.json."""
    run_dir = Path(run_dir)
    results = load_results(run_dir, observations=True)  # counters' growth reads every GPU and port
    for host in results.hosts.values():
        host.findings = [f for f in host.findings if not f.check.startswith(ANNOTATIONS)]
    run_id = str(results.run.get("id") or run_dir.name)
    results.run.setdefault("id", run_id)
    with HistoryIndex.open(history_dir) as index:
        existing = index.seq_of(run_id)
        measurements = extract_measurements(results)
        added = regression_findings(measurements, index.baselines(existing, baseline_runs), drop_fraction)
        previous_row = next(iter(index.runs(limit=1, before_seq=existing)), None)
        swapped = _asset_changes(previous_row.run_dir if previous_row else None, results)
        counters = index.previous_counters(existing)
        assets_now = {n: h.observations.get("assets") or {} for n, h in results.hosts.items()}
        for key in stale_counter_keys(swapped, assets_now, counters):
            counters.pop(key)  # a swapped part's counters start over: no growth against the old part
        added += growth_findings(measurements, counters)
        offenders = repeat_offenders(failure_keys(results), index.recent_failures(existing, offender_window - 1),
                                     run_id, offender_failures, offender_window)
        added += offender_findings(offenders, offender_failures, offender_window)
        for f in added:
            results.hosts[f.host].findings.append(f)
        previous = next(iter(index.runs(limit=1, before_seq=existing)), None)
        before = index.host_states(previous.seq) if previous else None
        current = host_states(results)
        still = [h for h, s in current.items() if s.failed and before and h in before and before[h].failed]
        streaks = {h: n + 1 for h, n in index.failing_streaks(still, existing).items()}
        changes = diff_verdicts(before, current, previous.run_id if previous else None, streaks)
        changes["assets"] = [c.to_json() for c in swapped]
        seq = index.record(results, run_dir, measurements, seq=existing)
        trends = index.trends(trend_runs, upto_seq=seq)
        pruned = index.prune(keep_days, now or datetime.now(timezone.utc), keep_seq=seq,
                             runs_root=Path(history_dir) / RUNS_DIR)
    results.extra.update({"changes": changes, "trends": trends, "offenders": [o.to_json() for o in offenders]})
    write_results(run_dir, results)
    return SweepRecord(run_id=run_id, seq=seq, changes=changes, trends=trends, findings=added, pruned=pruned)

