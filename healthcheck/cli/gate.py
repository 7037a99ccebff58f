"""``healthcheck gate``: the pre-job gate (Slurm Prolog/Epilog, Kubernetes init container).

    healthcheck gate --profile h100-sxm5-8x                      # budget 60 s, fail-open
    healthcheck gate --slurm-self --budget 45 --on-error closed  # Prolog: drain this node on FAIL and on ERROR
    healthcheck gate --kubernetes-self --host "$NODE_NAME"       # init container: taint/label this node

Prints one line per non-PASS finding and one per active test. Exit: 0 the job may start; 1 the node failed
(with ``--on-error closed`` also when it could not be judged); the gate's own errors (bad setup, a crash, the
budget reached) exit 0 with ``--on-error open`` (the default: our own error never drains) and 1 with ``closed``.
"""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path
from typing import Any

import click

from healthcheck.cli.common import SETUP_ERRORS
from healthcheck.cli.options import csv_list
from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import Finding, Status


def _settings(pairs: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--set")
        out[key.strip()] = value
    return out


@click.command("gate")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("/var/spool/healthcheck-gate"),
              show_default=True, help="Spool directory; the bundle goes to OUT/<host>/, the cache to OUT/.gate-cache/.")
@click.option("--host", help="Name of this node [default: $SLURMD_NODENAME, else the short host name].")
@click.option("-i", "--inventory", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Inventory: this host's entry gives its profile and vars.")
@click.option("--profile", help="Hardware profile (overrides the inventory).")
@click.option("--budget", type=click.FloatRange(5), default=DEFAULTS.gate_budget_s, show_default=True,
              help="Seconds for the whole gate; it is killed cleanly at the budget.")
@click.option("--passive-budget", type=click.FloatRange(1), default=DEFAULTS.gate_passive_budget_s,
              show_default=True, help="Declared cost the passive probes may use (docs/node.md table).")
@click.option("--tests", help="Comma-separated active tests (gpuperf,copy,dcgm_diag,nccl,sdc) [default: all].")
@click.option("--skip-tests", help="Comma-separated active tests to leave out.")
@click.option("--probes", help="Comma-separated passive probes [default: the job-safe ones that fit].")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Where passing active results are kept [default: OUT/.gate-cache].")
@click.option("--cache-minutes", type=click.FloatRange(0), default=DEFAULTS.gate_cache_minutes, show_default=True,
              help="Reuse an active test that passed this recently (same boot, driver, profile); 0: never.")
@click.option("--on-error", type=click.Choice(["open", "closed"]), default="open", show_default=True,
              help="The gate's own errors and ERROR findings: open lets the job start, closed fails the node.")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="Benchmark setting, as settings.benchmarks in a profile (gpuperf.dtype=fp16, nccl_node.bytes=1G).")
@click.option("--slurm-self", is_flag=True, help="Drain this node in Slurm on failure, with our reason.")
@click.option("--slurm-node", help="Slurm name of this node [default: --host's default].")
@click.option("--kubernetes-self", is_flag=True, help="Taint and label this Kubernetes node on failure.")
@click.option("--kube-node", help="Kubernetes name of this node [default: --host's default].")
@click.option("--max-drain-fraction", type=click.FloatRange(0, 1), default=DEFAULTS.drain_max_fraction,
              show_default=True, help="Refuse a new drain/taint when healthcheck already holds this share of nodes.")
def gate(out: Path, host: str | None, inventory: Path | None, profile: str | None, budget: float,
         passive_budget: float, tests: str | None, skip_tests: str | None, probes: str | None,
         cache_dir: Path | None, cache_minutes: float, on_error: str, settings: tuple[str, ...], slurm_self: bool,
         slurm_node: str | None, kubernetes_self: bool, kube_node: str | None, max_drain_fraction: float) -> None:
    """Check this node before a job: passive probes, then active micro-tests, inside a hard budget.

    Every option can come from the environment: HEALTHCHECK_GATE_OUT, HEALTHCHECK_GATE_BUDGET,
    HEALTHCHECK_GATE_PROFILE, HEALTHCHECK_GATE_ON_ERROR, HEALTHCHECK_GATE_SLURM_SELF=1, ...
    """
    from healthcheck.ops.gate.exec import Watchdog
    from healthcheck.ops.gate.plan import GateCostError
    from healthcheck.ops.gate.run import GateOptions, run_gate
    from healthcheck.ops.node import finding_line, node_name
    from healthcheck.probes import RegistryError

    started = time.monotonic()
    own_error = 0 if on_error == "open" else 1
    opts = GateOptions(spool=out, host=host, inventory=inventory, profile=profile, budget_s=budget,
                       passive_budget_s=passive_budget, tests=csv_list(tests), skip_tests=csv_list(skip_tests) or (),
                       probes=csv_list(probes), cache_dir=cache_dir, cache_minutes=cache_minutes, on_error=on_error,
                       settings=_settings(settings), started=started)
    watchdog = Watchdog(started + budget - 0.5, own_error, opts.groups, on_fire=lambda: click.echo(
        f"healthcheck: gate: budget of {budget:g} s reached: tests killed, exiting {own_error} "
        f"(--on-error {on_error})", err=True)).start()
    try:
        outcome = run_gate(opts)
    except Exception as exc:  # the gate's own error, whatever it is: --on-error decides, never a traceback's rc 1
        known = isinstance(exc, (*SETUP_ERRORS, RegistryError, GateCostError, OSError))
        if not known:
            traceback.print_exc()
        _own_error(f"{'' if known else 'a healthcheck bug: '}{type(exc).__name__}: {exc}", on_error, slurm_self,
                   kubernetes_self, host, slurm_node, kube_node, max_drain_fraction, started + budget)
        watchdog.cancel()
        sys.exit(own_error)
    _report(outcome)
    _act(outcome.findings, outcome.host, on_error, slurm_self, kubernetes_self, slurm_node or node_name(host),
         kube_node or node_name(host), max_drain_fraction, started + budget)
    if outcome.first_failure is not None:
        verdict = "failed" if outcome.exit_code else f"could not judge the node (--on-error {on_error}: job may start)"
        click.echo(f"healthcheck: gate {verdict}: {finding_line(outcome.first_failure)}", err=True)
    elif outcome.verdict is Status.ERROR:
        click.echo(f"healthcheck: gate checked nothing (--on-error {on_error})", err=True)
    watchdog.cancel()
    sys.exit(outcome.exit_code)


def _report(outcome: Any) -> None:
    """What was left out, one line per active test, one per non-PASS finding."""
    from healthcheck.ops.node import finding_line

    for name, why in outcome.passive_left_out.items():
        click.echo(f"# passive not run: {name}: {why}")
    for record in outcome.tests:
        timing = f" {record.seconds:.1f} s (estimate {record.estimate_s} s)" if record.state == "ran" else ""
        click.echo(f"# test {record.name}: {record.state}{timing}{': ' + record.note if record.note else ''}")
    for f in outcome.findings:
        if f.status is not Status.PASS:
            click.echo(finding_line(f))


def _act(findings: list[Finding], host: str, on_error: str, slurm_self: bool, kubernetes_self: bool,
         slurm_node: str, kube_node: str, max_fraction: float, deadline: float) -> None:
    """Drain or taint this node (and undo our own, on a clean gate), within what is left of the budget."""
    if not (slurm_self or kubernetes_self):
        return
    from healthcheck.ops.gate.kubeself import kube_self
    from healthcheck.ops.schedulers.controller import Controller
    from healthcheck.ops.selfdrain import SelfDrainPolicy, self_drain

    policy = SelfDrainPolicy(drain_on_error=on_error == "closed", max_fraction=max_fraction)
    controller = Controller(timeout_s=max(1.0, deadline - time.monotonic() - 1.0))
    if slurm_self:
        done = self_drain(findings, host, slurm_node, policy, controller)
        if done.action != "none":
            click.echo(f"healthcheck: slurm {done.action}: {done.note}", err=True)
    if kubernetes_self:
        done = kube_self(findings, kube_node, policy, controller)
        if done.action != "none":
            click.echo(f"healthcheck: kubernetes {done.action}: {done.note}", err=True)


def _own_error(why: str, on_error: str, slurm_self: bool, kubernetes_self: bool, host: str | None,
               slurm_node: str | None, kube_node: str | None, max_fraction: float, deadline: float) -> None:
    from healthcheck.ops.node import node_name

    click.echo(f"healthcheck: gate error ({'job may start' if on_error == 'open' else 'node fails'}, --on-error "
               f"{on_error}): {why}", err=True)
    if on_error == "closed":
        name = node_name(host)
        finding = Finding(host=name, check="gate.error", status=Status.ERROR, message=why, source="gate")
        _act([finding], name, on_error, slurm_self, kubernetes_self, slurm_node or name, kube_node or name,
             max_fraction, deadline)


COMMANDS = [gate]
