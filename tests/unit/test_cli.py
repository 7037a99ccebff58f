"""CLI: exit codes, --version, help on every command, inventory show, local and replay runs."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import healthcheck
from healthcheck.cli.main import main
from healthcheck.store.results import load_results
from healthcheck.store.rundir import raw_dir


@pytest.fixture
def cli():
    return CliRunner()


def test_version_and_help_on_every_command(cli):
    assert cli.invoke(main, ["--version"]).output.strip() == f"healthcheck, version {healthcheck.__version__}"
    ctx = click.Context(main)
    names = main.list_commands(ctx)
    assert {"run", "report", "bench", "drain", "sweep", "merge", "node", "gate", "assets", "diff"} <= set(names)
    for name in names:
        command = main.get_command(ctx, name)
        result = cli.invoke(main, [name, "--help"])
        assert result.exit_code == 0, name
        assert "Usage:" in result.output
        for sub in getattr(command, "commands", {}):
            assert cli.invoke(main, [name, sub, "--help"]).exit_code == 0


def test_usage_errors_exit_2(cli, tmp_path):
    assert cli.invoke(main, ["run"]).exit_code == 2
    assert cli.invoke(main, ["run", "--local", "--replay", str(tmp_path)]).exit_code == 2
    bad = tmp_path / "inv.yaml"
    bad.write_text("hosts: {n1: {adress: 1.2.3.4}}\n")
    result = cli.invoke(main, ["run", "-i", str(bad), "--run-dir", str(tmp_path / "r")])
    assert result.exit_code == 2
    assert "unknown var 'adress'" in result.output
    assert cli.invoke(main, ["run", "--local", "--probes", "nope", "--run-dir", str(tmp_path / "r2")]).exit_code == 2


def test_inventory_show_lists_expanded_hosts(cli, tmp_path):
    inv = tmp_path / "inv.yaml"
    inv.write_text("defaults: {profile: h100-sxm5-8x, user: ops}\n"
                   "groups: {gpu: {hosts: 'gpu[01-03]', vars: {port: 2222}}}\n"
                   "hosts: {gpu02: {address: 127.0.1.2}}\n")
    result = cli.invoke(main, ["inventory", "show", "-i", str(inv)])
    assert result.exit_code == 0
    row = next(line for line in result.output.splitlines() if line.startswith("gpu02"))
    assert row.split() == ["gpu02", "gpu", "127.0.1.2", "ops", "2222", "h100-sxm5-8x"]
    assert result.output.strip().endswith("3 hosts")


def test_local_run_then_replay_same_verdicts_and_strict(cli, tmp_path):
    first = cli.invoke(main, ["run", "--local", "--probes", "system", "--run-dir", str(tmp_path / "a")])
    assert first.exit_code == 0, first.output
    results = json.loads((tmp_path / "a" / "results.json").read_text())
    host = next(iter(results["hosts"]))
    assert results["run"]["mode"] == "local"
    again = cli.invoke(main, ["run", "--replay", str(tmp_path / "a"), "--run-dir", str(tmp_path / "b")])
    assert again.exit_code == 0, again.output
    replayed = json.loads((tmp_path / "b" / "results.json").read_text())
    assert replayed["run"]["mode"] == "replay"
    assert replayed["hosts"][host]["verdict"] == results["hosts"][host]["verdict"]
    # the replay references the bundle's raw outputs (raw/_source.json) instead of copying them
    assert not (tmp_path / "b" / "raw" / host).exists()
    assert (raw_dir(tmp_path / "b") / host / "uname-r.out").read_bytes() == \
           (tmp_path / "a" / "raw" / host / "uname-r.out").read_bytes()


def test_profiles_list_and_show(cli):
    listed = cli.invoke(main, ["profiles", "list"])
    assert listed.exit_code == 0
    names = [line.split()[0] for line in listed.output.splitlines()]
    assert {"a100-sxm4-80gb-8x", "h100-sxm5-8x", "h200-sxm-8x", "b200-hgx-8x", "h100-pcie-8x",
            "l40s-pcie-4x"} <= set(names)
    shown = cli.invoke(main, ["profiles", "show", "h100-sxm5-8x"])
    assert shown.exit_code == 0
    lines = shown.output.splitlines()
    count = next(i for i, line in enumerate(lines) if line.startswith("gpu.count "))
    assert "== 8 GPUs" in lines[count] and lines[count + 1].strip().startswith("source: ")
    assert cli.invoke(main, ["profiles", "show", "nope"]).exit_code == 2


def test_host_without_profile_is_graded_on_profile_free_checks(cli, tmp_path):
    result = cli.invoke(main, ["run", "--local", "--probes", "system,resources", "--run-dir", str(tmp_path / "r")])
    [host] = load_results(tmp_path / "r").hosts.values()
    assert host.profile is None
    by_check = {f.check: f for f in host.findings}  # PASS findings live in the findings table
    assert by_check["system.hostname"].status.value == "PASS"
    assert by_check["system.memory"].status.value == "SKIP"
    assert "profile (none)" in by_check["system.memory"].message
    assert result.exit_code == 0
    assert "no profile" in (tmp_path / "r" / "report.html").read_text()


def test_commands_are_planned_per_profile(tmp_path):
    """A profile's required mounts reach that profile's hosts' mount probe (quoted), and only theirs."""
    from healthcheck.run.execute import execute_run
    from healthcheck.run.options import OutputOptions, RunOptions, SelectionOptions, TargetOptions

    (tmp_path / "site.yaml").write_text(
        "name: site\nexpect:\n  system.mounts: {op: eq, value: ['/lustre scratch'], source: site runbook}\n")
    outcome = execute_run(RunOptions(target=TargetOptions(local=True, profile="site", profile_dirs=[tmp_path]),
                                     selection=SelectionOptions(probes=["system"]),
                                     outputs=OutputOptions(run_dir=tmp_path / "run")))
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    [probe] = [c for c in manifest["commands_by_profile"]["site"] if c["id"] == "mount-probe"]
    assert "'/lustre scratch'" in probe["line"]
    assert "lustre" not in next(c["line"] for c in manifest["commands"] if c["id"] == "mount-probe")
    [host] = outcome.results.hosts.values()
    missing = [f for f in host.findings if f.check == "system.mount.present" and f.status.value == "FAIL"]
    assert [f.component for f in missing] == ["/lustre scratch"]


def test_replay_against_another_inventory(cli, tmp_path):
    """A bundle re-graded with -i: the inventory gives hosts and profiles, the bundle the outputs."""
    sample = Path(__file__).resolve().parents[2] / "inventories" / "samples" / "h100-4node"
    inv = tmp_path / "inv.yaml"
    inv.write_text("defaults: {profile: h200-sxm-8x}\nhosts: {h100-node01: {}, h100-node02: {}}\n")
    result = cli.invoke(main, ["run", "--replay", str(sample), "-i", str(inv), "--run-dir", str(tmp_path / "r")])
    results = json.loads((tmp_path / "r" / "results.json").read_text())
    assert sorted(results["hosts"]) == ["h100-node01", "h100-node02"]
    model = next(f for f in results["hosts"]["h100-node01"]["findings"] if f["check"] == "gpu.model")
    assert model["status"] == "FAIL" and "H100" in str(model["value"])  # H100 outputs against an H200 profile
    assert result.exit_code == 1


def test_a_crashing_fleet_check_is_an_error_and_results_are_still_written(tmp_path, monkeypatch):
    from healthcheck import probes
    from healthcheck.run.execute import execute_run
    from healthcheck.run.options import OutputOptions, RunOptions, SelectionOptions, TargetOptions

    class Broken:
        name = "broken"

        def evaluate_fleet(self, observations, hosts, profiles):
            raise RuntimeError("boom")

    monkeypatch.setattr(probes, "fleet_checks", lambda: [Broken()])
    outcome = execute_run(RunOptions(target=TargetOptions(local=True),
                                     selection=SelectionOptions(probes=["system"]),
                                     outputs=OutputOptions(run_dir=tmp_path / "run")))
    [host] = outcome.results.hosts.values()
    [error] = [f for f in host.findings if f.check == "fleet.stage"]
    assert error.status.value == "ERROR" and "RuntimeError: boom" in error.message
    assert json.loads((tmp_path / "run" / "results.json").read_text())["summary"]["verdict"] == "ERROR"


def test_hosts_accepts_sinfo_style_multiline_nodesets(tmp_path):
    from healthcheck.run.options import RunOptions, TargetOptions
    from healthcheck.run.plan import run_hosts

    hosts = run_hosts(RunOptions(target=TargetOptions(hostlist="gpu[001-002]\ngpu[010-011] login01\n")), [])
    assert [h.name for h in hosts] == ["gpu001", "gpu002", "gpu010", "gpu011", "login01"]


@pytest.mark.parametrize(("hosts", "says"), [
    ({"h100-node01": {}}, "manifest.json: 'hosts' is not a list"),
    (["h100-node01"], "manifest.json: hosts[0] is not an object"),
    ([{"name": "h100-node01", "adress": "10.0.0.1"}], "manifest.json: hosts[0]: unknown keys ['adress']"),
])
def test_manifest_hosts_of_the_wrong_shape_is_a_usage_error(cli, tmp_path, hosts, says):
    """The built-in sample's manifest with its ``hosts`` edited: one line on stderr, exit 2, no traceback."""
    import shutil

    bundle = tmp_path / "bundle"
    shutil.copytree(Path(__file__).resolve().parents[2] / "inventories" / "samples" / "h100-4node", bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    (bundle / "manifest.json").write_text(json.dumps({**manifest, "hosts": hosts}))
    result = cli.invoke(main, ["run", "--replay", str(bundle), "--run-dir", str(tmp_path / "r")])
    assert result.exit_code == 2, result.output
    assert says in result.output and "Traceback" not in result.output
    assert len([line for line in result.output.splitlines() if line.startswith("healthcheck:")]) == 1


def test_results_of_a_directory_without_results_json_is_a_usage_error(cli, tmp_path):
    (tmp_path / "raw").mkdir()
    result = cli.invoke(main, ["results", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output.strip() == (f"healthcheck: {tmp_path} has neither a readable results.json, "
                                     "findings.jsonl nor findings.table.json.gz: not a run directory")
    (tmp_path / "results.json").write_text("{not json")
    broken = cli.invoke(main, ["results", str(tmp_path)])
    assert broken.exit_code == 2 and "results.json" in broken.output and "Traceback" not in broken.output
