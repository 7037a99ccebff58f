"""SSH transport (paramiko): one connection and ONE exec per host for all probes.

    transport = SshTransport(ssh_config=load_ssh_config(None), accept_new_host_keys=False)
    collection = transport.collect(host, commands, deadline_s=300)

Host keys are verified against the known_hosts files of the ssh_config (default
``~/.ssh/known_hosts``): an unknown key is refused, a changed key is refused; with
``accept_new_host_keys`` an unknown key is appended to the first user known_hosts file (like
OpenSSH's ``StrictHostKeyChecking=accept-new``) and a changed key is still refused.
"""

from __future__ import annotations

import shlex
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import paramiko

from healthcheck.defaults import DEFAULTS
from healthcheck.model import CommandResult, Host, HostCollection
from healthcheck.transport.script import Command, build_script, new_marker
from healthcheck.transport.sshconfig import ConnectSpec, parse_jump, resolve
from healthcheck.transport.stream import host_failure, read_framed

_KNOWN_HOSTS_LOCK = threading.Lock()


class HostKeyError(paramiko.SSHException):
    pass


class _RefuseUnknown(paramiko.MissingHostKeyPolicy):
    def missing_host_key(self, client, hostname, key):  # type: ignore[no-untyped-def]
        raise HostKeyError(
            f"host key for {hostname} is not in known_hosts ({key.get_name()} "
            f"{key.fingerprint if hasattr(key, 'fingerprint') else key.get_base64()[:16]}); verify it "
            "and add it (ssh-keyscan), or pass --accept-new-host-keys")


class _AcceptNew(paramiko.MissingHostKeyPolicy):
    def __init__(self, known_hosts: str) -> None:
        self.known_hosts = known_hosts

    def missing_host_key(self, client, hostname, key):  # type: ignore[no-untyped-def]
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        with _KNOWN_HOSTS_LOCK:
            path = Path(self.known_hosts)
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a") as fh:
                fh.write(line)
        client.get_host_keys().add(hostname, key.get_name(), key)


class SshTransport:
    name = "ssh"

    def __init__(self, ssh_config: paramiko.SSHConfig, accept_new_host_keys: bool = False,
                 connect_timeout_s: float = DEFAULTS.connect_timeout_s,
                 cap: int = DEFAULTS.output_cap_bytes, kill_after_s: float = DEFAULTS.kill_after_s):
        self.ssh_config = ssh_config
        self.accept_new = accept_new_host_keys
        self.connect_timeout_s = connect_timeout_s
        self.cap = cap
        self.kill_after_s = kill_after_s

    def collect(self, host: Host, commands: Sequence[Command], deadline_s: float) -> HostCollection:
        started = time.monotonic()
        spec = resolve(host, self.ssh_config)
        clients: list[paramiko.SSHClient] = []
        try:
            client = self._connect(spec, clients)
            marker = new_marker()
            script = build_script(commands, marker, self.cap, self.kill_after_s)
            channel = client.get_transport().open_session()  # type: ignore[union-attr]
            channel.exec_command("sh -c " + shlex.quote(script))
            return read_framed(host.name, commands, marker, _channel_reader(channel), deadline_s,
                               byte_limit=2 * self.cap * max(1, len(commands)) + (1 << 20),
                               stderr_tail=lambda: _drain_stderr(channel), started=started)
        except Exception as exc:  # every failure to reach a host is a result, not a crash
            return host_failure(host.name, commands, describe_ssh_error(exc, spec),
                                time.monotonic() - started)
        finally:
            for c in reversed(clients):
                c.close()

    def run(self, host: Host, command: str, timeout_s: float, command_id: str = "adhoc") -> CommandResult:
        collection = self.collect(host, [Command(command_id, command, timeout_s)],
                                  deadline_s=timeout_s + self.kill_after_s + self.connect_timeout_s + 10)
        return collection.results[command_id]

    def _connect(self, spec: ConnectSpec, clients: list[paramiko.SSHClient]) -> paramiko.SSHClient:
        sock = None
        if spec.proxy_jump and spec.proxy_jump.lower() != "none":
            sock = self._jump_channel(spec, clients)
        client = paramiko.SSHClient()
        clients.append(client)
        for path in spec.global_known_hosts_files + spec.known_hosts_files:
            if Path(path).is_file():
                client.get_host_keys().load(path)
        client.set_missing_host_key_policy(
            _AcceptNew(spec.known_hosts_files[0]) if self.accept_new else _RefuseUnknown())
        timeout = spec.connect_timeout_s or self.connect_timeout_s
        client.connect(spec.hostname, port=spec.port, username=spec.user,
                       key_filename=list(spec.identity_files) or None, timeout=timeout,
                       banner_timeout=timeout, auth_timeout=timeout, sock=sock,
                       allow_agent=True, look_for_keys=not spec.identity_files)
        return client

    def _jump_channel(self, spec: ConnectSpec, clients: list[paramiko.SSHClient]) -> paramiko.Channel:
        user, jump_host, jump_port = parse_jump(spec.proxy_jump or "")
        jump = resolve(Host(name=jump_host, user=user, port=jump_port), self.ssh_config)
        jump = ConnectSpec(**{**jump.__dict__, "proxy_jump": None})
        jump_client = self._connect(jump, clients)
        return jump_client.get_transport().open_channel(  # type: ignore[union-attr]
            "direct-tcpip", (spec.hostname, spec.port), ("127.0.0.1", 0))


def _channel_reader(channel: paramiko.Channel):
    def read_chunk(wait_s: float) -> bytes | None:
        channel.settimeout(max(0.01, wait_s))
        try:
            return channel.recv(65536)  # b"" once the remote closed stdout
        except TimeoutError:
            return None

    return read_chunk


def _drain_stderr(channel: paramiko.Channel) -> bytes:
    out = b""
    while channel.recv_stderr_ready() and len(out) < 65536:
        out += channel.recv_stderr(4096)
    return out


def describe_ssh_error(exc: BaseException, spec: ConnectSpec) -> str:
    """One line an operator can act on, naming the address and port."""
    where = f"{spec.user}@{spec.hostname}:{spec.port}"
    if isinstance(exc, HostKeyError):
        return f"host key refused for {where}: {exc}"
    if isinstance(exc, paramiko.BadHostKeyException):
        return (f"HOST KEY CHANGED for {where} (expected {exc.expected_key.get_base64()[:16]}..., got "
                f"{exc.key.get_base64()[:16]}...): possible man-in-the-middle or reinstalled node; "
                "verify and update known_hosts")
    if isinstance(exc, paramiko.AuthenticationException):
        return f"authentication failed for {where}: {exc}"
    if isinstance(exc, socket.timeout | TimeoutError):
        return f"connect timeout to {where}"
    if isinstance(exc, ConnectionRefusedError | paramiko.ssh_exception.NoValidConnectionsError):
        return f"connection refused by {where} (no sshd listening?)"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve {spec.hostname}: {exc}"
    if isinstance(exc, OSError):
        return f"cannot reach {where}: {exc}"
    return f"ssh to {where} failed: {type(exc).__name__}: {exc}"
