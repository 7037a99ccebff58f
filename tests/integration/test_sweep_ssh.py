"""The spine end to end over real sshd test hosts: one exec per host, failures as findings."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from healthcheck.run.execute import execute_run
from healthcheck.run.options import OutputOptions, RunOptions, TargetOptions
from healthcheck.store.bundle import read_host
from healthcheck.store.findings_table import read_table
from healthcheck.store.results import expanded_document, load_results
from healthcheck.store.rundir import FindingsLog

pytestmark = pytest.mark.sshd


def _run(inv: Path, cluster, run_dir: Path, **kw) -> tuple[int, dict]:
    args = [sys.executable, "-m", "healthcheck", "run", "-i", str(inv), "-F", str(cluster.ssh_config),
            "--run-dir", str(run_dir), "--probes", kw.pop("probes", "system")]
    for key, value in kw.items():
        flag = "--" + key.replace("_", "-")
        args += [flag] if value is True else [flag, str(value)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    results = expanded_document(run_dir) if (run_dir / "results.json").is_file() else {}
    return proc.returncode, results


def _finding(results: dict, host: str, check: str) -> dict:
    return next(f for f in results["hosts"][host]["findings"] if f["check"] == check)


def test_sixteen_hosts_one_session_each(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(16)
    inv = cluster.write_inventory(tmp_path / "inv.yaml")
    rc, results = _run(inv, cluster, tmp_path / "run", forks=8)
    assert rc == 0, results["summary"]
    assert results["summary"]["hosts"] == 16
    assert results["summary"]["by_verdict"]["PASS"] == 16
    for host in cluster.hosts:
        assert _finding(results, host.name, "system.hostname")["value"] == host.name
        assert host.sessions() == 1 and host.connections() == 1
        raw = tmp_path / "run" / "raw" / host.name
        assert (raw / "hostname.out").read_text() == f"{host.name}\n"
        assert read_host(raw).results["uname-r"].rc == 0  # an exit code of 0 has no .rc file (rundir.py)
    assert not (tmp_path / "run" / "findings.jsonl").exists()  # the journal, once results.json is written
    assert sum(map(len, read_table(tmp_path / "run").values())) == sum(
        sum(h["counts"].values()) for h in results["hosts"].values())


def test_unreachable_and_auth_failure_are_errors_and_sweep_goes_on(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(2)
    inv = cluster.write_inventory(tmp_path / "inv.yaml", host_vars={"node02": {"user": "nobody-here"}},
                                  extra_hosts={"ghost": {"address": "127.0.1.250", "port": cluster.port}})
    rc, results = _run(inv, cluster, tmp_path / "run", connect_timeout=3)
    assert rc == 1
    assert results["hosts"]["node01"]["verdict"] == "PASS"
    ghost = _finding(results, "ghost", "host.reachable")
    assert ghost["status"] == "ERROR" and "connection refused" in ghost["message"]
    assert "127.0.1.250" in ghost["message"]
    auth = _finding(results, "node02", "host.reachable")
    assert auth["status"] == "ERROR" and "authentication failed" in auth["message"]
    assert json.loads((tmp_path / "run" / "raw" / "ghost" / "_host.json").read_text())["transport_error"]


def test_hung_command_times_out_and_later_hosts_finish(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(2)
    cluster.add_tool("node01", "uname", {"-r": ("", 0, 30)})  # hangs well past the timeout
    inv = cluster.write_inventory(tmp_path / "inv.yaml")
    rc, results = _run(inv, cluster, tmp_path / "run", timeout=2)
    assert rc == 1
    meta = json.loads((tmp_path / "run" / "raw" / "node01" / "_host.json").read_text())
    assert meta["commands"]["uname-r"]["timed_out"] is True and meta["commands"]["uname-r"]["timeout_s"] == 2
    assert (tmp_path / "run" / "raw" / "node01" / "uname-r.rc").read_text().strip() == "124"  # GNU timeout's
    assert meta["duration_s"] < 30  # the host was not held for the command's 30 s hang (no wall clock here)
    hung = _finding(results, "node01", "system.kernel")
    assert hung["status"] == "ERROR"
    collect = [f for f in results["hosts"]["node01"]["findings"] if f["check"] == "system.collect"]
    assert collect and "uname-r timed out" in collect[0]["message"]
    assert _finding(results, "node01", "system.hostname")["status"] == "PASS"
    assert results["hosts"]["node02"]["verdict"] == "PASS"


def test_host_deadline_keeps_finished_commands(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(1)
    cluster.add_tool("node01", "cat", {"/proc/uptime": ("", 0, 30)})
    inv = cluster.write_inventory(tmp_path / "inv.yaml")
    rc, results = _run(inv, cluster, tmp_path / "run", timeout=60, deadline=4)
    assert rc == 1
    reach = _finding(results, "node01", "host.reachable")
    assert reach["status"] == "ERROR" and "host deadline of 4s exceeded" in reach["message"]
    assert _finding(results, "node01", "system.hostname")["status"] == "PASS"


def test_changed_host_key_is_refused_without_opt_in(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(2)
    lines = cluster.known_hosts.read_text().splitlines()
    other = cluster.hosts[1].host_key_line.split()[1:]
    lines[0] = " ".join([lines[0].split()[0], *other])  # node01 now "expects" node02's key
    cluster.known_hosts.write_text("\n".join(lines) + "\n")
    inv = cluster.write_inventory(tmp_path / "inv.yaml")
    rc, results = _run(inv, cluster, tmp_path / "run", accept_new_host_keys=True)
    changed = _finding(results, "node01", "host.reachable")
    assert rc == 1 and changed["status"] == "ERROR" and "HOST KEY CHANGED" in changed["message"]
    assert cluster.hosts[0].sessions() == 0
    assert results["hosts"]["node02"]["verdict"] == "PASS"


def test_unknown_host_key_refused_then_accepted_with_opt_in(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(1)
    cluster.known_hosts.write_text("")
    inv = cluster.write_inventory(tmp_path / "inv.yaml")
    rc, results = _run(inv, cluster, tmp_path / "run1")
    unknown = _finding(results, "node01", "host.reachable")
    assert rc == 1 and "not in known_hosts" in unknown["message"]
    assert cluster.known_hosts.read_text() == ""
    rc, results = _run(inv, cluster, tmp_path / "run2", accept_new_host_keys=True)
    assert rc == 0
    recorded = cluster.known_hosts.read_text()
    assert recorded.startswith(f"[{cluster.hosts[0].address}]:{cluster.port} ssh-ed25519 ")
    assert recorded.split()[2] == cluster.hosts[0].host_key_line.split()[2]


def test_shell_metacharacters_in_names_and_vars_are_inert(ssh_cluster_factory, tmp_path):
    token = f"HCPWNED{os.getpid()}"
    evil = f"node;touch${{IFS}}{token}`touch${{IFS}}{token}`$(touch${{IFS}}{token})'\""
    cluster = ssh_cluster_factory(2, names=["node01", evil])
    inv = cluster.write_inventory(tmp_path / "inv.yaml", host_vars={
        "node01": {"extra": {"note": f"$(touch {tmp_path / token})"}}})
    rc, results = _run(inv, cluster, tmp_path / "run")
    canaries = [Path.home() / token, Path.cwd() / token, tmp_path / token, Path("/") / token]
    assert not any(c.exists() for c in canaries)
    assert rc == 0
    assert _finding(results, evil, "system.hostname")["value"] == evil
    assert (tmp_path / "run" / "raw" / evil / "hostname.out").is_file()


def test_output_cap_and_non_utf8_output(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(1)
    cluster.add_tool("node01", "uname", {"-r": (b"6.1.0-\xff\xfe-bad\n" + b"x" * 5000, 0)})
    inv = cluster.write_inventory(tmp_path / "inv.yaml")
    rc, results = _run(inv, cluster, tmp_path / "run", output_cap=2048)
    raw = tmp_path / "run" / "raw" / "node01"
    assert (raw / "uname-r.out").read_bytes() == (b"6.1.0-\xff\xfe-bad\n" + b"x" * 5000)[:2048]
    meta = json.loads((raw / "_host.json").read_text())
    assert meta["commands"]["uname-r"]["stdout_truncated"] is True
    kernel = _finding(results, "node01", "system.kernel")
    assert kernel["value"] == "6.1.0-\ufffd\ufffd-bad"
    assert rc == 0


def test_replay_of_a_run_gives_the_same_verdicts(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(3)
    inv = cluster.write_inventory(tmp_path / "inv.yaml", extra_hosts={
        "ghost": {"address": "127.0.1.251", "port": cluster.port}})
    cluster.add_tool("node02", "hostname", "wrong-node\n")
    _run(inv, cluster, tmp_path / "run", connect_timeout=3)
    for h in cluster.hosts:
        h.proc.terminate()  # no SSH at all from here on
    replay = execute_run(RunOptions(target=TargetOptions(replay=tmp_path / "run"),
                                    outputs=OutputOptions(run_dir=tmp_path / "replayed")))
    original = load_results(tmp_path / "run")
    assert {n: h.verdict for n, h in replay.results.hosts.items()} == \
           {n: h.verdict for n, h in original.hosts.items()}
    assert replay.results.hosts["node02"].verdict.value == "WARN"
    assert replay.results.hosts["ghost"].verdict.value == "ERROR"
    assert [f.message for f in replay.results.hosts["node02"].findings if f.check == "system.hostname"] == \
           ["node reports hostname 'wrong-node', inventory calls it 'node02'"]


def test_killed_orchestrator_keeps_completed_hosts(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(4)
    for h in cluster.hosts[2:]:
        cluster.add_tool(h.name, "uname", {"-r": ("", 0, 60)})
    inv = cluster.write_inventory(tmp_path / "inv.yaml")
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "healthcheck", "run", "-i", str(inv), "-F",
                             str(cluster.ssh_config), "--run-dir", str(run_dir), "--probes", "system",
                             "--timeout", "120"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    log = FindingsLog(run_dir)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and {f.host for f in log.read()} != {"node01", "node02"}:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    done = {f.host for f in log.read()}
    assert done == {"node01", "node02"}
    assert not (run_dir / "results.json").exists()
    assert (run_dir / "raw" / "node01" / "hostname.out").read_text() == "node01\n"


def test_ssh_config_user_port_identity_and_proxyjump(ssh_cluster_factory, tmp_path):
    """No address/port/user in the inventory: all of it, and the jump host, come from ssh_config."""
    cluster = ssh_cluster_factory(2)
    cluster.write_ssh_config(extra={"node02": ["  ProxyJump node01"]})
    inv = tmp_path / "inv.yaml"
    inv.write_text("hosts:\n  node02: {}\n")
    rc, results = _run(inv, cluster, tmp_path / "run")
    assert rc == 0, results
    assert _finding(results, "node02", "system.hostname")["value"] == "node02"
    jump, target = cluster.hosts
    assert (jump.connections(), jump.sessions()) == (1, 0)  # used only to forward the connection
    assert (target.connections(), target.sessions()) == (1, 1)


def test_dropped_connection_is_an_error_and_keeps_finished_commands(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(2)
    started = tmp_path / "uname-started"
    shim = cluster.host("node01").bindir / "uname"
    shim.write_text(f"#!/bin/sh\ntouch {started}\nsleep 20\n")  # hostname's section is out by then
    shim.chmod(0o755)
    inv = cluster.write_inventory(tmp_path / "inv.yaml")
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "healthcheck", "run", "-i", str(inv), "-F",
                             str(cluster.ssh_config), "--run-dir", str(run_dir), "--probes", "system"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    node01 = cluster.hosts[0]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not started.exists():
        time.sleep(0.1)
    time.sleep(0.5)  # let sshd forward the finished sections it already holds
    # Drop node01's connection: kill the per-connection sshd processes our test sshd forked.
    subprocess.run(["pkill", "-9", "-P", str(node01.proc.pid)], check=False)
    assert proc.wait(timeout=60) == 1
    results = expanded_document(run_dir)
    reach = _finding(results, "node01", "host.reachable")
    assert reach["status"] == "ERROR" and "ended before all commands reported" in reach["message"]
    assert "while running uname-r, for " in reach["message"]  # which command, and for how long
    assert _finding(results, "node01", "system.hostname")["status"] == "PASS"
    assert results["hosts"]["node02"]["verdict"] == "PASS"


def test_adhoc_hostlist_without_inventory(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(3)
    proc = subprocess.run([sys.executable, "-m", "healthcheck", "run", "--hosts", "node[01-03]", "-F",
                           str(cluster.ssh_config), "--run-dir", str(tmp_path / "run"), "--probes", "system",
                           "--profile", "h100-sxm5-8x"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = expanded_document(tmp_path / "run")
    assert sorted(results["hosts"]) == ["node01", "node02", "node03"]
    assert {h["profile"] for h in results["hosts"].values()} == {"h100-sxm5-8x"}


def test_ctrl_c_finishes_hosts_in_flight_and_writes_partial_results(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(4)
    for h in cluster.hosts:
        cluster.add_tool(h.name, "uname", {"-r": ("6.1.0\n", 0, 2)})
    inv = cluster.write_inventory(tmp_path / "inv.yaml")
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "healthcheck", "run", "-i", str(inv), "-F",
                             str(cluster.ssh_config), "--run-dir", str(run_dir), "--probes", "system",
                             "--forks", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = FindingsLog(run_dir)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not {f.host for f in log.read()}:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    results = expanded_document(run_dir)
    assert results["run"]["interrupted"] is True
    swept = [n for n, h in results["hosts"].items() if h["verdict"] == "PASS"]
    skipped = [n for n, h in results["hosts"].items()
               if [f["check"] for f in h["findings"]] == ["host.swept"]]
    assert swept and skipped and sorted(swept + skipped) == ["node01", "node02", "node03", "node04"]
    assert (run_dir / "report.html").is_file()
