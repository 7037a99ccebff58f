"""``healthcheck sweep``: what cron runs every night. One run, graded against the history, recorded.

    healthcheck sweep -i /etc/healthcheck/cluster.yaml --history /var/lib/healthcheck

Holds ``HISTORY/sweep.lock`` for the whole sweep (a second sweep exits 3 at once), writes the run
to ``HISTORY/runs/<UTC stamp>/``, passes the previous run so probes grade counter growth, adds the
regression findings, ``changes`` and ``trends`` (``healthcheck.ops.nightly``), prunes runs older than
``--keep-days`` and renders the reports once. Exit codes for alerting: 0 every host passes (WARN,
regressions included, allowed unless --strict), 1 a host FAILs or ERRORs (``--fail-on new``: only
when a host newly fails), 2 usage or setup error (or the run directory became unwritable, or the history
index is unusable: one line saying how to start a new one), 3 another
sweep holds the lock, 130 / 143 interrupted by SIGINT / SIGTERM as ``healthcheck run`` is (results and
reports written from what was gathered; an interrupted run is not recorded in the history).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from healthcheck.cli.common import SETUP_ERRORS, ExitCode, exit_code, exit_now, print_summary
from healthcheck.cli.console import folded_hosts, group_lines
from healthcheck.cli.options import SweepFlags, check_source, csv_list, plan_option, target_options, verbose_option
from healthcheck.core.defaults import DEFAULTS
from healthcheck.ops.history import SweepLockedError
from healthcheck.ops.historyschema import HistoryError
from healthcheck.ops.nightly import SweepRecord, run_sweep
from healthcheck.run.interrupt import Interrupted, exit_status
from healthcheck.store.results import RunResults

EXIT_LOCKED = 3


def print_changes(record: SweepRecord) -> None:
    changes = record.changes
    click.echo(f"since {changes['previous_run'] or '(no earlier run)'}: "
               f"{len(changes['new_failures'])} new failure(s), {len(changes['recovered'])} recovered, "
               f"{len(changes['still_failing'])} still failing")
    for key, label in (("new_failures", "NEW"), ("recovered", "RECOVERED"), ("still_failing", "STILL")):
        rows = [(f"{item['verdict']:<5} {', '.join(item['checks'][:4])}".rstrip(), item["host"])
                for item in changes[key]]
        for what, nodes, count in folded_hosts(rows):  # hosts that changed alike are one line
            click.echo(f"  {label:<9} {nodes} ({count}) {what}")
    for change in changes.get("assets") or ():
        click.echo(f"  {'HARDWARE':<9} {change['host']:<16} {change['kind']:<15} {change['component']}: "
                   f"{change['field']} {change['before'] or '-'} -> {change['after'] or '-'}")
    for line in group_lines(record.findings):
        click.echo(f"  {line}")
    if record.pruned:
        click.echo(f"retention: forgot {len(record.pruned)} run(s) older than the keep window")


def ended_early(results: RunResults, record: SweepRecord, history_dir: Path) -> int:
    """Say why a sweep ended early (a signal, an unwritable run directory) and return its exit code:
    130/143 for SIGINT/SIGTERM as ``healthcheck run``, 2 for a stop."""

    interrupted = bool(results.run.get("interrupted"))
    if record.recorded:
        click.echo(f"interrupted ({record.signal}) after every host was graded: recorded and reported", err=True)
    else:
        why = f"interrupted ({record.signal or 'SIGINT'})" if interrupted \
            else f"the sweep stopped early: {results.run.get('stopped')}"
        click.echo(f"{why}: hosts not swept are marked ERROR (host.swept); not recorded in the history "
                   f"{history_dir}", err=True)
    return exit_status(record.signal) if interrupted or record.recorded else ExitCode.USAGE


@click.command()
@target_options
@click.option("--replay", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Re-grade a capture bundle instead of sweeping over SSH.")
@click.option("--history", "history_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="History directory: index, lock and run directories.")
@click.option("--benchmarks", help="Comma-separated benchmarks (nccl,hpl,imb,osu,sdc,gpuperf,nvbandwidth,nvloom,"
              "mndiag), after the probes.")
@plan_option
@click.option("--keep-days", type=click.FloatRange(0), default=DEFAULTS.history_keep_days, show_default=True,
              help="Retention: forget runs (index rows and HISTORY/runs/ directories) older than this.")
@click.option("--baseline-runs", type=click.IntRange(1), default=DEFAULTS.regression_baseline_runs,
              show_default=True, help="Baseline = median of this node's last K passing runs.")
@click.option("--drop-fraction", type=click.FloatRange(0, 1), default=DEFAULTS.regression_drop_fraction,
              show_default=True, help="A key metric this much worse than baseline or fleet is WARN.")
@click.option("--fail-on", type=click.Choice(["any", "new"]), default="any", show_default=True,
              help="Exit 1 on any failing host, or only on hosts that newly fail.")
@click.option("--strict", is_flag=True, help="WARN (regressions included) counts as failure.")
@click.option("--collect-evidence", is_flag=True, help="nvidia-bug-report.sh on hosts failing gpu/nvlink/xid checks.")
@click.option("--offender-failures", type=click.IntRange(1), default=DEFAULTS.offender_failures, show_default=True,
              help="Repeat offender: the same part failing the same check on this many ...")
@click.option("--offender-window", type=click.IntRange(1), default=DEFAULTS.offender_window, show_default=True,
              help="... of its host's last this many runs (this one included).")
@verbose_option
def sweep(target: SweepFlags, replay: Path | None, history_dir: Path, benchmarks: str | None, plan: str,
          keep_days: float, baseline_runs: int, drop_fraction: float, fail_on: str, strict: bool,
          verbose: bool, collect_evidence: bool, offender_failures: int, offender_window: int) -> None:
    """Nightly sweep: run, compare with the history, record, prune, report.

    Holds HISTORY/sweep.lock for the whole sweep; writes the run to HISTORY/runs/<stamp>/, adds
    history.regression.baseline (vs the median of the node's last --baseline-runs passing runs),
    history.regression.fleet and history.counter.growth WARNs, "what changed since the last
    run", and offender.repeat FAILs (the same part failing on --offender-failures of its last
    --offender-window runs). Exit codes for alerting: 0 every host passes (WARN allowed unless --strict), 1 a host
    FAILs or ERRORs (--fail-on new: only a newly failing host), 2 usage or setup error, 3 another
    sweep holds the lock (not started), 130/143 interrupted by Ctrl-C/SIGTERM (results and reports
    written, the run not recorded in the history).
    """
    check_source(target, replay, local_allowed=False)
    opts = target.run_options(replay=replay, benchmarks=csv_list(benchmarks) or (), plan=plan,
                              progress=sys.stderr.isatty(), probe_options={"plan": plan},
                              collect_evidence=collect_evidence)
    try:
        results, run_dir, record = run_sweep(opts, history_dir, baseline_runs=baseline_runs,
                                             drop_fraction=drop_fraction, keep_days=keep_days,
                                             offender_failures=offender_failures, offender_window=offender_window)
    except SweepLockedError as exc:
        click.echo(f"healthcheck sweep: {exc}; not starting", err=True)
        sys.exit(EXIT_LOCKED)
    except HistoryError as exc:
        click.echo(f"healthcheck sweep: {exc}", err=True)
        sys.exit(ExitCode.USAGE)
    except SETUP_ERRORS as exc:
        click.echo(f"healthcheck: {exc}", err=True)
        sys.exit(ExitCode.USAGE)
    except KeyboardInterrupt as exc:  # a signal before the run directory was written: nothing to keep
        name = exc.args[0] if isinstance(exc, Interrupted) and exc.args else "SIGINT"
        click.echo(f"interrupted ({name}) before the sweep started; nothing recorded", err=True)
        sys.exit(exit_status(name))
    print_summary(results, run_dir, verbose)
    if record.recorded:
        print_changes(record)
    if record.report_error:
        click.echo(f"healthcheck: reports not rendered ({record.report_error}); results.json is complete, "
                   f"retry with: healthcheck report {run_dir}", err=True)
    if not record.recorded or record.signal:
        exit_now(ended_early(results, record, history_dir))
    if fail_on == "new":
        sys.exit(ExitCode.FAILED if record.changes["new_failures"] else ExitCode.OK)
    sys.exit(exit_code(results, strict))


COMMANDS = [sweep]
