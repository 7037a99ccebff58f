"""One option set for run, sweep and bench; help on every option; no state-changing flag from the environment."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from healthcheck.cli.main import main
from healthcheck.cli.options import TARGET_PARAMS
from healthcheck.core.model import Finding, Status
from healthcheck.store.results import HostResult, RunResults, write_results

SAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "samples" / "h100-4node"
COMMON = {"-i", "--hosts", "--transport", "--srun-arg", "--limit", "--probes", "--skip-probes", "--xid-window",
          "--accept-new-host-keys", "--connect-timeout", "-F", "--ssh-client", "--forks", "--profile", "--timeout",
          "--plan", "--max-hosts"}
STATE_CHANGING = {"apply", "force", "accept_new_host_keys"}


def all_commands(command: click.Command, path: str = "healthcheck"):
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from all_commands(sub, f"{path} {name}")


def options_of(command: click.Command) -> dict[str, click.Option]:
    return {opt: p for p in command.params if isinstance(p, click.Option) for opt in p.opts}


def test_run_sweep_bench_share_one_definition_of_the_common_options():
    by_command = {name: options_of(_command(name)) for name in ("run", "sweep", "bench")}
    for name, options in by_command.items():
        assert set(options) >= COMMON, f"{name} lacks {sorted(COMMON - set(options))}"
    for opt in COMMON:
        first = by_command["run"][opt]
        for name in ("sweep", "bench"):
            other = by_command[name][opt]
            assert (other.name, other.help, other.default, other.opts) == \
                   (first.name, first.help, first.default, first.opts), (name, opt)
    # every shared parameter (options added later, e.g. --slurm-mode, included) is one definition
    assert len(TARGET_PARAMS) == len(set(TARGET_PARAMS))
    params = {name: {p.name: p for p in _command(name).params} for name in ("run", "sweep", "bench")}
    for param in TARGET_PARAMS:
        first = params["run"][param]
        assert (params["sweep"][param].opts, params["sweep"][param].help) == (first.opts, first.help), param
        assert (params["bench"][param].opts, params["bench"][param].help) == (first.opts, first.help), param


def test_every_option_of_every_command_has_help():
    missing = [f"{path} {p.opts}" for path, command in all_commands(main) for p in command.params
               if isinstance(p, click.Option) and not (p.help or "").strip()]
    assert missing == []


def test_plan_help_says_acceptance_runs_dcgm_level_3_for_30_to_60_minutes():
    for name in ("run", "sweep", "bench"):
        text = CliRunner().invoke(main, [name, "--help"], terminal_width=200).output
        assert "acceptance: DCGM diag level 3, which runs 30-60 minutes per node" in " ".join(text.split())


def test_state_changing_flags_never_come_from_the_environment():
    flags = [(path, p) for path, command in all_commands(main) for p in command.params
             if isinstance(p, click.Option) and p.name in STATE_CHANGING]
    assert {path for path, _ in flags} >= {"healthcheck drain", "healthcheck resume", "healthcheck run",
                                           "healthcheck sweep", "healthcheck bench"}
    for path, p in flags:
        assert p.allow_from_autoenv is False and p.envvar is None, (path, p.name)
        assert "Command line only" in p.help


def write_run(run_dir: Path, failing: list[str], hosts: int = 4) -> Path:
    results = {}
    for i in range(1, hosts + 1):
        name = f"gpu{i:03d}"
        status = Status.FAIL if name in failing else Status.PASS
        results[name] = HostResult(name=name, findings=[Finding(host=name, check="gpu.count", status=status,
                                                                value=7 if status is Status.FAIL else 8, unit="GPUs",
                                                                message="GPU count")])
    run_dir.mkdir(parents=True)
    write_results(run_dir, RunResults(run={"id": run_dir.name}, hosts=results))
    return run_dir


@pytest.fixture
def no_scontrol(tmp_path, monkeypatch):
    """A PATH without scontrol: the scheduler state cannot be read, as on a machine without Slurm."""
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def test_drain_apply_from_the_environment_stays_a_dry_run(tmp_path, no_scontrol):
    run_dir = write_run(tmp_path / "run", ["gpu001"], hosts=20)
    result = CliRunner().invoke(main, ["drain", str(run_dir)], env={"HEALTHCHECK_DRAIN_APPLY": "1"})
    assert "# dry-run: nothing changed" in result.output
    assert "REFUSED" not in result.output and "applied" not in result.output
    # and the same variable cannot be smuggled in for resume either
    result = CliRunner().invoke(main, ["resume", str(run_dir)], env={"HEALTHCHECK_RESUME_APPLY": "1"})
    assert "# NOT RUNNABLE" in result.output and "REFUSED" not in result.output


def test_force_from_the_environment_does_not_override_the_circuit_breaker(tmp_path, no_scontrol):
    run_dir = write_run(tmp_path / "run", ["gpu001", "gpu002", "gpu003"], hosts=4)
    result = CliRunner().invoke(main, ["drain", str(run_dir)], env={"HEALTHCHECK_DRAIN_FORCE": "1"})
    assert result.exit_code == 3
    assert "REFUSED: nothing drained (--force overrides)" in result.output
    assert "overridden" not in result.output


def test_values_still_come_from_the_environment_but_accept_new_host_keys_does_not(tmp_path):
    env = {"HEALTHCHECK_RUN_FORKS": "3", "HEALTHCHECK_RUN_ACCEPT_NEW_HOST_KEYS": "1",
           "HEALTHCHECK_RUN_XID_WINDOW": "6"}
    result = CliRunner().invoke(main, ["run", "--replay", str(SAMPLE), "--run-dir", str(tmp_path / "r")], env=env)
    assert result.exit_code == 1, result.output  # the sample has one faulty node
    args = json.loads((tmp_path / "r" / "manifest.json").read_text())["args"]
    assert args["transport"]["forks"] == 3
    assert args["transport"]["accept_new_host_keys"] is False
    assert args["selection"]["probe_options"]["kernel_log_window_h"] == 6.0


def test_sweep_takes_limit_skip_probes_and_hosts_source_checks(tmp_path):
    history = tmp_path / "history"
    result = CliRunner().invoke(main, ["sweep", "--replay", str(SAMPLE), "--history", str(history),
                                       "--limit", "h100-node01,h100-node02", "--skip-probes", "dcgm",
                                       "--forks", "2"])
    assert result.exit_code == 0, result.output
    run = (history / "runs" / "latest").resolve()
    document = json.loads((run / "results.json").read_text())
    assert sorted(document["hosts"]) == ["h100-node01", "h100-node02"]
    assert "dcgm" not in document["run"]["probes"] and "gpu" in document["run"]["probes"]
    both = CliRunner().invoke(main, ["sweep", "--hosts", "gpu01", "--replay", str(SAMPLE), "--history",
                                     str(history)])
    assert both.exit_code == 2 and "give -i/--inventory or --hosts NODESET" in both.output


def test_bench_takes_hosts_and_transport(tmp_path, monkeypatch):
    """bench with --hosts and --transport reaches RunOptions (no probes unless --probes names some)."""
    import healthcheck.cli.bench as cli_bench

    seen = []

    def fake_execute(opts):
        seen.append(opts)
        raise ValueError("stop here")

    monkeypatch.setattr(cli_bench, "execute_run", fake_execute)
    result = CliRunner().invoke(main, ["bench", "--hosts", "gpu[01-02]", "--transport", "slurm",
                                       "--srun-arg=--partition=gpu", "--benchmarks", "nccl", "--plan", "acceptance",
                                       "--run-dir", str(tmp_path / "b")])
    assert result.exit_code == 2 and "stop here" in result.output
    [opts] = seen
    assert (opts.target.hostlist, opts.transport.transport, tuple(opts.transport.srun_args),
            list(opts.selection.probes), opts.selection.plan) == \
           ("gpu[01-02]", "slurm", ("--partition=gpu",), [], "acceptance")
    CliRunner().invoke(main, ["bench", "--hosts", "gpu01", "--probes", "gpu,xid", "--run-dir", str(tmp_path / "c")])
    assert list(seen[-1].selection.probes) == ["gpu", "xid"]
    assert CliRunner().invoke(main, ["bench"]).exit_code == 2


def test_resume_dry_run_without_scheduler_state_prints_commands_commented_out_and_fails(tmp_path, no_scontrol):
    run_dir = write_run(tmp_path / "run", [], hosts=2)
    result = CliRunner().invoke(main, ["resume", str(run_dir)])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert "# scontrol update NodeName=gpu001 State=RESUME" in lines
    assert "scontrol update NodeName=gpu001 State=RESUME" not in lines
    assert not [line for line in lines if line and not line.startswith("#")]  # piped to sh: nothing runs
    assert any(line.startswith("# NOT RUNNABLE: the scheduler's state could not be read (scontrol") for line in lines)


def _command(name: str) -> click.Command:
    command = main.get_command(click.Context(main), name)
    assert command is not None, name
    return command
