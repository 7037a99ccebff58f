"""The options every sweeping command shares (``run``, ``sweep``, ``bench``, node-local mode): one definition.

    @click.command()
    @target_options
    @plan_option
    def run(target: SweepFlags, plan: str, ...) -> None:
        opts = target.run_options(plan=plan, out=out, probe_options={"plan": plan})

``target_options`` adds ``-i/--inventory``, ``--hosts``, ``--transport``, ``--srun-arg``, ``--slurm-mode``,
``--slurm-spool``, ``--limit``,
``--probes``, ``--skip-probes``, ``--xid-window``, ``--accept-new-host-keys``, ``--connect-timeout``,
``-F/--ssh-config``, ``--ssh-client``, ``-f/--forks``, ``--timeout`` and ``--profile`` and hands the command one
``SweepFlags`` value instead of a parameter for each.

Environment variables (``HEALTHCHECK_<COMMAND>_<OPTION>``, click's ``auto_envvar_prefix``) may set
values but never a flag that changes state or trust: those are declared with ``command_line_flag``
(``--apply``, ``--force``, ``--accept-new-host-keys``), which click then reads from argv only.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from healthcheck.core.defaults import DEFAULTS
from healthcheck.run.options import RunOptions
from healthcheck.transport import SSH_CLIENTS

PLANS = ("quick", "acceptance", "isolate")
PLAN_HELP = ("quick: the probes with DCGM diag level 1 (about a minute), nccl/HPL per node and one round of "
             "IMB/OSU pairs (nvloom and mndiag: one job over all the hosts in both plans). acceptance: DCGM "
             "diag level 3, which runs 30-60 minutes per node, and "
             "benchmarks per node, in pairs (3 rounds, suspects retested) and across the cluster: hours "
             "on a large fleet. isolate: DCGM diag level 1, and nccl in adaptive, topology-aware groups (at "
             "most 4 rounds, 3 jobs per node) that name the bad nodes, links, leaves and rails "
             "(docs/benchmarks.md).")


def command_line_flag(*names: str, help: str) -> Callable[[Any], Any]:
    """A boolean flag that only the command line can switch on: an exported ``HEALTHCHECK_DRAIN_APPLY=1``
    left in a shell must never turn a dry-run into changes on the cluster."""
    return click.option(*names, is_flag=True, allow_from_autoenv=False,
                        help=f"{help} Command line only: never read from the environment.")


def csv_list(value: str | None) -> list[str] | None:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``; None or empty -> None."""
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


@dataclass(frozen=True)
class SweepFlags:
    """Which hosts, how to reach them and which probes: the flags ``target_options`` adds."""

    inventory: Path | None = None
    hostlist: str | None = None
    transport: str | None = None
    srun_args: tuple[str, ...] = ()
    slurm_mode: str = "step"
    slurm_spool: Path | None = None
    limit: str | None = None
    probe_names: str | None = None
    skip_probes: str | None = None
    xid_window: float = DEFAULTS.kernel_log_window_h
    accept_new_host_keys: bool = False
    connect_timeout: float = DEFAULTS.connect_timeout_s
    ssh_config: Path | None = None
    ssh_client: str = "paramiko"
    forks: int = DEFAULTS.forks
    timeout_s: float = DEFAULTS.command_timeout_s
    profile: str | None = None
    max_hosts: int = DEFAULTS.max_hosts

    def run_options(self, *, probe_options: dict[str, Any] | None = None, probes: Sequence[str] | None = None,
                    **more: Any) -> RunOptions:
        """A ``RunOptions`` from these options plus the command's own (``more``, fields of its parts);
        ``probes`` overrides ``--probes`` (``bench`` runs none unless asked)."""
        return RunOptions.build(
            inventory=self.inventory, hostlist=self.hostlist, transport=self.transport, srun_args=self.srun_args,
            slurm_mode=self.slurm_mode, slurm_spool=self.slurm_spool,
            limit=self.limit.split() if self.limit is not None else None,  # nodesets: commas are theirs
            probes=probes if probes is not None else csv_list(self.probe_names),
            skip_probes=csv_list(self.skip_probes) or (), accept_new_host_keys=self.accept_new_host_keys,
            connect_timeout_s=self.connect_timeout, ssh_config=self.ssh_config, ssh_client=self.ssh_client,
            forks=self.forks, timeout_s=self.timeout_s, profile=self.profile, max_hosts=self.max_hosts,
            probe_options={"kernel_log_window_h": self.xid_window, **(probe_options or {})}, **more)


_TARGET: list[Callable[[Any], Any]] = [
    click.option("-i", "--inventory", type=click.Path(path_type=Path),
                 help="Inventory: our YAML, or an Ansible inventory (INI/YAML file, read through ansible-inventory, "
                      "or saved `ansible-inventory --list` JSON)."),
    click.option("--hosts", "hostlist", help="Ad-hoc hosts instead of an inventory, as nodesets "
                 "(gpu[001-016]; whitespace or newline separated, e.g. sinfo output); addresses and users "
                 "come from ssh_config."),
    click.option("--transport", type=click.Choice(["ssh", "local", "slurm"]),
                 help="Transport for every host (overrides the inventory's transport vars); slurm runs the "
                      "checks through srun, the allocation waiting at most --connect-timeout."),
    click.option("--srun-arg", "srun_args", multiple=True, metavar="ARG",
                 help="Extra srun argument for --transport slurm, repeatable (--srun-arg=--partition=gpu)."),
    click.option("--slurm-mode", type=click.Choice(["step", "per-host"]), default="step", show_default=True,
                 help="--transport slurm: one job step for all hosts (each node writes under --slurm-spool, "
                      "which must be shared with the nodes), or one srun per host (output over srun's pipe)."),
    click.option("--slurm-spool", type=click.Path(file_okay=False, path_type=Path),
                 help="Step mode: directory on a filesystem shared with the nodes [default: RUN_DIR/slurm-step]."),
    click.option("--limit", help="Only these hosts: nodeset(s) like --hosts (gpu[001-004],gpu010) or group "
                 "names; a name that matches no host is a usage error (exit 2)."),
    click.option("--probes", "probe_names", help="Comma-separated probes to run [run, sweep: all; bench: none]; "
                 "`healthcheck probes` lists them."),
    click.option("--skip-probes", help="Comma-separated probes to leave out."),
    click.option("--xid-window", "xid_window", type=click.FloatRange(0), default=DEFAULTS.kernel_log_window_h,
                 show_default=True, help="Kernel log look-back for Xid errors, hours."),
    command_line_flag("--accept-new-host-keys",
                      help="Trust and record host keys never seen before (changed keys are still refused)."),
    click.option("--connect-timeout", type=click.FloatRange(1),
                 default=DEFAULTS.connect_timeout_s, show_default=True,
                 help="Seconds to connect and authenticate (SSH) or to get the allocation (srun --immediate)."),
    click.option("-F", "--ssh-config", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                 help="ssh_config file [default: ~/.ssh/config]."),
    click.option("--ssh-client", type=click.Choice(SSH_CLIENTS), default="paramiko", show_default=True,
                 envvar="HEALTHCHECK_SSH_CLIENT", help="paramiko, or the system OpenSSH ssh with ControlMaster "
                 "(Kerberos, FIDO keys, certificates, Match exec): see docs/ssh.md."),
    click.option("-f", "--forks", type=click.IntRange(1, 4096), default=DEFAULTS.forks, show_default=True,
                 help="Hosts swept in parallel."),
    click.option("--timeout", "timeout_s", type=click.FloatRange(1), default=DEFAULTS.command_timeout_s,
                 show_default=True, help="Per-command timeout on the node, seconds (DCGM diag has its own, "
                 "by level)."),
    click.option("--profile", help="Hardware profile for every host (overrides the inventory); "
                 "`healthcheck profiles list` shows them."),
    click.option("--max-hosts", type=click.IntRange(1), default=DEFAULTS.max_hosts, show_default=True,
                 help="Refuse an inventory or nodeset that expands to more hosts than this (checked before "
                      "expanding it)."),
]
TARGET_PARAMS = ("inventory", "hostlist", "transport", "srun_args", "slurm_mode", "slurm_spool", "limit",
                 "probe_names", "skip_probes", "xid_window", "accept_new_host_keys", "connect_timeout", "ssh_config",
                 "ssh_client", "forks", "timeout_s", "profile", "max_hosts")


def target_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the shared options to a click command; it receives them as ``target: SweepFlags``."""
    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in TARGET_PARAMS}
        return command(*args, target=SweepFlags(**values), **kwargs)

    for option in reversed(_TARGET):
        wrapper = option(wrapper)
    return wrapper


def plan_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--plan quick|acceptance``, one help text for every command that has it."""
    return click.option("--plan", type=click.Choice(PLANS), default="quick", show_default=True,
                        help=PLAN_HELP)(command)


def junit_full_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--junit-full``: junit.xml lists every finding, PASS included (``run``, ``report``)."""
    return click.option("--junit-full", is_flag=True, help="junit.xml: a testcase for every check of every host, "
                        "PASS included (~80 per 8-GPU host; the default lists the checks that did not pass and counts "
                        "the passing ones per host).")(command)


def verbose_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``-v``: the console summary also lists every failing host (it folds hosts by default)."""
    return click.option("-v", "--verbose", is_flag=True, help="Also list each failing host's findings "
                        "(the summary folds hosts into nodesets by default).")(command)


def run_dir_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--out`` and ``--run-dir`` (``run``, ``bench``)."""
    command = click.option("--run-dir", type=click.Path(path_type=Path),
                           help="Exact run directory (absent or empty) instead of OUT/<UTC timestamp>.")(command)
    return click.option("--out", type=click.Path(path_type=Path), default=Path("runs"), show_default=True,
                        help="Parent folder; the run goes to OUT/<UTC timestamp>/ and the symlink OUT/latest "
                             "then points to it.")(command)


def check_source(target: SweepFlags, replay: Path | None = None, local: bool = False,
                 local_allowed: bool = True, rerun_of: Path | None = None, sample_allowed: bool = False) -> None:
    """Exactly one host source: -i, --hosts, --replay (optionally with -i to re-grade against another
    inventory) or --local; ``--rerun-failed RUN`` alone takes the hosts from that run. With no source at
    all, the message points a newcomer at ``--sample`` (``run`` only)."""
    inventory, hostlist = target.inventory, target.hostlist
    if (local and (inventory or replay or hostlist or rerun_of)) or (inventory and hostlist) \
            or (replay and hostlist) or not (local or inventory or replay or hostlist or rerun_of):
        nothing = not (local or inventory or replay or hostlist or rerun_of)
        raise click.UsageError("give -i/--inventory or --hosts NODESET, --replay DIR (optionally with -i "
                               "to re-grade against another inventory)" + (", or --local" if local_allowed else "")
                               + ("; to try it first: healthcheck run --sample --out runs (the built-in "
                                  "4-node sample)" if nothing and sample_allowed else ""))
