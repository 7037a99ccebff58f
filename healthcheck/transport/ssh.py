"""SSH transport (paramiko): one connection and ONE exec per host for all probes.

    transport = SshTransport(ssh_config=load_ssh_config(None), accept_new_host_keys=False)
    collection = transport.collect(host, commands, deadline_s=300)

The framed script goes to ``sh -s`` on stdin, so the per-run marker never appears in the node's process
list; each command inside still reads /dev/null. Host keys are verified against the known_hosts files of
the ssh_config (parsed once per sweep, ``knownhosts.py``): an unknown key is refused, a changed key is
refused; with ``accept_new_host_keys`` an unknown key is appended to the first user known_hosts file
(OpenSSH's ``StrictHostKeyChecking=accept-new``), a changed key is still refused. Keys are shown as
SHA256 fingerprints, as OpenSSH shows them. ``ProxyCommand`` runs through ``/bin/sh -c exec ...`` with
the tokens quoted; ``ProxyJump`` hops share one connection per jump host (``sshjump.py``), and no
channel sends after its CLOSE (``sshchannel.py``: OpenSSH drops the whole connection, every host behind
the bastion, when one does). A refused handshake (the sshd's ``MaxStartups``) is retried with backoff
inside the host deadline. Keepalives (``ServerAliveInterval``/``ServerAliveCountMax``) end a host whose
network path died. AES-GCM is offered first; once the exec is sent, the host's own transport coalesces
its reads (``sshcoalesce.py``: one wake-up per burst of packets, a section handled up to 0.2 s later).
"""

from __future__ import annotations

import logging
import shlex
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack, nullcontext
from typing import Any

import paramiko
from paramiko.common import cMSG_GLOBAL_REQUEST

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import CommandResult, Host, HostCollection
from healthcheck.transport.knownhosts import KnownHostsIndex, fingerprint_sha256, known_hosts_name
from healthcheck.transport.registry import TransportSettings, register
from healthcheck.transport.script import Command, build_script, new_marker
from healthcheck.transport.sshchannel import OrderedChannel, close_through_instance
from healthcheck.transport.sshcoalesce import CoalescingPacketizer, coalesce
from healthcheck.transport.sshconfig import ConnectSpec, SshConfig, SshConfigError, load_ssh_config, resolve
from healthcheck.transport.sshjump import Jump, JumpPool, backoff_delays
from healthcheck.transport.sshkeys import HostKeyError, describe_ssh_error, host_key_policy, load_known_keys
from healthcheck.transport.stream import ConnectionLost, host_failure, read_framed

__all__ = ["HostKeyError", "SshTransport", "describe_ssh_error", "fingerprint_sha256"]

MAX_JUMP_DEPTH = 8
# paramiko logs what it also raises (a dropped banner, with its traceback) and Python's last-resort handler
# printed it on the operator's terminal; the raised error becomes the host's finding. A logging setup
# of the caller's own still receives paramiko's records (they propagate past this handler).
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class JumpError(Exception):
    """The jump host, not the target, failed: the message names the bastion."""

    def __init__(self, spec: ConnectSpec, cause: BaseException, what: str = "") -> None:
        self.spec, self.cause = spec, cause
        where = f" ({spec.user}@{spec.hostname}:{spec.port})"
        detail = f"{where}: {what}" if what else f": {describe_ssh_error(cause, spec)}"
        super().__init__(f"via bastion {spec.name}{detail}")


_AEAD = ("aes256-gcm@openssh.com", "aes128-gcm@openssh.com")
# paramiko's own cipher list, AES-GCM first: no MAC computed and compared in Python per packet
CIPHERS = tuple(c for c in _AEAD if c in paramiko.Transport._preferred_ciphers) + tuple(
    c for c in paramiko.Transport._preferred_ciphers if c not in _AEAD)


class AliveTransport(paramiko.Transport):
    """A paramiko Transport that can send an OpenSSH keepalive wanting a reply, and notes replies.

    Its thread wakes once a second when the socket is quiet, not ten times (paramiko's 0.1 s): idle
    connections cost less CPU (bench/ssh_sweep.py --idle).
    A peer's CLOSE reaches the channel's own ``_handle_close`` (``OrderedChannel``, ``sshchannel.py``).
    It reads through ``CoalescingPacketizer`` (``sshcoalesce.py``) and offers AES-GCM first."""

    _active_check_timeout = 1.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, packetizer_class=CoalescingPacketizer, **kwargs)
        self.get_security_options().ciphers = CIPHERS
        self.last_reply = 0.0
        self._channel_handler_table = close_through_instance(self._channel_handler_table)
        for msg, handler in list(self._handler_table.items()):
            if handler in (self._parse_request_success, self._parse_request_failure):
                self._handler_table[msg] = self._noting(handler)

    def _noting(self, handler: Callable[[Any], None]) -> Callable[[Any], None]:
        def wrapped(m: Any) -> None:
            self.last_reply = time.monotonic()
            handler(m)
        return wrapped

    def send_keepalive(self) -> None:
        m = paramiko.Message()
        m.add_byte(cMSG_GLOBAL_REQUEST)
        m.add_string("keepalive@openssh.com")
        m.add_boolean(True)
        self._send_user_message(m)


def _retryable(exc: BaseException) -> bool:
    """A handshake the sshd dropped (MaxStartups, a restart): worth another try after a pause."""
    if isinstance(exc, EOFError | ConnectionResetError | ConnectionAbortedError | BrokenPipeError):
        return True
    return isinstance(exc, paramiko.SSHException) and not isinstance(
        exc, paramiko.AuthenticationException | paramiko.BadHostKeyException | HostKeyError) and (
        "banner" in str(exc).lower() or "reset" in str(exc).lower() or "closed" in str(exc).lower())


class SshTransport:
    name = "ssh"

    def __init__(self, ssh_config: SshConfig, accept_new_host_keys: bool = False,
                 connect_timeout_s: float = DEFAULTS.connect_timeout_s,
                 cap: int = DEFAULTS.output_cap_bytes, kill_after_s: float = DEFAULTS.kill_after_s,
                 jump_handshakes: int = DEFAULTS.jump_handshakes,
                 session_start_s: float = DEFAULTS.session_start_s):
        self.ssh_config = ssh_config
        self.session_start_s = session_start_s
        self.accept_new = accept_new_host_keys
        self.connect_timeout_s = connect_timeout_s
        self.cap = cap
        self.kill_after_s = kill_after_s
        self.known_hosts = KnownHostsIndex()
        self.jumps = JumpPool(self._open_jump, jump_handshakes)

    def collect(self, host: Host, commands: Sequence[Command], deadline_s: float) -> HostCollection:
        started = time.monotonic()
        spec: ConnectSpec | None = None
        try:
            spec = resolve(host, self.ssh_config)
            with ExitStack() as stack:
                client = self._handshake(spec, stack, started + deadline_s, 0)
                marker = new_marker()
                script = build_script(commands, marker, self.cap, self.kill_after_s)
                channel = OrderedChannel.adopt(client.get_transport().open_session(timeout=self._timeout(spec)))
                exec_within(channel, "sh -s", min(self.session_start_s, started + deadline_s - time.monotonic()),
                            spec)
                channel.sendall(script.encode())
                channel.shutdown_write()
                coalesce(channel.get_transport(), DEFAULTS.ssh_read_linger_s)  # only the output is left to read
                return read_framed(host.name, commands, marker, _channel_reader(channel, spec), deadline_s,
                                   byte_limit=2 * self.cap * max(1, len(commands)) + (1 << 20),
                                   stderr_tail=lambda: _drain_stderr(channel), started=started)
        except Exception as exc:  # every failure to reach a host is a result, not a crash
            return host_failure(host.name, commands, _describe(exc, spec, host), time.monotonic() - started)

    def run(self, host: Host, command: str, timeout_s: float, command_id: str = "adhoc") -> CommandResult:
        collection = self.collect(host, [Command(command_id, command, timeout_s)],
                                  deadline_s=timeout_s + self.kill_after_s + self.connect_timeout_s + 10)
        return collection.results[command_id]

    def _timeout(self, spec: ConnectSpec) -> float:
        return spec.connect_timeout_s or self.connect_timeout_s

    def _handshake(self, spec: ConnectSpec, stack: ExitStack, deadline: float, depth: int,
                   via: Jump | None = None) -> paramiko.SSHClient:
        """An authenticated client for ``spec`` (through its ProxyCommand, its jump hosts or ``via``),
        retried with backoff while the sshd drops handshakes and time remains before ``deadline``. When
        the shared jump connection died under the attempt, the next one goes through a renewed one."""
        jump = via or (self._jump_for(spec, stack, deadline, depth) if spec.jumps else None)
        delays = backoff_delays()
        for attempt in range(1, DEFAULTS.handshake_attempts + 1):
            with ExitStack() as attempt_stack:
                try:
                    with jump.handshake_slot() if jump else nullcontext():
                        client = self._client(spec, self._sock(spec, jump, attempt_stack), attempt_stack)
                    stack.push(attempt_stack.pop_all())
                    return client
                except Exception as exc:
                    pause = next(delays)
                    jump_lost = jump is not None and via is None and not jump.transport.is_active()
                    if not (jump_lost or _retryable(exc)) or attempt == DEFAULTS.handshake_attempts \
                            or time.monotonic() + pause + self._timeout(spec) > deadline:
                        raise
            time.sleep(pause)
            if jump_lost:
                jump = self.jumps.renew(jump)  # raises, naming the bastion, when it cannot be reached now
        raise AssertionError("unreachable")

    def _sock(self, spec: ConnectSpec, jump: Jump | None, stack: ExitStack) -> Any:
        if spec.proxy_command:
            sock = paramiko.ProxyCommand("/bin/sh -c " + shlex.quote("exec " + spec.proxy_command))
            stack.callback(sock.close)
            return sock
        if jump is None:
            return None
        try:
            channel = OrderedChannel.adopt(jump.transport.open_channel(
                "direct-tcpip", (spec.hostname, spec.port), ("127.0.0.1", 0), timeout=self._timeout(spec)))
        except Exception as exc:
            if not jump.transport.is_active():
                raise JumpError(jump.spec, exc, "connection to the bastion was lost") from exc
            raise JumpError(jump.spec, exc, f"could not open a channel to {spec.hostname}:{spec.port}: "
                            f"{exc}") from exc
        stack.callback(channel.close)
        return channel

    def _client(self, spec: ConnectSpec, sock: Any, stack: ExitStack) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        stack.callback(client.close)
        lookup_name = spec.host_key_alias or known_hosts_name(spec.hostname, spec.port)
        known = self.known_hosts.lookup(spec.global_known_hosts_files + spec.known_hosts_files, lookup_name)
        load_known_keys(client, known, known_hosts_name(spec.hostname, spec.port))
        client.set_missing_host_key_policy(host_key_policy(
            known, lookup_name, self.known_hosts, spec.known_hosts_files[0] if self.accept_new else None))
        timeout = self._timeout(spec)
        client.connect(spec.hostname, port=spec.port, username=spec.user,
                       key_filename=list(spec.identity_files) or None, timeout=timeout,
                       banner_timeout=timeout, auth_timeout=timeout, sock=sock,
                       allow_agent=not spec.identities_only, look_for_keys=not spec.identity_files,
                       transport_factory=AliveTransport)
        return client

    def _jump_for(self, spec: ConnectSpec, stack: ExitStack, deadline: float, depth: int) -> Jump:
        if depth >= MAX_JUMP_DEPTH:
            raise SshConfigError(f"ProxyJump chain for {spec.name} is deeper than {MAX_JUMP_DEPTH} hops (a loop?)")
        chain = []
        for index, hop in enumerate(spec.jumps):
            hop_spec = resolve(Host(name=hop.host, user=hop.user, port=hop.port), self.ssh_config,
                               allow_jump=index == 0)
            chain.append(hop_spec)
        key = tuple((s.user, s.hostname, s.port, s.proxy_command, s.jumps) for s in chain)
        return stack.enter_context(self.jumps.lease(key, (tuple(chain), deadline, depth)))

    def _open_jump(self, args: tuple[tuple[ConnectSpec, ...], float, int]) -> tuple[Any, Any, ConnectSpec]:
        """Open the last hop of ``chain`` (through the earlier hops); returns (closer, transport, spec)."""
        chain, deadline, depth = args
        stack = ExitStack()
        try:
            parent = None
            if len(chain) > 1:
                parent_key = tuple((s.user, s.hostname, s.port, s.proxy_command, s.jumps) for s in chain[:-1])
                parent = stack.enter_context(self.jumps.lease(parent_key, (chain[:-1], deadline, depth)))
            client = self._handshake(chain[-1], stack, deadline, depth + 1, via=parent)
            return stack, client.get_transport(), chain[-1]
        except JumpError:
            stack.close()
            raise
        except Exception as exc:
            stack.close()
            raise JumpError(chain[-1], exc) from exc


class SessionStartHung(Exception):
    """The sshd authenticated us but did not answer the exec request in time."""


def exec_within(channel: paramiko.Channel, command: str, timeout_s: float, spec: ConnectSpec) -> None:
    """``channel.exec_command`` with its wait for the sshd's answer bounded: paramiko waits forever, and a node
    whose session start hangs after authentication (PAM, logind, an automounted home on a dead file server, a
    frozen sshd) would hold its host, and so the sweep, with no deadline running yet. Past ``timeout_s`` the
    channel is closed and ``SessionStartHung`` names the node."""
    timeout_s = max(0.0, timeout_s)
    fired = threading.Event()

    def give_up() -> None:
        fired.set()
        channel.close()  # wakes exec_command: its channel closed

    timer = threading.Timer(timeout_s, give_up)
    timer.daemon = True
    timer.start()
    try:
        channel.exec_command(command)
    except Exception:
        if not fired.is_set():
            raise  # refused or closed by the sshd or the network: the usual description
    finally:
        timer.cancel()
        timer.join()
    if fired.is_set():
        raise SessionStartHung(f"sshd on {spec.user}@{spec.hostname}:{spec.port} authenticated us but did not "
                               f"answer the exec request within {timeout_s:g}s: the node's session start hung "
                               "(PAM, logind, a home directory on an unresponsive file server?)")


def _describe(exc: BaseException, spec: ConnectSpec | None, host: Host) -> str:
    if isinstance(exc, SshConfigError):
        return f"ssh_config: {exc}"
    if isinstance(exc, JumpError | SessionStartHung):
        return str(exc)
    if spec is None:
        return f"ssh to {host.name} failed: {type(exc).__name__}: {exc}"
    text = describe_ssh_error(exc, spec)
    return f"{text} (through {spec.proxy_jump})" if spec.jumps else text


def _channel_reader(channel: paramiko.Channel, spec: ConnectSpec) -> Callable[[float], bytes | None]:
    """``read_chunk`` over the channel; keepalives after ``ServerAliveInterval`` of silence, and the host
    is lost once ``ServerAliveCountMax`` of them went unanswered (OpenSSH's rule)."""
    transport = channel.get_transport()
    interval, count_max = spec.server_alive_interval_s, spec.server_alive_count_max
    state = {"heard": time.monotonic(), "sent_at": 0.0, "unanswered": 0}

    def read_chunk(wait_s: float) -> bytes | None:
        channel.settimeout(max(0.01, wait_s))
        try:
            data = channel.recv(65536)  # b"" once the remote closed stdout
            state["heard"], state["unanswered"] = time.monotonic(), 0
            return data
        except TimeoutError:
            pass
        if interval <= 0 or not isinstance(transport, AliveTransport):
            return None
        now = time.monotonic()
        heard = max(state["heard"], transport.last_reply)
        if heard >= state["sent_at"]:
            state["unanswered"] = 0
        if now - max(heard, state["sent_at"]) >= interval:
            if state["unanswered"] >= count_max:
                raise ConnectionLost(f"no answer to {count_max} keepalives {interval:g}s apart "
                                     f"(ServerAliveInterval/ServerAliveCountMax): connection to "
                                     f"{spec.hostname}:{spec.port} lost")
            transport.send_keepalive()
            state["sent_at"], state["unanswered"] = now, state["unanswered"] + 1
        return None

    return read_chunk


def _drain_stderr(channel: paramiko.Channel) -> bytes:
    out = b""
    while channel.recv_stderr_ready() and len(out) < 65536:
        out += channel.recv_stderr(4096)
    return out


@register("ssh")
def open_ssh(settings: TransportSettings) -> SshTransport:
    return SshTransport(load_ssh_config(settings.ssh_config), accept_new_host_keys=settings.accept_new_host_keys,
                        connect_timeout_s=settings.connect_timeout_s, cap=settings.cap)
