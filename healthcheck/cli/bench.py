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
from healthcheck.cli.common import SETUP_ERRORS, ExitCode, exit_code, print_summary
from healthcheck.cli.options import (
    SweepFlags,
    check_source,
    csv_list,
    plan_option,
    run_dir_options,
    target_options,
    verbose_option,
)
from healthcheck.run.execute import execute_run


@click.command("bench")
@target_options
@run_dir_options
@click.option("--benchmarks", "names", default="nccl", show_default=True, help="Comma-separated: "
              "nccl,hpl,imb,osu,sdc,gpuperf,nvbandwidth,nvloom,mndiag.")
@plan_option
@click.option("--launcher", type=click.Choice(["mpirun", "srun"]), help="Override the profile's launcher.")
@click.option("--launcher-host", help="Host that runs mpirun/srun ('local' = here) [default: each "
              "job's first node].")
@click.option("--pair-rounds", type=click.IntRange(1), help="Pair rounds (partners per node).")
@click.option("--per-rail", is_flag=True, help="Also run pair jobs per rail (HCA) from the profile.")
@click.option("--no-retest", is_flag=True, help="Do not retest suspects against a known-good partner.")
@click.option("--topology", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="--plan isolate: ibnetdiscover or iblinkinfo output of the fabric, for each host's leaf switch "
                   "(the inventory vars leaf and nvlink_domain win).")
@click.option("--parallel-jobs", type=click.IntRange(1, 4096), help="Jobs on disjoint hosts launched at once "
              "[default: 16]; a round of --plan isolate runs at once only when this covers it.")
@click.option("--include-failed", is_flag=True, help="Benchmark hosts even when their probes failed.")
@click.option("--strict", is_flag=True, help="WARN counts as failure for the exit code.")
@click.option("--list", "list_only", is_flag=True, help="List the benchmarks and exit.")
@verbose_option
def bench(target: SweepFlags, out: Path, run_dir: Path | None, names: str, plan: str,
          launcher: str | None, launcher_host: str | None, pair_rounds: int | None, per_rail: bool,
          no_retest: bool, topology: Path | None, parallel_jobs: int | None, include_failed: bool, strict: bool,
          list_only: bool, verbose: bool) -> None:
    """Run nccl-tests, HPL, IMB or OSU across the cluster and grade them against the profiles.

    Plans: quick = nccl and HPL on every node alone, IMB/OSU on one round of node pairs;
    acceptance = nccl per node, in pairs (3 rounds, suspects retested against a known-good
    partner) and on the whole cluster, HPL per node and on the cluster, IMB/OSU 3 rounds of
    pairs; isolate = nccl in groups that follow the leaves (inventory vars leaf/nvlink_domain or
    --topology), splitting only the groups that fail, confirming rail by rail, in at most 4
    rounds. Binaries, NCCL env, message sizes and each job's
    timeout (<tool>.timeout_s; a hung job is an ERROR for its hosts) come from the profile's
    settings.benchmarks, overridden by the inventory var `benchmarks`. Job outputs are kept in
    RUN_DIR/raw/_jobs/ (healthcheck run --replay re-grades them). Exit codes: 0 pass, 1 a FAIL or
    ERROR (or WARN with --strict), 2 usage or setup error.
    """
    if list_only:
        for spec in bench_registry.all_benchmarks():
            click.echo(f"{spec.name:<6} {spec.description}")
        return
    check_source(target, local_allowed=False)
    options = {"launcher_host": launcher_host, "pair_rounds": pair_rounds, "per_rail": per_rail,
               "retest": not no_retest, "skip_failed_hosts": not include_failed,
               "topology": str(topology) if topology else None, "parallel_jobs": parallel_jobs,
               **({"launcher": {"kind": launcher}} if launcher else {})}
    opts = target.run_options(out=out, run_dir=run_dir, probes=csv_list(target.probe_names) or [],
                              benchmarks=csv_list(names) or (), plan=plan, progress=sys.stderr.isatty(),
                              probe_options={k: v for k, v in options.items() if v is not None})
    try:
        bench_registry.select(list(opts.bench.benchmarks))
        outcome = execute_run(opts)
    except (*SETUP_ERRORS, bench_registry.RegistryError) as exc:
        click.echo(f"healthcheck: {exc}", err=True)
        sys.exit(ExitCode.USAGE)
    print_summary(outcome.results, outcome.run_dir, verbose)
    sys.exit(exit_code(outcome.results, strict))


COMMANDS = [bench]
