"""Command line: ``healthcheck run|report|inventory|probes`` (+ bench, drain, resume, sweep).

    healthcheck run -i inventories/example.yaml --out runs/
    healthcheck run --replay inventories/samples/h100-4node --out runs/
    healthcheck report runs/20261122T031500Z

Exit codes (``ExitCode``): 0 every host passed (WARN allowed unless --strict), 1 any FAIL/ERROR,
2 usage or setup error. Commands stay thin: they call library functions.
"""

from __future__ import annotations

import atexit
import importlib
import os
import sys
import threading
from pathlib import Path

import click

import healthcheck
from healthcheck import benchmarks as bench_registry
from healthcheck import probes as probe_registry
from healthcheck.cli.common import SETUP_ERRORS, ExitCode, exit_code, exit_now, print_summary
from healthcheck.cli.options import (
    SweepFlags,
    check_source,
    csv_list,
    junit_full_option,
    plan_option,
    run_dir_options,
    target_options,
    verbose_option,
)
from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.profiles import ProfileError
from healthcheck.core.textsafe import printable
from healthcheck.inventory.hosts import InventoryError
from healthcheck.inventory.load import load_inventory
from healthcheck.run.execute import NothingToRerunError, execute_run
from healthcheck.run.interrupt import exit_status
from healthcheck.run.outputs import render_reports
from healthcheck.store.recover import load_or_rebuild
from healthcheck.store.results import write_results
from healthcheck.store.rundir import RunDirError, missing_outputs

# The other commands, each in its own module, imported when that command is the one called (or listed by
# --help): a run or a replay does not load drain, sweep, merge, node or gate and what they import.
LAZY_COMMANDS = {
    "bench": "healthcheck.cli.bench", "drain": "healthcheck.cli.drain", "resume": "healthcheck.cli.drain",
    "sweep": "healthcheck.cli.sweep", "assets": "healthcheck.cli.assets", "diff": "healthcheck.cli.assets",
    "node": "healthcheck.cli.node", "deploy": "healthcheck.cli.node", "gate": "healthcheck.cli.gate",
    "merge": "healthcheck.cli.merge",
}


class LazyGroup(click.Group):
    """A click group whose ``LAZY_COMMANDS`` are found in their modules' ``COMMANDS`` when first asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is not None or cmd_name not in LAZY_COMMANDS:
            return found
        for command in importlib.import_module(LAZY_COMMANDS[cmd_name]).COMMANDS:
            self.add_command(command)
        return super().get_command(ctx, cmd_name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"],
                                              "auto_envvar_prefix": "HEALTHCHECK"})
@click.version_option(healthcheck.__version__, prog_name="healthcheck")
@click.option("--profiles-dir", "profiles_dirs", multiple=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder of site hardware profiles, searched before the built-in ones by every command; "
              "repeatable (env HEALTHCHECK_PROFILES_DIR, folders separated by ':').")
def main(profiles_dirs: tuple[Path, ...]) -> None:
    """GPU-cluster health checks and acceptance tests."""
    from healthcheck.core.profiles import set_site_dirs

    set_site_dirs(profiles_dirs)


@main.command()
@target_options
@click.option("--replay", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Re-grade the raw outputs of a run directory or capture bundle (no SSH).")
@click.option("--sample", is_flag=True, help="Replay the built-in sample capture (4 H100 nodes, one faulty): "
              "the whole job on a fresh install, nothing to connect to.")
@click.option("--local", is_flag=True, help="Check this machine only (no SSH).")
@run_dir_options
@click.option("--deadline", type=click.FloatRange(1), help="Per-host deadline, seconds "
              "[default: sum of command timeouts + margin].")
@click.option("--previous", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Earlier run directory: error counters are compared against it.")
@click.option("--output-cap", type=click.IntRange(1024), default=DEFAULTS.output_cap_bytes, show_default=True,
              help="Per-command stdout/stderr cap, bytes (marked truncated).")
@click.option("--benchmarks", help="Comma-separated benchmarks to run after probes "
              "(nccl,hpl,imb,osu,sdc,gpuperf,nvbandwidth,nvloom,mndiag).")
@plan_option
@click.option("--strict", is_flag=True, help="WARN counts as failure for the exit code.")
@click.option("--collect-evidence", is_flag=True, help="Run nvidia-bug-report.sh on hosts that FAIL gpu/nvlink/xid "
              "checks, before benchmarks; kept in the run directory under evidence/<host>/.")
@click.option("--evidence-timeout", type=click.FloatRange(1), default=DEFAULTS.evidence_timeout_s, show_default=True,
              help="Time nvidia-bug-report.sh is given per host, seconds.")
@click.option("--evidence-max-bytes", type=click.IntRange(1024), default=DEFAULTS.evidence_max_bytes,
              show_default=True, help="Largest report kept per host (larger ones are kept truncated).")
@click.option("--rerun-failed", "rerun_of", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Sweep again only the hosts whose verdict was FAIL or ERROR in this earlier run directory "
                   "(their addresses from its manifest unless -i/--hosts is given), and its failed benchmark "
                   "jobs; the report says 'was FAIL, now PASS' per host.")
@verbose_option
@click.option("--rerun-checks", is_flag=True, help="With --rerun-failed: run only the probes (and benchmark "
              "jobs) that produced the FAIL/ERROR findings.")
@click.option("--metrics-detail", is_flag=True, help="metrics.prom: also every check and the per-GPU, "
              "per-link and per-port series (~180 per host; the default is ~8).")
@junit_full_option
def run(target: SweepFlags, replay: Path | None, sample: bool, local: bool, out: Path, run_dir: Path | None,
        deadline: float | None, previous: Path | None, output_cap: int, benchmarks: str | None, plan: str,
        strict: bool, rerun_of: Path | None, verbose: bool, rerun_checks: bool, metrics_detail: bool,
        junit_full: bool, collect_evidence: bool, evidence_timeout: float, evidence_max_bytes: int) -> None:
    """Sweep the hosts of an inventory (or replay a bundle) and write a run directory."""
    if sample:
        if replay or local or target.hostlist:
            raise click.UsageError("--sample replays the built-in sample; give it without --replay, --local, --hosts")
        from healthcheck.inventories import SAMPLE_BUNDLE

        replay = SAMPLE_BUNDLE
    check_source(target, replay, local, rerun_of=rerun_of, sample_allowed=True)
    if rerun_checks and rerun_of is None:
        raise click.UsageError("--rerun-checks needs --rerun-failed RUN_DIR")
    opts = target.run_options(
        replay=replay, local=local, out=out, run_dir=run_dir, deadline_s=deadline, output_cap_bytes=output_cap,
        previous=previous, progress=sys.stderr.isatty(), benchmarks=csv_list(benchmarks) or (), plan=plan,
        probe_options={"plan": plan}, rerun_of=rerun_of, rerun_checks=rerun_checks, metrics_detail=metrics_detail,
        junit_full=junit_full, collect_evidence=collect_evidence, evidence_timeout_s=evidence_timeout,
        evidence_max_bytes=evidence_max_bytes)
    try:
        outcome = execute_run(opts)
    except NothingToRerunError as exc:
        click.echo(f"healthcheck: {exc}")
        sys.exit(ExitCode.OK)
    except (*SETUP_ERRORS, probe_registry.RegistryError, bench_registry.RegistryError) as exc:
        click.echo(f"healthcheck: {exc.args[0] if isinstance(exc, KeyError) and exc.args else exc}", err=True)
        sys.exit(ExitCode.USAGE)
    print_summary(outcome.results, outcome.run_dir, verbose)
    if outcome.fatal:
        click.echo(f"healthcheck: the sweep stopped early: {outcome.fatal}; hosts not swept are marked "
                   "ERROR (host.swept)", err=True)
        exit_now(ExitCode.USAGE)
    if outcome.interrupted:
        click.echo(f"interrupted ({outcome.signal or 'SIGINT'}): hosts not swept are marked ERROR (host.swept)",
                   err=True)
        exit_now(exit_status(outcome.signal))
    sys.exit(exit_code(outcome.results, strict))


@main.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--metrics-detail", is_flag=True, help="metrics.prom: also every check and the per-GPU, "
              "per-link and per-port series.")
@junit_full_option
def report(run_dir: Path, metrics_detail: bool, junit_full: bool) -> None:
    """Re-render the reports of a run directory from its results.json (old and new schema; rebuilt from
    findings.jsonl when the run was killed before writing it)."""
    try:
        results, note = load_or_rebuild(run_dir)
        if note is not None:
            click.echo(f"healthcheck: {note}; results.json written", err=True)
            write_results(run_dir, results)
        options = {"metrics_detail": metrics_detail, "junit_full": junit_full}
        written = render_reports(run_dir, results, options)  # loaded once, not twice
    except (OSError, ValueError) as exc:
        click.echo(f"healthcheck: {exc}", err=True)
        sys.exit(ExitCode.USAGE)
    for path in written:
        click.echo(str(path))
    say_missing_outputs(run_dir)


def say_missing_outputs(run_dir: Path) -> None:
    """Name each host whose outputs a merged run references in a bundle that is gone: the reports came
    from the run's own files, but a replay of the run cannot grade that host again."""
    gone = missing_outputs(run_dir)
    for line in gone[:20]:
        click.echo(f"healthcheck: {printable(line)}: its node bundle is gone; the reports use the run's results "
                   "and kept excerpts; a replay of this run gives this host 'no result from node'", err=True)
    if len(gone) > 20:
        click.echo(f"healthcheck: ... and {len(gone) - 20} more host(s) whose node bundle is gone", err=True)


@main.group()
def inventory() -> None:
    """Inspect inventories."""


@inventory.command("show")
@click.option("-i", "--inventory", "path", required=True, type=click.Path(path_type=Path),
              help="Inventory to expand (our YAML or an Ansible inventory).")
def inventory_show(path: Path) -> None:
    """Print the expanded hosts with group, address, user, port and profile."""
    from healthcheck.core.profiles import available_profiles

    try:
        inv = load_inventory(path, known_profiles=available_profiles([path.resolve().parent / "profiles"]))
    except InventoryError as exc:
        click.echo(f"healthcheck: {exc}", err=True)
        sys.exit(ExitCode.USAGE)
    click.echo(f"{'HOST':<20} {'GROUP':<12} {'ADDRESS':<18} {'USER':<10} {'PORT':<6} PROFILE")
    for h in inv.hosts:
        click.echo(f"{h.name:<20} {h.group or '-':<12} {h.address or '(ssh_config)':<18} "
                   f"{h.user or '-':<10} {h.port or '-'!s:<6} {h.profile or '-'}")
    click.echo(f"{len(inv.hosts)} hosts")


@main.group()
def profiles() -> None:
    """Inspect hardware profiles."""


@profiles.command("list")
@click.option("--profiles-dir", "dirs", multiple=True, type=click.Path(path_type=Path),
              help="Extra folder of profiles (searched before the project's).")
def profiles_list(dirs: tuple[Path, ...]) -> None:
    """List the profiles with their description and number of expectations."""
    from healthcheck.core.profiles import available_profiles, load_profile

    for name in available_profiles(dirs):
        try:
            prof = load_profile(name, dirs)
        except ProfileError as exc:
            click.echo(f"{name:<22} BROKEN: {exc}")
            continue
        click.echo(f"{name:<22} {len(prof.expectations):>3} expectations  {prof.description}")


@profiles.command("show")
@click.argument("name")
@click.option("--profiles-dir", "dirs", multiple=True, type=click.Path(path_type=Path),
              help="Extra folder of profiles (searched before the project's).")
def profiles_show(name: str, dirs: tuple[Path, ...]) -> None:
    """Print every expectation of a profile with its threshold and source."""
    import yaml

    from healthcheck.core.grading import expected_text
    from healthcheck.core.profiles import load_profile

    try:
        prof = load_profile(name, dirs)
    except ProfileError as exc:
        click.echo(f"healthcheck: {exc}", err=True)
        sys.exit(ExitCode.USAGE)
    click.echo(f"{prof.name}: {prof.description}\nfile: {prof.path}\n")
    for key, exp in sorted(prof.expectations.items()):
        warn = f" (WARN beyond {exp.warn})" if exp.warn is not None else ""
        bands = f" bands {dict(exp.bands)}" if exp.bands else ""
        click.echo(f"{key:<40} {expected_text(exp)}{warn}{bands} [{exp.severity}]\n{'':<40} source: {exp.source}")
    for issue in prof.known_issues:
        click.echo(f"known issue: {issue.check}: {issue.reason} (expires {issue.expires or 'never'})")
    if prof.settings:
        click.echo("\nsettings:\n" + yaml.safe_dump(dict(prof.settings), sort_keys=True))


@profiles.command("validate")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
def profiles_validate(files: tuple[Path, ...]) -> None:
    """Check profile files: unknown keys (with did-you-mean), wrong types, thresholds without a source.

    Prints every problem as FILE: PROBLEM and exits 2 if there is any, else 0."""
    from healthcheck.core.profiles import validate_profile_file

    bad = 0
    for path in files:
        problems = validate_profile_file(path)
        bad += bool(problems)
        for problem in problems:
            click.echo(f"{path}: {problem}", err=True)
        if not problems:
            click.echo(f"{path}: ok")
    sys.exit(ExitCode.USAGE if bad else ExitCode.OK)


@main.command("probes")
def list_probes() -> None:
    """List the probes and the command ids they run."""
    for p in probe_registry.all_probes():
        cmds = ", ".join(p.commands({"kernel_log_window_h": DEFAULTS.kernel_log_window_h}))
        click.echo(f"{p.name:<12} {p.description}\n{'':<12} commands: {cmds}")


@main.command("results")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--strict", is_flag=True, help="WARN counts as failure for the exit code.")
@verbose_option
def show_results(run_dir: Path, strict: bool, verbose: bool) -> None:
    """Print the summary of a finished run; exit code as for run. A run killed before it wrote
    results.json is summarised from findings.jsonl."""
    try:
        results, note = load_or_rebuild(run_dir)
    except RunDirError as exc:
        click.echo(f"healthcheck: {exc}", err=True)
        sys.exit(ExitCode.USAGE)
    if note is not None:
        click.echo(f"healthcheck: {note}", err=True)
    print_summary(results, run_dir, verbose)
    sys.exit(exit_code(results, strict))


def entry() -> None:
    """The ``healthcheck`` command (console script, ``python -m healthcheck``): ``main``, then the process ends
    without freeing, object by object, what the command built; the OS takes it back at once (a large replay's
    teardown would take seconds). Output is flushed and the atexit handlers run first, and every
    file is closed by its writer; with another thread still alive the interpreter exits as usual.
    In-process callers (tests, benches) call ``main``."""
    try:
        main()
    except SystemExit as exc:
        run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
        if threading.active_count() > 1 or run_exitfuncs is None:
            raise
        status = _exit_status(exc.code)
        run_exitfuncs()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            raise exc from None  # a closed or broken stream: let the interpreter report it as usual
        os._exit(status)


def _exit_status(code: object) -> int:
    """The status ``sys.exit(code)`` gives: None 0, an int itself, anything else printed and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1

