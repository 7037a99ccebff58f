"""The console summary folds hosts like summary.md: 2,000 unreachable hosts are one line."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from healthcheck.cli.console import group_lines, summary_lines
from healthcheck.cli.main import main
from healthcheck.core.model import Finding, Host, HostCollection, Status
from healthcheck.run.stages import reachability_finding
from healthcheck.store.results import HostResult, RunResults, write_results


def unreachable(name: str, error: str) -> HostResult:
    collection = HostCollection(host=name, results={}, transport_error=error)
    return HostResult(name=name, findings=[reachability_finding(Host(name), collection, "ssh")])


def fleet() -> RunResults:
    hosts = {f"gpu{i:04d}": unreachable(f"gpu{i:04d}", f"connection refused by root@gpu{i:04d}:22 (no sshd "
                                                         "listening?)") for i in range(1, 2001)}
    for i in (2001, 2002, 2005):
        name = f"gpu{i:04d}"
        hosts[name] = unreachable(name, f"authentication failed for ops@10.0.{i // 256}.{i % 256}:22: "
                                        "Authentication failed.")
    hosts["gpu2003"] = HostResult(name="gpu2003", findings=[
        Finding(host="gpu2003", check="gpu.count", status=Status.FAIL, value=7, expected=8, unit="GPUs",
                message="7 GPUs visible, expected 8")])
    hosts["gpu2004"] = HostResult(name="gpu2004", findings=[
        Finding(host="gpu2004", check="gpu.count", status=Status.FAIL, value=6, expected=8, unit="GPUs",
                message="6 GPUs visible, expected 8")])
    return RunResults(run={"id": "r"}, hosts=hosts)


def test_two_thousand_unreachable_hosts_are_one_line_grouped_by_message_worst_first():
    assert group_lines(fleet().findings()) == [
        "FAIL  gpu.count gpu[2003-2004] (2): 7 GPUs visible, expected 8 (+1 similar)",
        "ERROR host.reachable gpu[0001-2000] (2000): gpu0001: connection refused by root@gpu0001:22 "
        "(no sshd listening?) (+1999 similar)",
        "ERROR host.reachable gpu[2001-2002,2005] (3): gpu2001: authentication failed for ops@10.0.7.209:22: "
        "Authentication failed. (+2 similar)"]


def test_summary_is_short_and_verbose_lists_hosts(tmp_path):
    results = fleet()
    lines = summary_lines(results, tmp_path)
    assert lines[0] == "verdict FAIL: 2005 hosts  ERROR 2003  FAIL 2"
    assert len(lines) == 5 and lines[-1] == f"run directory: {tmp_path}"
    verbose = summary_lines(results, tmp_path, verbose=True)
    assert "  gpu1999          ERROR host.reachable" in "\n".join(verbose)
    assert len(verbose) == 5 + 2005


def test_groups_beyond_the_limit_are_counted(tmp_path):
    findings = [Finding(host="n1", check=f"x.check{i}", status=Status.FAIL, message="bad") for i in range(30)]
    lines = group_lines(findings, limit=25)
    assert len(lines) == 26 and lines[-1].startswith("... and 5 more groups")


def test_results_command_folds_and_v_lists(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_results(run_dir, fleet())
    folded = CliRunner().invoke(main, ["results", str(run_dir)])
    assert folded.exit_code == 1 and len(folded.output.splitlines()) == 5
    listed = CliRunner().invoke(main, ["results", str(run_dir), "-v"])
    assert len(listed.output.splitlines()) == 5 + 2005
    assert Path(run_dir / "results.json").is_file()
