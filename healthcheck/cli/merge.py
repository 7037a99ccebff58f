"""``healthcheck merge``: node bundles (node-local spools, partial sweeps) -> one graded run directory.

    healthcheck merge /shared/hc-spool --run-dir runs/nightly-20261123 -i site.yaml
    healthcheck merge runs/part1 runs/part2 /shared/hc-spool --run-dir runs/all --prefer newest-reachable

Exit codes as ``run``: 0 every host passed, 1 any FAIL/ERROR (including hosts with no result), 2 usage.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from healthcheck.cli.common import SETUP_ERRORS, ExitCode, exit_code, print_summary
from healthcheck.cli.options import csv_list
from healthcheck.core.textsafe import printable
from healthcheck.ops.merge import PREFER


@click.command("merge")
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--run-dir", required=True, type=click.Path(path_type=Path), help="Merged run directory "
              "(absent or empty).")
@click.option("-i", "--inventory", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The fleet: its hosts missing from every source are ERROR 'no result from node'.")
@click.option("--profile", help="Profile for every host (overrides the inventory and the bundles).")
@click.option("--prefer", type=click.Choice(PREFER), default="newest", show_default=True,
              help="Which collection wins per host: the newest, the newest that reached the node, or the "
              "one from the last source given.")
@click.option("--probes", "probe_names", help="Probes to grade [default: those the sources ran].")
@click.option("--regrade", is_flag=True, help="Grade every host from its outputs, also those whose node graded "
              "them with this healthcheck version and profile [default: such a node's grading is taken].")
@click.option("--strict", is_flag=True, help="WARN counts as failure for the exit code.")
def merge(sources: tuple[Path, ...], run_dir: Path, inventory: Path | None, profile: str | None, prefer: str,
          probe_names: str | None, regrade: bool, strict: bool) -> None:
    """Merge node bundles into one run directory, grade the fleet and write the reports."""
    from healthcheck.ops.merge import merge_bundles
    from healthcheck.probes import RegistryError

    try:
        outcome = merge_bundles(list(sources), run_dir, inventory=inventory, profile=profile, prefer=prefer,
                                probes=csv_list(probe_names), regrade=regrade)
    except (*SETUP_ERRORS, RegistryError) as exc:
        click.echo(f"healthcheck: {exc}", err=True)
        sys.exit(ExitCode.USAGE)
    for label, lines in (("refused", outcome.refused), ("clock", outcome.clock), ("skipped", outcome.skipped)):
        for line in lines[:20]:
            click.echo(f"{label}: {printable(line)}", err=True)
        if len(lines) > 20:
            click.echo(f"{label}: ... {len(lines) - 20} more (merge.json)", err=True)
    merged = sum(1 for p in outcome.provenance.values() if p["source"])
    click.echo(f"merged {merged} hosts from {len(sources)} source(s); "
               f"{len(outcome.provenance) - merged} expected host(s) without a result")
    graded_by = outcome.graded_by()
    click.echo(f"grading: {graded_by['node']} host(s) as their node graded them, {graded_by['merge']} graded here "
               "(merge.json says why)")
    print_summary(outcome.run.results, outcome.run.run_dir)
    sys.exit(exit_code(outcome.run.results, strict))


COMMANDS = [merge]
