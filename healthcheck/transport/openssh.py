"""SSH transport through the system ``ssh`` binary (``--ssh-client openssh``): one exec per host, the same
framed script on stdin, the same host-key policy and the same findings as the paramiko client.

    transport = OpensshTransport(ssh_config_path=Path("cluster_config"), accept_new_host_keys=False)
    collection = transport.collect(host, commands, deadline_s=300)
    transport.close()                       # ends the ControlPersist masters and removes their sockets

For sites that need what only OpenSSH does: Kerberos/GSSAPI, FIDO (``sk-*``) keys, certificates and
``@cert-authority``, ``Match exec``, ``CanonicalizeHostname``, ``KnownHostsCommand``. Each host runs
``ssh -T -o BatchMode=yes -o StrictHostKeyChecking=yes|accept-new -o ControlMaster=auto
-o ControlPath=<private dir>/%C -o ControlPersist=30 [-F cfg] [-o HostName=addr -p port -l user] --
<host> sh -s``: the control sockets live in a 0700 temporary folder of this process; a second command
to the same host (benchmarks, drain) reuses the authenticated master. Keepalives
(``ServerAliveInterval``/``CountMax``) and ``ConnectTimeout`` are added only when ssh_config does not set
them, so ssh_config wins as it does with the paramiko client.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import CommandResult, Host, HostCollection
from healthcheck.transport.process import pipe_reader, stop_group
from healthcheck.transport.registry import TransportSettings, register
from healthcheck.transport.script import Command, build_script, new_marker
from healthcheck.transport.sshconfig import SshConfig, SshConfigError, load_ssh_config, lookup
from healthcheck.transport.stream import host_failure, read_framed

# ssh's stderr on a failed connection -> the one-line reason the paramiko client would give
_REASONS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"REMOTE HOST IDENTIFICATION HAS CHANGED"), "HOST KEY CHANGED for {where} ({detail}): possible "
     "man-in-the-middle or reinstalled node; verify and update known_hosts"),
    (re.compile(r"host key for .* has changed|Host key for .* has changed"), "HOST KEY CHANGED for {where} "
     "({detail}): verify and update known_hosts"),
    (re.compile(r"No \S+ host key is known|Host key verification failed"), "host key refused for {where}: "
     "not in known_hosts ({detail}); verify it and add it (ssh-keyscan), or pass --accept-new-host-keys"),
    (re.compile(r"Permission denied"), "authentication failed for {where}: {detail}"),
    (re.compile(r"Connection refused"), "connection refused by {where} (no sshd listening?)"),
    (re.compile(r"Connection timed out|Operation timed out|timed out during banner"), "connect timeout to {where}"),
    (re.compile(r"Timeout, server .* not responding"), "connection to {where} lost: no answer to keepalives "
     "(ServerAliveInterval/ServerAliveCountMax)"),
    (re.compile(r"Could not resolve hostname"), "cannot resolve {where}: {detail}"),
)
_FINGERPRINT = re.compile(r"SHA256:[A-Za-z0-9+/]{43}")


def describe_openssh_failure(stderr: str, where: str) -> str:
    """The reason in ``ssh``'s stderr, worded as the paramiko client words it (fingerprints kept)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip() and not line.startswith("@")]
    detail = "; ".join(lines[-2:])[-300:] or "ssh exited 255 without a message"
    prints = _FINGERPRINT.findall(stderr)
    for pattern, template in _REASONS:
        if pattern.search(stderr):
            shown = f"the host sent {prints[0]}" if prints and "CHANGED" in template else detail
            return template.format(where=where, detail=shown)
    return f"ssh to {where} failed: {detail}"


class OpensshTransport:
    name = "ssh"

    def __init__(self, ssh_config_path: Path | None = None, accept_new_host_keys: bool = False,
                 connect_timeout_s: float = DEFAULTS.connect_timeout_s, cap: int = DEFAULTS.output_cap_bytes,
                 kill_after_s: float = DEFAULTS.kill_after_s, ssh_binary: str | None = None,
                 control_persist_s: int = 30) -> None:
        binary = ssh_binary or shutil.which("ssh")
        if binary is None:
            raise FileNotFoundError("--ssh-client openssh needs the OpenSSH client (ssh) on PATH")
        self.binary = binary
        self.config_path = Path(ssh_config_path).expanduser() if ssh_config_path else None
        try:  # only to see which keys ssh_config sets; ssh itself reads the file
            self.config: SshConfig = load_ssh_config(ssh_config_path)
        except SshConfigError:
            self.config = SshConfig()
        self.accept_new = accept_new_host_keys
        self.connect_timeout_s = connect_timeout_s
        self.cap = cap
        self.kill_after_s = kill_after_s
        self.control_persist_s = control_persist_s
        base = tempfile.gettempdir() if len(tempfile.gettempdir()) < 40 else "/tmp"
        self.control_dir = Path(tempfile.mkdtemp(prefix="hc-ssh-", dir=base))  # 0700: ours alone
        self._closed = threading.Event()
        atexit.register(self.close)

    def argv(self, host: Host) -> list[str]:
        """The ssh command line for ``host`` (no shell involved; the host name follows ``--``)."""
        try:
            configured = set(lookup(self.config, host.name, host.user))
        except SshConfigError:  # a Match OpenSSH evaluates itself: keep our defaults out of its way
            configured = {"connecttimeout", "serveraliveinterval", "serveralivecountmax"}
        argv = [self.binary, "-T", "-o", "BatchMode=yes",
                "-o", f"StrictHostKeyChecking={'accept-new' if self.accept_new else 'yes'}",
                "-o", "ControlMaster=auto", "-o", f"ControlPath={self.control_dir}/%C",
                "-o", f"ControlPersist={self.control_persist_s}"]
        if self.config_path is not None:
            argv[1:1] = ["-F", str(self.config_path)]
        defaults = {"connecttimeout": f"ConnectTimeout={max(1, round(self.connect_timeout_s))}",
                    "serveraliveinterval": f"ServerAliveInterval={DEFAULTS.server_alive_interval_s:g}",
                    "serveralivecountmax": f"ServerAliveCountMax={DEFAULTS.server_alive_count_max}"}
        for key, option in defaults.items():
            if key not in configured:
                argv += ["-o", option]
        if host.address:
            argv += ["-o", f"HostName={host.address}"]
        if host.port:
            argv += ["-p", str(int(host.port))]
        if host.user:
            argv += ["-l", host.user]
        return [*argv, "--", host.name, "sh -s"]

    def collect(self, host: Host, commands: Sequence[Command], deadline_s: float) -> HostCollection:
        if self._closed.is_set():
            return host_failure(host.name, commands, "ssh transport already closed")
        marker = new_marker()
        script = build_script(commands, marker, self.cap, self.kill_after_s).encode()
        with tempfile.TemporaryFile() as err:
            try:
                proc = subprocess.Popen(self.argv(host), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=err, start_new_session=True)
            except OSError as exc:
                return host_failure(host.name, commands, f"cannot start {self.binary}: {exc}")
            feeder = threading.Thread(target=_feed, args=(proc, script), daemon=True)
            feeder.start()
            try:
                collection = read_framed(host.name, commands, marker, pipe_reader(proc), deadline_s,
                                         byte_limit=2 * self.cap * max(1, len(commands)) + (1 << 20),
                                         stderr_tail=lambda: _tail(err))
            finally:
                stop_group(proc, grace_s=2.0, linger_s=2.0)
                feeder.join(timeout=5)
            if proc.returncode == 255 and not any(r.rc is not None for r in collection.results.values()):
                return host_failure(host.name, commands, describe_openssh_failure(
                    _tail(err).decode("utf-8", errors="replace"), _where(host)), collection.duration_s)
            return collection

    def run(self, host: Host, command: str, timeout_s: float, command_id: str = "adhoc") -> CommandResult:
        collection = self.collect(host, [Command(command_id, command, timeout_s)],
                                  deadline_s=timeout_s + self.kill_after_s + self.connect_timeout_s + 10)
        return collection.results[command_id]

    def close(self) -> None:
        """Stop the masters this transport started (``ssh -O exit`` per control socket), remove the folder."""
        if self._closed.is_set():
            return
        self._closed.set()
        for sock in sorted(self.control_dir.glob("*")):
            subprocess.run([self.binary, "-o", f"ControlPath={sock}", "-O", "exit", "healthcheck-master"],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           timeout=10, check=False)
        shutil.rmtree(self.control_dir, ignore_errors=True)


def _where(host: Host) -> str:
    target = f"{host.user}@{host.name}" if host.user else host.name
    return f"{target} ({host.address}:{host.port or 22})" if host.address else target


def _feed(proc: subprocess.Popen[bytes], script: bytes) -> None:
    """Write the script to ssh's stdin and close it (a thread: ssh reads only once it is connected)."""
    assert proc.stdin is not None
    try:
        proc.stdin.write(script)
        proc.stdin.close()
    except (BrokenPipeError, OSError, ValueError):
        pass


def _tail(err: tempfile._TemporaryFileWrapper) -> bytes:  # type: ignore[type-arg]
    try:
        size = os.fstat(err.fileno()).st_size
        err.seek(max(0, size - 4096))
        return err.read()
    except (OSError, ValueError):
        return b""


@register("openssh")
def open_openssh(settings: TransportSettings) -> OpensshTransport:
    return OpensshTransport(settings.ssh_config, accept_new_host_keys=settings.accept_new_host_keys,
                            connect_timeout_s=settings.connect_timeout_s, cap=settings.cap)
