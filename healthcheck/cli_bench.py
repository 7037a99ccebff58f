"""``healthcheck bench``: run benchmarks alone (no probes) and write a run directory.

    healthcheck bench -i cluster.yaml --benchmarks nccl,hpl --plan acceptance --run-dir runs/accept1
    healthcheck bench -i cluster.yaml --benchmarks imb --launcher-host login01 --launcher srun
    healthcheck bench --list

Same run directory and exit codes as ``healthcheck run`` (0 pass, 1 any FAIL/ERROR, 2 usage); job
outputs land in ``raw/_jobs/`` and ``healthcheck run --replay`` re-grades them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from healthcheck import benchmarks as bench_registry
from healthcheck.cli import SETUP_ERRORS, ExitCode, _csv, _limit, exit_code, print_summary
from healthcheck.pipeline import RunOptions, execute_run


@click.command("bench")
@click.option("-i", "--inventory", type=click.Path(path_type=Path), help="Inventory YAML.")
@click.option("--out", type=click.Path(path_type=Path), default=Path("runs"), show_default=True)
@click.option("--run-dir", type=click.Path(path_type=Path), help="Exact run directory (absent or empty).")
@click.option("--benchmarks", "names", default="nccl", show_default=True, help="Comma-separated: "
              "nccl,hpl,imb,osu.")
@click.option("--plan", type=click.Choice(["quick", "acceptance"]), default="quick", show_default=True)
@click.option("--launcher", type=click.Choice(["mpirun", "srun"]), help="Override the profile's launcher.")
@click.option("--launcher-host", help="Host that runs mpirun/srun ('local' = here) [default: each "
              "job's first node].")
@click.option("--pair-rounds", type=click.IntRange(1), help="Pair rounds (partners per node).")
@click.option("--per-rail", is_flag=True, help="Also run pair jobs per rail (HCA) from the profile.")
@click.option("--no-retest", is_flag=True, help="Do not retest suspects against a known-good partner.")
@click.option("--include-failed", is_flag=True, help="Benchmark hosts even when their probes failed.")
@click.option("-F", "--ssh-config", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="ssh_config used to reach the hosts and the launcher host.")
@click.option("--accept-new-host-keys", is_flag=True, help="Trust host keys seen for the first time.")
@click.option("--profile", help="Profile for every host (overrides the inventory).")
@click.option("--limit", help="Only these hosts: nodeset(s) like gpu[001-004] or group names.")
@click.option("--strict", is_flag=True, help="WARN counts as failure for the exit code.")
@click.option("--list", "list_only", is_flag=True, help="List the benchmarks and exit.")
def bench(inventory: Path | None, out: Path, run_dir: Path | None, names: str, plan: str,
          launcher: str | None, launcher_host: str | None, pair_rounds: int | None, per_rail: bool,
          no_retest: bool, include_failed: bool, ssh_config: Path | None, accept_new_host_keys: bool,
          profile: str | None, limit: str | None, strict: bool, list_only: bool) -> None:
    """Run nccl-tests, HPL, IMB or OSU across the cluster and grade them against the profiles.

    Plans: quick = nccl and HPL on every node alone, IMB/OSU on one round of node pairs;
    acceptance = nccl per node, in pairs (3 rounds, suspects retested against a known-good
    partner) and on the whole cluster, HPL per node and on the cluster, IMB/OSU 3 rounds of
    pairs. Binaries, NCCL env, message sizes and each job's
    timeout (<tool>.timeout_s; a hung job is an ERROR for its hosts) come from the profile's
    settings.benchmarks, overridden by the inventory var `benchmarks`. Job outputs are kept in
    RUN_DIR/raw/_jobs/ (healthcheck run --replay re-grades them). Exit codes: 0 pass, 1 a FAIL or
    ERROR (or WARN with --strict), 2 usage or setup error.
    """
    if list_only:
        for spec in bench_registry.all_benchmarks():
            click.echo(f"{spec.name:<6} {spec.description}")
        return
    if inventory is None:
        raise click.UsageError("give -i/--inventory")
    options = {"launcher_host": launcher_host, "pair_rounds": pair_rounds, "per_rail": per_rail,
               "retest": not no_retest, "skip_failed_hosts": not include_failed,
               **({"launcher": {"kind": launcher}} if launcher else {})}
    opts = RunOptions(inventory=inventory, out=out, run_dir=run_dir, probes=[], ssh_config=ssh_config,
                      accept_new_host_keys=accept_new_host_keys, profile=profile, limit=_limit(limit),
                      benchmarks=_csv(names) or (), plan=plan, progress=sys.stderr.isatty(),
                      probe_options={k: v for k, v in options.items() if v is not None})
    try:
        bench_registry.select(list(opts.benchmarks))
        outcome = execute_run(opts)
    except (*SETUP_ERRORS, bench_registry.RegistryError) as exc:
        click.echo(f"healthcheck: {exc}", err=True)
        sys.exit(ExitCode.USAGE)
    print_summary(outcome.results, outcome.run_dir)
    sys.exit(exit_code(outcome.results, strict))


COMMANDS = [bench]
