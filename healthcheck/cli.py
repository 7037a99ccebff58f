"""Command line: ``healthcheck run|report|inventory|probes`` (+ bench, drain, resume, sweep).

    healthcheck run -i inventories/example.yaml --out runs/
    healthcheck run --replay inventories/samples/h100-4node --out runs/
    healthcheck report runs/20261122T031500Z

Exit codes (``ExitCode``): 0 every host passed (WARN allowed unless --strict), 1 any FAIL/ERROR,
2 usage or setup error. Commands stay thin: they call library functions.
"""

from __future__ import annotations

import enum
import importlib
import os
import sys
import threading
from pathlib import Path

import click

import healthcheck
from healthcheck import benchmarks as bench_registry
from healthcheck import probes as probe_registry
from healthcheck.defaults import DEFAULTS
from healthcheck.interrupt import exit_status
from healthcheck.inventory import InventoryError, load_inventory
from healthcheck.model import Status
from healthcheck.pipeline import RunOptions, execute_run, render_reports
from healthcheck.profiles import ProfileError
from healthcheck.recover import load_or_rebuild
from healthcheck.results import RunResults, write_results
from healthcheck.rundir import RunDirError
from healthcheck.textsafe import printable

EXTENSION_MODULES = ("healthcheck.cli_bench", "healthcheck.cli_drain", "healthcheck.cli_sweep")


class ExitCode(enum.IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2


INTERRUPTED = 130  # like a shell after SIGINT (143 after SIGTERM)
SETUP_ERRORS = (InventoryError, ProfileError, RunDirError, FileNotFoundError, ValueError, KeyError)


def exit_code(results: RunResults, strict: bool) -> ExitCode:
    bad = {Status.FAIL, Status.ERROR} | ({Status.WARN} if strict else set())
    return ExitCode.FAILED if any(h.verdict in bad for h in results.hosts.values()) else ExitCode.OK


def _csv(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def print_summary(results: RunResults, run_dir: Path) -> None:
    summary = results.summary()
    counts = "  ".join(f"{k} {v}" for k, v in summary["by_verdict"].items() if v)
    click.echo(f"verdict {summary['verdict']}: {summary['hosts']} hosts  {counts}")
    for name, host in results.hosts.items():
        bad = [f for f in host.findings if f.status in (Status.FAIL, Status.ERROR)]
        for f in bad[:5]:
            message = printable(" ".join(f.message.split()))  # node output: newlines, escapes, bidi
            click.echo(f"  {printable(name):<16} {f.status.value:<5} {f.check:<28} {message}")
        if len(bad) > 5:
            click.echo(f"  {printable(name):<16} ... {len(bad) - 5} more")
    click.echo(f"run directory: {run_dir}")
    if (run_dir / "report.html").is_file():
        click.echo(f"report: {run_dir / 'report.html'}")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": "HEALTHCHECK"})
@click.version_option(healthcheck.__version__, prog_name="healthcheck")
def main() -> None:
    """GPU-cluster health checks and acceptance tests."""


@main.command()
@click.option("-i", "--inventory", type=click.Path(path_type=Path), help="Inventory YAML.")
@click.option("--hosts", "hostlist", help="Ad-hoc hosts instead of an inventory, as a nodeset "
              "(gpu[001-016]); addresses and users come from ssh_config.")
@click.option("--replay", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Re-grade the raw outputs of a run directory or capture bundle (no SSH).")
@click.option("--local", is_flag=True, help="Check this machine only (no SSH).")
@click.option("--transport", type=click.Choice(["ssh", "local", "slurm"]),
              help="Transport for every host (overrides the inventory's transport vars); slurm runs the "
              "checks through srun, the allocation waiting at most --connect-timeout.")
@click.option("--srun-arg", "srun_args", multiple=True, metavar="ARG",
              help="Extra srun argument for --transport slurm, repeatable (--srun-arg=--partition=gpu).")
@click.option("--out", type=click.Path(path_type=Path), default=Path("runs"), show_default=True,
              help="Parent folder; the run goes to OUT/<UTC timestamp>/.")
@click.option("--run-dir", type=click.Path(path_type=Path), help="Exact run directory (absent or empty).")
@click.option("-f", "--forks", type=click.IntRange(1, 4096), default=DEFAULTS.forks, show_default=True)
@click.option("--timeout", "timeout_s", type=click.FloatRange(1), default=DEFAULTS.command_timeout_s,
              show_default=True, help="Per-command timeout on the node, seconds.")
@click.option("--connect-timeout", type=click.FloatRange(1), default=DEFAULTS.connect_timeout_s,
              show_default=True)
@click.option("--deadline", type=click.FloatRange(1), help="Per-host deadline, seconds "
              "[default: sum of command timeouts + margin].")
@click.option("--probes", "probe_names", help="Comma-separated probes (default: all).")
@click.option("--skip-probes", help="Comma-separated probes to leave out.")
@click.option("-F", "--ssh-config", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="ssh_config file [default: ~/.ssh/config].")
@click.option("--accept-new-host-keys", is_flag=True,
              help="Trust and record host keys never seen before (changed keys are still refused).")
@click.option("--profile", help="Profile for every host (overrides the inventory).")
@click.option("--limit", help="Only these hosts (comma-separated names).")
@click.option("--max-hosts", type=click.IntRange(1), default=DEFAULTS.max_hosts, show_default=True,
              help="Refuse an inventory or nodeset that expands to more hosts than this.")
@click.option("--previous", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Earlier run directory: error counters are compared against it.")
@click.option("--output-cap", type=click.IntRange(1024), default=DEFAULTS.output_cap_bytes, show_default=True,
              help="Per-command stdout/stderr cap, bytes (marked truncated).")
@click.option("--xid-window", type=click.FloatRange(0), default=DEFAULTS.kernel_log_window_h,
              show_default=True, help="Kernel log look-back for Xid errors, hours.")
@click.option("--benchmarks", help="Comma-separated benchmarks to run after probes (nccl,hpl,imb,osu).")
@click.option("--plan", type=click.Choice(["quick", "acceptance"]), default="quick", show_default=True)
@click.option("--strict", is_flag=True, help="WARN counts as failure for the exit code.")
def run(inventory: Path | None, hostlist: str | None, replay: Path | None, local: bool, transport: str | None,
        srun_args: tuple[str, ...], out: Path, run_dir: Path | None,
        forks: int, timeout_s: float, connect_timeout: float, deadline: float | None,
        probe_names: str | None, skip_probes: str | None, ssh_config: Path | None,
        accept_new_host_keys: bool, profile: str | None, limit: str | None, max_hosts: int, previous: Path | None,
        output_cap: int, xid_window: float, benchmarks: str | None, plan: str, strict: bool) -> None:
    """Sweep the hosts of an inventory (or replay a bundle) and write a run directory."""
    if (local and (inventory or replay or hostlist)) or (inventory and hostlist) \
            or not (local or inventory or replay or hostlist):
        raise click.UsageError("give -i/--inventory or --hosts NODESET, --replay DIR (optionally with -i "
                               "to re-grade against another inventory), or --local")
    opts = RunOptions(
        inventory=inventory, hostlist=hostlist, replay=replay, local=local, out=out, run_dir=run_dir, forks=forks,
        timeout_s=timeout_s, connect_timeout_s=connect_timeout, deadline_s=deadline,
        output_cap_bytes=output_cap, probes=_csv(probe_names), skip_probes=_csv(skip_probes) or (),
        ssh_config=ssh_config, accept_new_host_keys=accept_new_host_keys, transport=transport,
        srun_args=srun_args, profile=profile, limit=_csv(limit), previous=previous, progress=sys.stderr.isatty(),
        benchmarks=_csv(benchmarks) or (), plan=plan, max_hosts=max_hosts,
        probe_options={"kernel_log_window_h": xid_window, "plan": plan})
    try:
        outcome = execute_run(opts)
    except (*SETUP_ERRORS, probe_registry.RegistryError, bench_registry.RegistryError) as exc:
        click.echo(f"healthcheck: {exc.args[0] if isinstance(exc, KeyError) and exc.args else exc}", err=True)
        sys.exit(ExitCode.USAGE)
    print_summary(outcome.results, outcome.run_dir)
    if outcome.fatal:
        click.echo(f"healthcheck: the sweep stopped early: {outcome.fatal}; hosts not swept are marked "
                   "ERROR (host.swept)", err=True)
        _exit(ExitCode.USAGE)
    if outcome.interrupted:
        click.echo(f"interrupted ({outcome.signal or 'SIGINT'}): hosts not swept are marked ERROR (host.swept)",
                   err=True)
        _exit(exit_status(outcome.signal))
    _exit(exit_code(outcome.results, strict))


def _exit(code: int) -> None:
    """Exit; after an interrupt, host threads still waiting on a node must not hold the process
    until their deadline (results and reports are written by now)."""
    if any(t.name.startswith("hc-host") and t.is_alive() for t in threading.enumerate()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(code))
    sys.exit(code)


@main.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
def report(run_dir: Path) -> None:
    """Re-render the reports of a run directory from its results.json (rebuilt from findings.jsonl
    when the run was killed before writing it)."""
    try:
        results, note = load_or_rebuild(run_dir)
        if note is not None:
            click.echo(f"healthcheck: {note}; results.json written", err=True)
            write_results(run_dir, results)
        written = render_reports(run_dir)
    except (OSError, ValueError) as exc:
        click.echo(f"healthcheck: {exc}", err=True)
        sys.exit(ExitCode.USAGE)
    for path in written:
        click.echo(str(path))


@main.group()
def inventory() -> None:
    """Inspect inventories."""


@inventory.command("show")
@click.option("-i", "--inventory", "path", required=True, type=click.Path(path_type=Path))
def inventory_show(path: Path) -> None:
    """Print the expanded hosts with group, address, user, port and profile."""
    from healthcheck.profiles import available_profiles

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
    from healthcheck.profiles import available_profiles, load_profile

    for name in available_profiles(dirs):
        try:
            prof = load_profile(name, dirs)
        except ProfileError as exc:
            click.echo(f"{name:<22} BROKEN: {exc}")
            continue
        click.echo(f"{name:<22} {len(prof.expectations):>3} expectations  {prof.description}")


@profiles.command("show")
@click.argument("name")
@click.option("--profiles-dir", "dirs", multiple=True, type=click.Path(path_type=Path))
def profiles_show(name: str, dirs: tuple[Path, ...]) -> None:
    """Print every expectation of a profile with its threshold and source."""
    import yaml

    from healthcheck.grading import expected_text
    from healthcheck.profiles import load_profile

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


@main.command("probes")
def list_probes() -> None:
    """List the probes and the command ids they run."""
    for p in probe_registry.all_probes():
        cmds = ", ".join(p.commands({"kernel_log_window_h": DEFAULTS.kernel_log_window_h}))
        click.echo(f"{p.name:<12} {p.description}\n{'':<12} commands: {cmds}")


@main.command("results")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--strict", is_flag=True)
def show_results(run_dir: Path, strict: bool) -> None:
    """Print the summary of a finished run; exit code as for run. A run killed before it wrote
    results.json is summarised from findings.jsonl."""
    try:
        results, note = load_or_rebuild(run_dir)
    except RunDirError as exc:
        click.echo(f"healthcheck: {exc}", err=True)
        sys.exit(ExitCode.USAGE)
    if note is not None:
        click.echo(f"healthcheck: {note}", err=True)
    print_summary(results, run_dir)
    sys.exit(exit_code(results, strict))


def _add_extensions() -> None:
    for module_name in EXTENSION_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue
            raise
        for command in module.COMMANDS:
            main.add_command(command)


_add_extensions()
