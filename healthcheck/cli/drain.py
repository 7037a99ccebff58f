"""``healthcheck drain`` and ``healthcheck resume``: take failing nodes out of service, put passing ones back.

    healthcheck drain runs/20261122T031500Z                       # dry-run: prints the commands
    healthcheck drain runs/20261122T031500Z --apply -i cluster.yaml
    healthcheck resume runs/20261123T031500Z --apply -i cluster.yaml
    healthcheck drain RUN --scheduler kubernetes

The output is a shell script: commands as lines, everything else as ``#`` comments. Exit codes:
0 done (or dry-run printed), 1 a command failed or ``--apply`` (and the ``resume`` dry-run, whose
commands are then printed commented out) could not read the scheduler's state (reason ownership
unchecked), 2 usage, 3 refused by the circuit breaker (``--force`` overrides).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from healthcheck.cli.options import command_line_flag
from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import Host, Status
from healthcheck.core.textsafe import printable
from healthcheck.inventory.hosts import Inventory, InventoryError
from healthcheck.inventory.load import load_inventory
from healthcheck.ops.drain import ADVISORY_CHECKS, DrainPlan, DrainPolicy, plan_drain, with_fleet_state
from healthcheck.ops.fleet import Fleet, fleet_of
from healthcheck.ops.schedulers import Action, NodeRef, Scheduler, get_scheduler
from healthcheck.ops.schedulers.controller import Controller, apply_actions, read_fleet
from healthcheck.store.bundle import read_manifest_hosts
from healthcheck.store.results import load_results
from healthcheck.store.rundir import RunDirError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_REFUSED = 0, 1, 2, 3
NODE_VAR = {"slurm": "slurm_node", "kubernetes": "k8s_node"}


def node_names(hosts: Sequence[Host], scheduler: str) -> dict[str, str]:
    """Inventory host -> scheduler node name, from the ``slurm_node``/``k8s_node`` host var
    (``{name}`` in it is replaced by the host name); hosts without it keep their name."""
    var = NODE_VAR[scheduler]
    return {h.name: str(h.vars[var]).replace("{name}", h.name) for h in hosts if h.vars.get(var)}


def _manifest_hosts(run_dir: Path) -> list[Host]:
    """The hosts the run's manifest lists (node names from their vars; a merged run's carry none)."""
    try:
        return read_manifest_hosts(run_dir) or []
    except RunDirError:
        return []


def make_controller(inventory: Inventory | None, controller: str | None,
                    ssh_config: Path | None) -> Controller:
    """Local unless a controller host is named (``--controller`` or the inventory's ``controller``)."""
    name = controller or (inventory.controller if inventory else None)
    if not name or name in ("local", "localhost"):
        return Controller()
    from healthcheck.transport import TransportSettings, open_transport

    known = {h.name: h for h in inventory.hosts} if inventory else {}
    return Controller(known.get(name, Host(name=name)), open_transport("ssh", TransportSettings(ssh_config=ssh_config)))


def _policy(statuses: str, checks: str | None, ignore: str | None, advisory: str = ",".join(ADVISORY_CHECKS),
            ) -> DrainPolicy:
    def split(text: str | None) -> tuple[str, ...]:
        return tuple(v.strip() for v in (text or "").split(",") if v.strip())

    try:
        wanted = frozenset(Status(s.upper()) for s in split(statuses))
        return DrainPolicy(statuses=wanted, checks=split(checks), ignore=split(ignore), advisory=split(advisory))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--status") from None


@dataclass(frozen=True)
class _Setup:
    plan: DrainPlan
    controller: Controller
    states: Any
    error: str | None
    fleet: Fleet


def _setup(run_dir: Path, scheduler: Scheduler, inventory_path: Path | None, policy: DrainPolicy,
           max_fraction: float, controller: str | None, ssh_config: Path | None, resume: bool = False) -> _Setup:
    """The plan over the fleet's hosts (``healthcheck.ops.fleet``: the inventory's, else the scheduler's
    node list, read here with the state of every node), the controller, and that state."""
    try:
        results = load_results(run_dir)
        inventory = load_inventory(inventory_path) if inventory_path else None
    except (OSError, ValueError, InventoryError) as exc:
        click.echo(f"healthcheck: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    names = node_names(list(inventory.hosts) if inventory else _manifest_hosts(run_dir), scheduler.name)
    ctl = make_controller(inventory, controller, ssh_config)
    anything = resume or plan_drain(results, policy, node_names=names).decisions
    states, error = read_fleet(scheduler, ctl) if anything else (None, None)
    fleet = fleet_of([h.name for h in inventory.hosts] if inventory else None, names,
                     scheduler.nodes(states) if states is not None else None, str(inventory_path or ""))
    known, _ = fleet.split(results.hosts)
    plan = plan_drain(results, policy, node_names=names, known_hosts=known, fleet_size=fleet.size(results.hosts),
                      max_fraction=max_fraction)
    if states is not None and plan.decisions:
        plan = with_fleet_state(plan, results, fleet.scheduler_nodes(scheduler.out_of_service(states)),
                                max_fraction=max_fraction)
    return _Setup(plan, ctl, states, error, fleet)


def _say_unknown(setup: _Setup) -> None:
    unknown = setup.plan.unknown
    if unknown:
        shown = ", ".join(printable(h) for h in unknown[:8]) + (f" (+{len(unknown) - 8} more)" if len(unknown) > 8
                                                                 else "")
        click.echo(f"# not in the fleet ({setup.fleet.where}): {len(unknown)} host(s) of the run, never counted "
                   f"or drained: {shown}")


def _execute(actions: list[Action], controller: Controller, apply: bool, states_error: str | None,
             comment_unchecked: bool = False) -> int:
    """Print the actions as a script; with ``apply`` run them. Returns the exit code.

    ``comment_unchecked`` (resume): when the scheduler's state could not be read, the dry-run prints
    the commands commented out, says why, and exits 1, so piping the script to sh cannot resume a node
    someone else drained."""
    blocked = comment_unchecked and states_error is not None and not apply
    for a in actions:
        click.echo(f"# {a.host} (node {a.node}): {a.note}")
        for command in a.commands:
            click.echo(f"# {command}" if blocked and a.unchecked else command)
    runnable = [a for a in actions if a.argvs and not a.skipped]
    if blocked:
        click.echo(f"# NOT RUNNABLE: the scheduler's state could not be read ({states_error}), so whose drain "
                   f"each node carries is unknown; the {sum(len(a.argvs) for a in runnable)} command(s) above "
                   "are commented out. Fix access to the scheduler and run again.")
        return EXIT_FAILED
    if not apply:
        click.echo(f"# dry-run: nothing changed; --apply runs the {sum(len(a.argvs) for a in runnable)} "
                   "command(s) above" + (f" on {controller.where}" if controller.host else ""))
        return EXIT_OK
    if states_error is not None:
        click.echo(f"# REFUSED: cannot read the scheduler's state ({states_error}); without it reason "
                   "ownership cannot be checked, so nothing was changed", err=True)
        return EXIT_FAILED
    failed = 0
    for outcome in apply_actions(runnable, controller):
        status = "ok" if outcome.error is None else f"FAILED: {outcome.error}"
        failed += outcome.error is not None
        click.echo(f"# applied {outcome.action.node} on {controller.where}: {status}")
    return EXIT_FAILED if failed else EXIT_OK


_common = [
    click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path)),
    click.option("--scheduler", type=click.Choice(["slurm", "kubernetes"]), default="slurm",
                 show_default=True, help="slurm: scontrol drain/resume; kubernetes: kubectl cordon and taints."),
    command_line_flag("--apply", help="Run the commands (default: print them only)."),
    click.option("-i", "--inventory", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                 help="Inventory: node names (slurm_node/k8s_node vars), fleet size, controller host."),
    click.option("--controller", help="Host where scheduler commands run over SSH [default: the "
                 "inventory's controller, else this machine]."),
    click.option("-F", "--ssh-config", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                 help="ssh_config for reaching the controller host."),
    click.option("--status", "statuses", default="FAIL", show_default=True,
                 help="Statuses that take a node out (comma-separated): FAIL, and ERROR to drain nodes that "
                      "could not be checked; WARN never drains."),
    click.option("--checks", help="Only these checks may drain (comma-separated globs, e.g. 'gpu.*,xid.*')."),
    click.option("--ignore", help="Checks that never drain (comma-separated globs)."),
    click.option("--advisory", default=",".join(ADVISORY_CHECKS), show_default=True,
                 help="Checks that drain only when --checks names them (fleet version mismatches, history, "
                      "merge and replay notes); '' makes them drain like any other. Words in a finding's "
                      "remedy never decide a drain."),
]


def _with_common(f):  # type: ignore[no-untyped-def]
    for option in reversed(_common):
        f = option(f)
    return f


@click.command()
@_with_common
@click.option("--max-fraction", type=click.FloatRange(0, 1), default=DEFAULTS.drain_max_fraction,
              show_default=True, help="Circuit breaker: most of the fleet drained in one go.")
@command_line_flag("--force", help="Override the circuit breaker (too many nodes, broken run).")
def drain(run_dir: Path, scheduler: str, apply: bool, inventory: Path | None, controller: str | None,
          ssh_config: Path | None, statuses: str, checks: str | None, ignore: str | None,
          advisory: str, max_fraction: float, force: bool) -> None:
    """Take out the nodes that failed in RUN_DIR (dry-run unless --apply).

    Slurm: scontrol update State=DRAIN with a reason prefixed "healthcheck:"; a node drained by
    someone else is left alone. Kubernetes: kubectl cordon, a healthcheck/<category> taint and
    labels. Exit codes: 0 done, 1 a command failed, 2 usage error, 3 refused by the circuit breaker.
    """
    sched = get_scheduler(scheduler)
    setup = _setup(run_dir, sched, inventory, _policy(statuses, checks, ignore, advisory), max_fraction,
                   controller, ssh_config)
    plan, ctl = setup.plan, setup.controller
    click.echo(f"# healthcheck drain: run {plan.run_id or run_dir.name}, {scheduler} on {ctl.where}, "
               f"{len(plan.decisions)} node(s) to drain, limit {plan.breaker.limit} "
               f"of {plan.breaker.fleet_size} ({setup.fleet.where})")
    _say_unknown(setup)
    if not plan.breaker.allowed:
        for why in plan.breaker.reasons:
            click.echo(f"# circuit breaker: {why}")
        if not force:
            click.echo("# REFUSED: nothing drained (--force overrides)", err=True)
            sys.exit(EXIT_REFUSED)
        click.echo("# circuit breaker overridden by --force")
    if setup.error:
        click.echo(f"# state not read: {setup.error}")
    sys.exit(_execute(sched.drain_actions(plan.decisions, setup.states), ctl, apply, setup.error))


@click.command()
@_with_common
def resume(run_dir: Path, scheduler: str, apply: bool, inventory: Path | None, controller: str | None,
           ssh_config: Path | None, statuses: str, checks: str | None, ignore: str | None,
           advisory: str) -> None:
    """Resume the nodes healthcheck drained that pass in RUN_DIR (dry-run unless --apply).

    Only nodes whose drain reason starts with "healthcheck:" (Kubernetes: only our own taints)
    and that have no FAIL/ERROR in RUN_DIR. When the scheduler's state cannot be read, the dry-run prints
    the commands commented out with why. Exit codes: 0 done, 1 a command failed or the state could not
    be read, 2 usage error.
    """
    sched = get_scheduler(scheduler)
    setup = _setup(run_dir, sched, inventory, _policy(statuses, checks, ignore, advisory),
                   DEFAULTS.drain_max_fraction, controller, ssh_config, resume=True)
    plan, ctl = setup.plan, setup.controller
    refs = [NodeRef(h, plan.node(h)) for h in plan.passing]
    click.echo(f"# healthcheck resume: run {plan.run_id or run_dir.name}, {scheduler} on {ctl.where}, "
               f"{len(refs)} passing node(s) checked for a drain of ours")
    _say_unknown(setup)
    if setup.error:
        click.echo(f"# state not read: {setup.error}")
    sys.exit(_execute(sched.resume_actions(refs, setup.states), ctl, apply, setup.error, comment_unchecked=True))


COMMANDS = [drain, resume]
