"""The console summary folds hosts like summary.md: 2,000 unreachable hosts are one line."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from healthcheck.cli.console import group_lines, rerun_lines, summary_lines
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


def _unknown_key(i: int, fingerprint: str) -> Finding:
    # describe_ssh_error's line for an unknown host key (healthcheck/transport/sshkeys.py), per host
    return Finding(host=f"node{i:03d}", check="host.reachable", status=Status.ERROR,
                   message=f"node{i:03d}: host key refused for root@10.1.0.{i}:22: host key for node{i:03d} is not "
                           f"in known_hosts (ssh-ed25519 SHA256:{fingerprint}); verify it and add it (ssh-keyscan), "
                           "or pass --accept-new-host-keys")


def test_host_key_failures_differing_only_in_the_fingerprint_fold_into_one_line():
    findings = [_unknown_key(1, "9xDaPvghgtG+xpCtL17zCrobxXHYE5B6zoWlVqiCFiE"),
                _unknown_key(2, "oowImBcN56ozDVgd4MlDaZZ1xXi9az0v9l6c3QcHC8s"),
                _unknown_key(3, "Zm9vYmFyYmF6cXV4eHl6enl4d3ZldWRjYmEwMTIzNDU")]
    assert group_lines(findings) == [
        "ERROR host.reachable node[001-003] (3): node001: host key refused for root@10.1.0.1:22: host key for node001 "
        "is not in known_hosts (ssh-ed25519 SHA256:9xDaPvghgtG+xpCtL17zCrobxXHYE5B6zoWlVqiCFiE); verify it and add "
        "it (ssh-keyscan), or pass --accept-new-host-keys (+2 similar)"]


def test_per_gpu_findings_of_a_wrong_profile_fold_their_components():
    findings = [Finding(host=f"gpu{h:02d}", check="gpu.model", status=Status.FAIL, component=f"gpu{i}",
                        message=f"gpu{i} (00000000:{0x19 + 0x1C * i:02X}:00.0): gpu model NVIDIA H100 80GB HBM3, "
                                "expected matches A100-SXM4-80GB")
                for h in (1, 2) for i in range(8)]
    assert group_lines(findings) == [
        "FAIL  gpu.model gpu[0-7] gpu[01-02] (2): gpu0 (00000000:19:00.0): gpu model NVIDIA H100 80GB HBM3, expected "
        "matches A100-SXM4-80GB (+7 similar)"]


def test_warn_reasons_are_shown_after_the_failures():
    findings = [Finding(host=f"node{i:03d}", check="system.hostname", status=Status.WARN,
                        message=f"node reports hostname 'vm', inventory calls it 'node{i:03d}'") for i in range(1, 9)]
    findings += [Finding(host="node003", check="gpu.count", status=Status.FAIL, message="7 GPUs visible, expected 8")]
    findings += [Finding(host="node001", check=f"x.warn{i}", status=Status.WARN, message="w") for i in range(12)]
    lines = group_lines(findings, limit=25, warn_limit=2)
    assert lines == ["FAIL  gpu.count node003 (1): 7 GPUs visible, expected 8",
                     "WARN  system.hostname node[001-008] (8): node reports hostname 'vm', inventory calls it "
                     "'node001' (+7 similar)",
                     "WARN  x.warn0 node001 (1): w",
                     "... and 11 more groups (summary.md, report.html; -v lists hosts)"]


def test_rerun_states_fold_per_change():
    hosts = {f"node{i:03d}": {"was": "FAIL", "now": "FAIL"} for i in range(1, 9)}
    hosts["node009"] = {"was": "ERROR", "now": "PASS"}
    hosts["node010"] = {"was": "ERROR", "now": None}
    assert rerun_lines({"of": "r1", "hosts": hosts}) == ["rerun of r1:", "  was FAIL, now FAIL: node[001-008] (8)",
                                                         "  was ERROR, now PASS: node009 (1)",
                                                         "  was ERROR, now not swept: node010 (1)"]


def test_sweep_changes_fold_hosts_that_changed_alike(capsys):
    from healthcheck.cli.sweep import print_changes
    from healthcheck.ops.nightly import SweepRecord

    new = [{"host": f"gpu{i:03d}", "verdict": "FAIL", "was": "PASS", "checks": ["gpu.pcie.width"]}
           for i in range(1, 301)]
    new.append({"host": "gpu400", "verdict": "ERROR", "was": "PASS", "checks": ["host.reachable"]})
    growth = [Finding(host=f"gpu{i:03d}", check="history.counter.growth", status=Status.WARN, component="gpu0",
                      message=f"gpu.ecc.aggregate.dram_correctable gpu0 grew by {i} since run r1 (was 1, now {i + 1})")
              for i in range(1, 4)]
    changes = {"previous_run": "r1", "new_failures": new, "still_failing": [],
               "recovered": [{"host": "gpu003", "verdict": "PASS", "was": "FAIL", "checks": ["gpu.pcie.width"]}]}
    print_changes(SweepRecord(run_id="r2", seq=2, changes=changes, trends={}, findings=growth))
    assert capsys.readouterr().out.splitlines() == [
        "since r1: 301 new failure(s), 1 recovered, 0 still failing",
        "  NEW       gpu[001-300] (300) FAIL  gpu.pcie.width",
        "  NEW       gpu400 (1) ERROR host.reachable",
        "  RECOVERED gpu003 (1) PASS  gpu.pcie.width",
        "  WARN  history.counter.growth gpu0 gpu[001-003] (3): gpu.ecc.aggregate.dram_correctable gpu0 grew by 1 "
        "since run r1 (was 1, now 2) (+2 similar)"]


def test_a_message_that_lists_hosts_folds_on_the_hosts_it_names_too():
    """The fleet majority's WARN lists the hosts that differ: the hosts it names fold like the others."""
    differing = [f"gpu{i:05d}" for i in (8, 39, 70)] + [f"gpu{i:05d}" for i in (101, 132)]
    findings = [Finding(host=h, check="fleet.version.kernel", status=Status.WARN,
                        message="kernel 5.15.0-1061-nvidia differs from the fleet majority 5.15.0-1053-nvidia "
                                f"(95 of 100 hosts; differing: {', '.join(differing)})")
                for h in differing]
    findings += [Finding(host="gpu00001", check="gpu.count", status=Status.PASS, message="8 GPUs")]
    assert group_lines(findings) == [
        "WARN  fleet.version.kernel gpu[00008,00039,00070,00101,00132] (5): kernel 5.15.0-1061-nvidia differs from "
        "the fleet majority 5.15.0-1053-nvidia (95 of 100 hosts; differing: gpu00008, gpu00039, gpu00070, gpu00101, "
        "gpu00132)"]


def test_a_nodeset_that_does_not_fold_is_cut_on_its_line_and_counted():
    """250 hosts one in four apart (a quarter of a fleet failing alike) stay one readable line."""
    findings = [Finding(host=f"gpu{i:05d}", check="gpu.pcie.width", status=Status.FAIL, component="gpu5",
                        message="gpu5: 8 lanes, expected 16") for i in range(3, 1000, 4)]
    [line] = group_lines(findings)
    assert line == ("FAIL  gpu.pcie.width gpu5 gpu[00003,00007,00011,00015,00019,00023,00027,00031,00035,00039,"
                    "00043,…] (250): gpu5: 8 lanes, expected 16")
