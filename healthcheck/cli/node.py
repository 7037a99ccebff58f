"""``healthcheck node``: check this node only (Slurm HealthCheckProgram/Epilog, systemd timer, DaemonSet).

    healthcheck node --out /var/spool/healthcheck --budget 10 --profile h100-sxm5-8x
    healthcheck node --out /shared/hc --slurm-self --prom /var/lib/node_exporter/textfile/healthcheck.prom

Prints one line per non-PASS finding. Exit codes as LBNL NHC: 0 healthy; 1 a FAIL or ERROR, with
the first failing check's message on stderr; 2 usage or setup error (also: a healthy node whose
``--prom`` file could not be written; the bundle is kept and the self-drain runs either way).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from healthcheck.cli.common import SETUP_ERRORS
from healthcheck.cli.options import csv_list
from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import Status

EXIT_HEALTHY, EXIT_UNHEALTHY, EXIT_USAGE = 0, 1, 2


@click.command("node")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              default=Path("/var/spool/healthcheck"), show_default=True,
              help="Spool directory (local or shared); the bundle goes to OUT/<host>/, replacing the previous one.")
@click.option("--host", help="Name of this node [default: $SLURMD_NODENAME, else the short host name].")
@click.option("-i", "--inventory", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Inventory: this host's entry gives its profile and vars.")
@click.option("--profile", help="Hardware profile (overrides the inventory).")
@click.option("--probes", help="Comma-separated probes (default: all, or what fits --budget).")
@click.option("--skip-probes", help="Comma-separated probes to leave out.")
@click.option("--budget", type=click.FloatRange(1), help="Seconds: only job-safe probes whose "
              "declared cost fits (docs/node.md); each command's timeout is capped at it.")
@click.option("--timeout", type=click.FloatRange(1), default=DEFAULTS.command_timeout_s,
              show_default=True, help="Per-command timeout, seconds.")
@click.option("--xid-window", type=click.FloatRange(0), default=DEFAULTS.kernel_log_window_h, show_default=True,
              help="Kernel log look-back for Xid errors, hours.")
@click.option("--prom", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the metrics to this node_exporter textfile-collector file (atomically).")
@click.option("--slurm-self", is_flag=True, help="Drain this node in Slurm on FAIL; resume it on a clean run "
              "if the reason is ours (never touches someone else's reason).")
@click.option("--slurm-node", help="Slurm name of this node [default: --host's default].")
@click.option("--drain-on-error", is_flag=True, help="With --slurm-self: an ERROR (check could not run) drains too.")
@click.option("--max-drain-fraction", type=click.FloatRange(0, 1), default=DEFAULTS.drain_max_fraction,
              show_default=True, help="With --slurm-self: refuse a new drain when healthcheck already holds "
              "this share of the cluster's nodes.")
def node(out: Path, host: str | None, inventory: Path | None, profile: str | None, probes: str | None,
         skip_probes: str | None, budget: float | None, timeout: float, xid_window: float,
         prom: Path | None, slurm_self: bool, slurm_node: str | None, drain_on_error: bool,
         max_drain_fraction: float) -> None:
    """Check this node only and write its bundle; NHC-compatible exit code.

    Every option can come from the environment: HEALTHCHECK_NODE_OUT, HEALTHCHECK_NODE_BUDGET,
    HEALTHCHECK_NODE_PROFILE, HEALTHCHECK_NODE_PROM, HEALTHCHECK_NODE_SLURM_SELF=1, ...
    """
    from healthcheck.ops.node import NodeOptions, finding_line, node_name, run_node
    from healthcheck.probes import RegistryError

    opts = NodeOptions(spool=out, host=host, inventory=inventory, profile=profile, probes=csv_list(probes),
                       skip_probes=csv_list(skip_probes) or (), budget_s=budget, timeout_s=timeout,
                       probe_options={"kernel_log_window_h": xid_window}, prom_file=prom)
    try:
        outcome = run_node(opts)
    except (*SETUP_ERRORS, RegistryError, OSError) as exc:
        click.echo(f"healthcheck: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    for name, why in outcome.left_out.items():
        click.echo(f"# not run: {name}: {why}")
    for f in outcome.findings:
        if f.status is not Status.PASS:
            click.echo(finding_line(f))
    if outcome.prom_error is not None:  # the bundle is in place; the self-drain below still runs
        click.echo(f"healthcheck: --prom not written: {outcome.prom_error} (the bundle {outcome.bundle} is kept)",
                   err=True)
    if slurm_self:
        from healthcheck.ops.selfdrain import SelfDrainPolicy, self_drain

        done = self_drain(outcome.findings, outcome.host, slurm_node or node_name(host),
                          SelfDrainPolicy(drain_on_error=drain_on_error, max_fraction=max_drain_fraction))
        if done.action != "none":
            click.echo(f"healthcheck: slurm {done.action}: {done.note}", err=True)
    first = outcome.first_failure
    if first is not None:
        click.echo(f"healthcheck: Health check failed: {finding_line(first)}", err=True)
    elif not outcome.findings:
        click.echo("healthcheck: Health check failed: no finding at all (nothing was checked)", err=True)
    sys.exit(EXIT_USAGE if outcome.prom_error is not None and outcome.exit_code == EXIT_HEALTHY
             else outcome.exit_code)


DEPLOY_PACKAGE = "healthcheck.inventories"
DEPLOY_FOLDER = "deploy"


def deploy_files() -> dict[str, str]:
    """Example deployments shipped as package data: file name -> text."""
    from importlib.resources import files

    folder = files(DEPLOY_PACKAGE).joinpath(DEPLOY_FOLDER)
    return {p.name: p.read_text() for p in sorted(folder.iterdir(), key=lambda p: p.name)
            if p.is_file() and not p.name.startswith((".", "_"))}


@click.group("deploy")
def deploy() -> None:
    """Example deployments: `healthcheck node` (systemd timer, Slurm HealthCheckProgram, Kubernetes DaemonSet)
    and `healthcheck gate` (Slurm Prolog/Epilog, Kubernetes init container)."""


@deploy.command("list")
def deploy_list() -> None:
    """List the shipped deployment files with their first comment line."""
    for name, text in deploy_files().items():
        first = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), "")
        click.echo(f"{name:<28} {first}")


@deploy.command("show")
@click.argument("name")
def deploy_show(name: str) -> None:
    """Print one deployment file (redirect it where it belongs)."""
    found = deploy_files()
    if name not in found:
        click.echo(f"healthcheck: no deployment file {name!r} (known: {', '.join(found)})", err=True)
        sys.exit(EXIT_USAGE)
    click.echo(found[name], nl=False)


COMMANDS = [node, deploy]
