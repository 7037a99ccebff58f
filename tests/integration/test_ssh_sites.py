"""SSH as sites configure it, over real sshd test hosts: Include, ProxyCommand, multi-hop ProxyJump,
bastions at OpenSSH's default MaxStartups, keepalives, the script on stdin, SHA256 fingerprints."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from healthcheck.store.results import expanded_document

pytestmark = pytest.mark.sshd


def _run(args: list[str], run_dir: Path, timeout: float = 300) -> tuple[int, dict, str]:
    proc = subprocess.run([sys.executable, "-m", "healthcheck", "run", "--run-dir", str(run_dir),
                           "--probes", "system", "--profile", "h100-sxm5-8x", *args],
                          capture_output=True, text=True, timeout=timeout)
    results_file = run_dir / "results.json"
    results = expanded_document(run_dir) if results_file.is_file() else {}
    return proc.returncode, results, proc.stdout + proc.stderr


def _finding(results: dict, host: str, check: str) -> dict:
    return next(f for f in results["hosts"][host]["findings"] if f["check"] == check)


def _block(cluster, h, *extra: str) -> str:
    return "\n".join([f"Host {h.name}", f"  HostName {h.address}", f"  Port {h.port}", f"  User {cluster.user}",
                      f"  IdentityFile {cluster.client_key}", "  IdentitiesOnly yes",
                      f"  UserKnownHostsFile {cluster.known_hosts}", *extra]) + "\n"


def test_include_carries_hosts_users_and_proxyjump(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(3)
    a, b, c = cluster.hosts
    included = tmp_path / "conf.d" / "cluster.conf"
    included.parent.mkdir()
    included.write_text(_block(cluster, a) + _block(cluster, b) + _block(cluster, c, "  ProxyJump node01"))
    config = tmp_path / "ssh_config"
    config.write_text(f"Include {tmp_path}/conf.d/*.conf\n")
    rc, results, out = _run(["--hosts", "node[02-03]", "-F", str(config)], tmp_path / "run")
    assert rc == 0, out
    assert _finding(results, "node03", "system.hostname")["value"] == "node03"
    assert (a.connections(), a.sessions()) == (1, 0)  # the included ProxyJump was used
    assert (c.connections(), c.sessions()) == (1, 1)


def test_multi_hop_proxyjump_goes_through_every_hop(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(3)
    a, b, c = cluster.hosts
    config = tmp_path / "ssh_config"
    config.write_text(_block(cluster, a) + _block(cluster, b) + _block(cluster, c, "  ProxyJump node01,node02"))
    rc, _results, out = _run(["--hosts", "node03", "-F", str(config)], tmp_path / "run")
    assert rc == 0, out
    assert (a.connections(), a.sessions()) == (1, 0)
    assert (b.connections(), b.sessions()) == (1, 0)  # second hop reached through the first
    assert (c.connections(), c.sessions()) == (1, 1)


def test_proxycommand_runs_through_a_shell_with_quoted_tokens(ssh_cluster_factory, tmp_path):
    ssh = shutil.which("ssh")
    if ssh is None:
        pytest.skip("OpenSSH client not installed")
    cluster = ssh_cluster_factory(2)
    a, b = cluster.hosts
    config = tmp_path / "ssh_config"
    config.write_text(_block(cluster, a) + _block(
        cluster, b, f"  ProxyCommand {ssh} -F {config} -o BatchMode=yes -W %h:%p node01 2>/dev/null"))
    rc, results, out = _run(["--hosts", "node02", "-F", str(config)], tmp_path / "run")
    assert rc == 0, out
    assert _finding(results, "node02", "system.hostname")["value"] == "node02"
    assert (a.connections(), a.sessions()) == (1, 0)  # the ProxyCommand's ssh -W went through node01


def _behind_bastion(tmp_path: Path, bastion_cluster, targets) -> Path:
    """An ssh_config putting every target behind the one host of ``bastion_cluster`` (ProxyJump)."""
    bastion = bastion_cluster.hosts[0]
    known = tmp_path / "known_hosts"
    known.write_text(bastion_cluster.known_hosts.read_text() + targets.known_hosts.read_text())
    lines = [f"Host bastion\n  HostName {bastion.address}\n  Port {bastion.port}\n"
             f"  IdentityFile {bastion_cluster.client_key}\n"]
    lines += [f"Host {h.name}\n  HostName {h.address}\n  Port {h.port}\n  ProxyJump bastion\n" for h in targets.hosts]
    lines.append(f"Host *\n  User {targets.user}\n  IdentityFile {targets.client_key}\n  IdentitiesOnly yes\n"
                 f"  UserKnownHostsFile {known}\n")
    config = tmp_path / "ssh_config"
    config.write_text("".join(lines))
    return config


def test_bastion_at_default_maxstartups_loses_no_host(ssh_cluster_factory, tmp_path):
    """100 targets behind one bastion sshd left at MaxStartups 10:30:100, 64 forks: all reached, one
    bastion connection, and never a message after a channel's CLOSE (before sshchannel.py, a loaded
    run lost most hosts when the bastion dropped the connection over one)."""
    bastion_cluster = ssh_cluster_factory(1, names=["bastion"], first_octet=1, max_startups=None)
    targets = ssh_cluster_factory(100, names=[f"t{i:03d}" for i in range(100)], first_octet=10)
    bastion = bastion_cluster.hosts[0]
    assert "MaxStartups" not in (bastion.root / "sshd_config").read_text()
    config = _behind_bastion(tmp_path, bastion_cluster, targets)
    rc, results, out = _run(["--hosts", "t[000-099]", "-F", str(config), "--forks", "64"], tmp_path / "run",
                            timeout=600)
    lost = {n: _finding(results, n, "host.reachable")["message"] for n, h in results.get("hosts", {}).items()
            if h["verdict"] != "PASS"}
    bastion_log = bastion.log.read_text(errors="replace")
    assert "nonexistent channel" not in bastion_log, bastion_log[-2000:]  # a send after CLOSE (sshchannel.py)
    assert rc == 0 and not lost, (lost, out[-2000:])
    assert "Traceback" not in out, out[-4000:]
    assert len(results["hosts"]) == 100
    assert bastion.connections() == 1 and bastion.sessions() == 0
    assert all(h.sessions() == 1 for h in targets.hosts)


def test_hosts_still_handshaking_when_the_bastion_connection_dies_go_through_a_new_one(ssh_cluster_factory,
                                                                                    tmp_path):
    """t1 is running its script and t2 is waiting for its sshd's banner (SIGSTOPped) when the bastion's
    connection process is killed: t1 is lost with the reason, t2 goes through a renewed connection."""
    bastion_cluster = ssh_cluster_factory(1, names=["bastion"], first_octet=1)
    targets = ssh_cluster_factory(2, names=["t1", "t2"], first_octet=10)
    bastion, (t1, t2) = bastion_cluster.hosts[0], targets.hosts
    started, release = tmp_path / "t1-uname-started", tmp_path / "t1-release"
    shim = t1.bindir / "uname"
    shim.write_text(f"#!/bin/sh\ntouch {started}\ni=0\nwhile [ ! -e {release} ] && [ $i -lt 300 ]; do "
                    f"sleep 0.1; i=$((i+1)); done\necho 6.1.0\n")
    shim.chmod(0o755)
    config = _behind_bastion(tmp_path, bastion_cluster, targets)
    os.kill(t2.proc.pid, signal.SIGSTOP)  # t2's sshd accepts nothing: its handshake waits for the banner
    proc = subprocess.Popen([sys.executable, "-m", "healthcheck", "run", "--hosts", "t[1-2]", "-F", str(config),
                             "--run-dir", str(tmp_path / "run"), "--probes", "system", "--profile", "h100-sxm5-8x",
                             "--connect-timeout", "30", "--timeout", "120"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not started.exists():
            time.sleep(0.1)
        assert started.exists(), "t1's script never reached uname"
        time.sleep(1.0)  # t2's channel through the bastion is open and its handshake waiting
        for pid in _descendants(bastion.proc.pid):  # the bastion's per-connection sshd processes
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    finally:
        os.kill(t2.proc.pid, signal.SIGCONT)
        release.touch()
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    results = expanded_document(tmp_path / "run")
    assert results["hosts"]["t2"]["verdict"] == "PASS", (_finding(results, "t2", "host.reachable"), out[-2000:])
    lost = _finding(results, "t1", "host.reachable")
    assert lost["status"] == "ERROR" and "while running uname" in lost["message"], lost
    assert "Traceback" not in out, out[-4000:]
    assert bastion.connections() == 2 and t2.sessions() == 1


def test_refusing_bastion_is_named(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(2)
    a, b = cluster.hosts
    config = tmp_path / "ssh_config"
    config.write_text("Host node01\n  User nobody-here\n" + _block(cluster, a)
                      + _block(cluster, b, "  ProxyJump node01"))
    rc, results, _ = _run(["--hosts", "node02", "-F", str(config), "--connect-timeout", "5"], tmp_path / "run")
    message = _finding(results, "node02", "host.reachable")["message"]
    assert rc == 1 and message == (f"node02: via bastion node01: authentication failed for "
                                   f"nobody-here@{a.address}:{a.port}: Authentication failed."), message
    assert b.connections() == 0


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def test_keepalives_end_a_host_whose_peer_went_silent(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(2)
    started = tmp_path / "uname-started"
    for h in cluster.hosts:
        shim = h.bindir / "uname"
        shim.write_text(f"#!/bin/sh\ntouch {started}.{h.name}\nsleep 6\necho 6.1.0\n")
        shim.chmod(0o755)
    # node02 stays silent for 6 s: were its keepalive replies not counted, 4 unanswered would end it at 5 s
    cluster.write_ssh_config(extra={"node01": ["  ServerAliveInterval 1", "  ServerAliveCountMax 2"],
                                    "node02": ["  ServerAliveInterval 1", "  ServerAliveCountMax 4"]})
    proc = subprocess.Popen([sys.executable, "-m", "healthcheck", "run", "--hosts", "node[01-02]", "-F",
                             str(cluster.ssh_config), "--run-dir", str(tmp_path / "run"), "--probes", "system",
                             "--profile", "h100-sxm5-8x", "--timeout", "120"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    frozen: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not Path(f"{started}.node01").exists():
            time.sleep(0.1)
        frozen = _descendants(cluster.hosts[0].proc.pid)  # node01's session: sshd, shell, sleep
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        assert proc.wait(timeout=60) == 1
    finally:
        for pid in frozen:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        if proc.poll() is None:
            proc.kill()
    results = expanded_document(tmp_path / "run")
    message = _finding(results, "node01", "host.reachable")["message"]
    assert "no answer to 2 keepalives 1s apart" in message, message
    assert _finding(results, "node01", "system.hostname")["status"] == "PASS"  # sections already received
    assert results["hosts"]["node02"]["verdict"] == "PASS"  # silent 6 s, but answering keepalives


def test_script_goes_on_stdin_so_the_marker_is_not_in_argv(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(1)
    seen = tmp_path / "argv.txt"
    shim = cluster.hosts[0].bindir / "hostname"
    shim.write_text("#!/bin/sh\npid=$$\nwhile [ \"$pid\" -gt 1 ]; do\n"
                    f"  tr '\\0' ' ' </proc/$pid/cmdline >>{seen}; echo >>{seen}\n"
                    "  pid=$(awk '{print $4}' /proc/$pid/stat)\ndone\n"
                    "echo node01\n")
    shim.chmod(0o755)
    rc, _results, out = _run(["--hosts", "node01", "-F", str(cluster.ssh_config)], tmp_path / "run")
    assert rc == 0, out
    argv = seen.read_text()
    assert "sh -s" in argv and "@@HC-" not in argv, argv
    assert (tmp_path / "run" / "raw" / "node01" / "hostname.out").read_text() == "node01\n"


def test_unknown_and_changed_keys_show_sha256_fingerprints(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(2)
    keygen = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"

    def fp(h) -> str:
        return subprocess.run([keygen, "-l", "-E", "sha256", "-f", str(h.root / "ssh_host_ed25519_key.pub")],
                              capture_output=True, text=True, check=True).stdout.split()[1]

    a, b = cluster.hosts
    cluster.known_hosts.write_text(f"[{b.address}]:{b.port} " + " ".join(a.host_key_line.split()[1:]) + "\n")
    rc, results, _ = _run(["--hosts", "node[01-02]", "-F", str(cluster.ssh_config)], tmp_path / "run")
    assert rc == 1
    unknown = _finding(results, "node01", "host.reachable")["message"]
    changed = _finding(results, "node02", "host.reachable")["message"]
    assert f"ssh-ed25519 {fp(a)}" in unknown and "not in known_hosts" in unknown
    assert f"known_hosts has ssh-ed25519 {fp(a)}, the host sent ssh-ed25519 {fp(b)}" in changed


def test_hostkeyalias_and_global_known_hosts_file(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(1)
    node = cluster.hosts[0]
    (tmp_path / "empty").write_text("")
    global_file = tmp_path / "ssh_known_hosts"
    global_file.write_text("node01-key " + " ".join(node.host_key_line.split()[1:]) + "\n")
    config = tmp_path / "ssh_config"
    config.write_text("\n".join([
        "Host node01", f"  HostName {node.address}", f"  Port {node.port}", f"  User {cluster.user}",
        f"  IdentityFile {cluster.client_key}", f"  UserKnownHostsFile {tmp_path}/empty",
        f"  GlobalKnownHostsFile {global_file}", "  HostKeyAlias node01-key"]) + "\n")
    rc, _results, out = _run(["--hosts", "node01", "-F", str(config)], tmp_path / "run")
    assert rc == 0, out  # the key is only known under the alias, and only in the global file
    assert (tmp_path / "empty").read_text() == ""


def test_match_exec_is_refused_by_paramiko_and_honoured_by_openssh(ssh_cluster_factory, tmp_path):
    if shutil.which("ssh") is None:
        pytest.skip("OpenSSH client not installed")
    cluster = ssh_cluster_factory(2)
    a, b = cluster.hosts
    config = tmp_path / "ssh_config"
    config.write_text(f'Match originalhost node01 exec "test -d {tmp_path}"\n  Port {a.port}\n'
                      + _block(cluster, a).replace(f"  Port {a.port}\n", "  Port 1\n") + _block(cluster, b))
    rc, results, _ = _run(["--hosts", "node[01-02]", "-F", str(config)], tmp_path / "paramiko")
    message = _finding(results, "node01", "host.reachable")["message"]
    assert rc == 1 and f"{config}:1: 'Match exec' is only evaluated by OpenSSH" in message, message
    assert results["hosts"]["node02"]["verdict"] == "PASS"
    rc, results, out = _run(["--hosts", "node[01-02]", "-F", str(config), "--ssh-client", "openssh"],
                            tmp_path / "openssh")
    assert rc == 0, out  # OpenSSH ran the exec and took the Port from the Match block
