"""``healthcheck assets RUN_DIR [--csv]`` and ``healthcheck diff RUN_A RUN_B``: the fleet's parts and their changes.

    healthcheck assets runs/latest --csv > handoff-assets.csv
    healthcheck diff runs/20261122T031500Z runs/latest

``diff`` exits like diff(1): 0 no hardware change, 1 changes listed, 2 usage error.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from healthcheck.core.textsafe import printable
from healthcheck.ops.assetdiff import diff_assets
from healthcheck.ops.assets import asset_table, for_csv, for_terminal, hosts_without_assets
from healthcheck.store.results import RunResults, load_results


def _load(run_dir: Path) -> RunResults:
    try:
        return load_results(run_dir, observations=("assets",))  # the store's (results.json's in version 2)
    except (OSError, ValueError) as exc:
        click.echo(f"healthcheck: {run_dir}: no readable results.json ({exc})", err=True)
        sys.exit(2)


@click.command("assets")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--csv", "as_csv", is_flag=True, help="CSV on stdout (one row per part) instead of a table.")
def assets(run_dir: Path, as_csv: bool) -> None:
    """Print the asset table of a run: every GPU, HCA and system board by serial, with firmware.

    Rows: host, kind, slot, model, serial, uuid, firmware, part_number, detail. Hosts whose run
    recorded no assets (unreachable, assets probe not selected) are named on stderr. Cells are node
    strings: in CSV a cell starting with =, +, -, @, TAB or CR gets a leading ' (so a spreadsheet never
    runs it), and control and bidi characters are shown as escapes.
    """
    results = _load(run_dir)
    frame = asset_table(results)
    if as_csv:
        click.echo(for_csv(frame).to_csv(index=False), nl=False)
    else:
        click.echo(for_terminal(frame).to_string(index=False) if len(frame) else "no assets recorded")
    missing = hosts_without_assets(results)
    if missing:
        click.echo(f"# no assets recorded for {len(missing)} host(s): {', '.join(map(printable, missing))}",
                   err=True)


@click.command("diff")
@click.argument("run_a", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("run_b", type=click.Path(exists=True, file_okay=False, path_type=Path))
def diff(run_a: Path, run_b: Path) -> None:
    """What changed in the hardware from RUN_A to RUN_B, per host.

    GPU or HCA swapped (serial / node GUID changed), GPU moved to another bus id or gone, firmware
    (VBIOS, InfoROM, HCA firmware, PSID, BIOS) and driver changes, system or baseboard serial changed,
    hosts added or missing. Exit codes: 0 no change, 1 changes, 2 usage error.
    """
    changes = diff_assets(_load(run_a), _load(run_b))
    for change in changes:
        click.echo(printable(change.line()))
    click.echo(f"# {len(changes)} change(s) from {printable(run_a.name)} to {printable(run_b.name)}")
    sys.exit(1 if changes else 0)


COMMANDS = [assets, diff]
