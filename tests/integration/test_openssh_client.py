"""``--ssh-client openssh``: the system ssh over the same sshd test hosts, same policy, same verdicts."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from healthcheck.core.model import Host
from healthcheck.store.results import expanded_document
from healthcheck.transport.openssh import OpensshTransport, describe_openssh_failure

pytestmark = [pytest.mark.sshd, pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client")]


def _run(inv: Path, cluster, run_dir: Path, *extra: str) -> tuple[int, dict, str]:
    proc = subprocess.run([sys.executable, "-m", "healthcheck", "run", "-i", str(inv), "-F", str(cluster.ssh_config),
                           "--run-dir", str(run_dir), "--probes", "system", "--connect-timeout", "5", *extra],
                          capture_output=True, text=True, timeout=300)
    results = expanded_document(run_dir) if (run_dir / "results.json").is_file() else {}
    return proc.returncode, results, proc.stdout + proc.stderr


def _finding(results: dict, host: str, check: str) -> dict:
    return next(f for f in results["hosts"][host]["findings"] if f["check"] == check)


def _verdicts(results: dict) -> dict[str, tuple[str, list[tuple[str, str]]]]:
    return {n: (h["verdict"], sorted((f["check"], f["status"]) for f in h["findings"]))
            for n, h in results["hosts"].items()}


def test_same_verdicts_as_paramiko(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(4)
    cluster.add_tool("node02", "hostname", "wrong-node\n")
    cluster.add_tool("node03", "uname", {"-r": ("", 0, 30)})
    inv = cluster.write_inventory(tmp_path / "inv.yaml", extra_hosts={
        "ghost": {"address": "127.0.1.250", "port": cluster.port}})
    rc_p, paramiko_run, out_p = _run(inv, cluster, tmp_path / "paramiko", "--timeout", "2")
    rc_o, openssh_run, out_o = _run(inv, cluster, tmp_path / "openssh", "--timeout", "2", "--ssh-client", "openssh")
    assert rc_p == rc_o == 1, (out_p, out_o)
    assert _verdicts(openssh_run) == _verdicts(paramiko_run)
    assert openssh_run["hosts"]["node01"]["verdict"] == "PASS"
    assert openssh_run["hosts"]["node02"]["verdict"] == "WARN"
    assert "connection refused" in _finding(openssh_run, "ghost", "host.reachable")["message"]
    assert "uname-r timed out" in " ".join(f["message"] for f in openssh_run["hosts"]["node03"]["findings"])
    assert cluster.hosts[0].sessions() == 2 and cluster.hosts[0].connections() == 2  # one per client run
    for name in ("node01", "node02"):
        assert (tmp_path / "openssh" / "raw" / name / "hostname.out").read_bytes() == \
               (tmp_path / "paramiko" / "raw" / name / "hostname.out").read_bytes()


def test_unknown_key_refused_then_accepted_changed_key_refused(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(2)
    a, b = cluster.hosts
    cluster.known_hosts.write_text(f"[{b.address}]:{b.port} " + " ".join(a.host_key_line.split()[1:]) + "\n")
    inv = cluster.write_inventory(tmp_path / "inv.yaml")
    rc, results, _ = _run(inv, cluster, tmp_path / "run1", "--ssh-client", "openssh")
    unknown = _finding(results, "node01", "host.reachable")["message"]
    changed = _finding(results, "node02", "host.reachable")["message"]
    assert rc == 1 and "host key refused" in unknown and "not in known_hosts" in unknown, unknown
    assert "HOST KEY CHANGED" in changed and "SHA256:" in changed, changed
    assert a.sessions() == 0 and b.sessions() == 0
    rc, results, _ = _run(inv, cluster, tmp_path / "run2", "--ssh-client", "openssh", "--accept-new-host-keys")
    assert results["hosts"]["node01"]["verdict"] == "PASS"
    assert "HOST KEY CHANGED" in _finding(results, "node02", "host.reachable")["message"]  # even with accept-new
    recorded = cluster.known_hosts.read_text()
    assert f"[{a.address}]:{a.port} ssh-ed25519 {a.host_key_line.split()[2]}" in recorded


def test_control_master_reused_and_stopped(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(1)
    node = cluster.hosts[0]
    transport = OpensshTransport(cluster.ssh_config)
    host = Host(name="node01", address=node.address, port=node.port)
    try:
        first = transport.run(host, "echo one", timeout_s=20)
        second = transport.run(host, "echo two", timeout_s=20)
        assert (first.stdout, second.stdout) == (b"one\n", b"two\n")
        assert node.connections() == 1 and node.sessions() == 2  # the second rode the master
        assert len(list(transport.control_dir.iterdir())) == 1
        assert transport.control_dir.stat().st_mode & 0o777 == 0o700
    finally:
        transport.close()
    assert not transport.control_dir.exists()


def test_argv_has_no_shell_and_ssh_config_wins(tmp_path):
    config = tmp_path / "cfg"
    config.write_text("Host gpu01\n  ServerAliveInterval 4\n")
    transport = OpensshTransport(config, accept_new_host_keys=True, ssh_binary="/usr/bin/ssh")
    try:
        argv = transport.argv(Host(name="gpu01", address="10.0.0.1;reboot", port=2222, user="ops"))
        assert argv[-3:] == ["--", "gpu01", "sh -s"]
        assert ["-F", str(config)] == argv[1:3] and "StrictHostKeyChecking=accept-new" in argv
        assert "HostName=10.0.0.1;reboot" in argv and argv[argv.index("-p") + 1] == "2222"
        assert not any(a.startswith("ServerAliveInterval") for a in argv)  # ssh_config sets it
        assert "ServerAliveCountMax=3" in argv and "BatchMode=yes" in argv
        other = transport.argv(Host(name="gpu02"))
        assert "ServerAliveInterval=15" in other and "-p" not in other
    finally:
        transport.close()


def test_failure_wording_matches_the_paramiko_client():
    assert describe_openssh_failure("ops@10.0.0.1: Permission denied (publickey).\n", "gpu01") == \
        "authentication failed for gpu01: ops@10.0.0.1: Permission denied (publickey)."
