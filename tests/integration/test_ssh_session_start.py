"""A node that authenticates us and then never answers the exec request (its session start hung: PAM,
logind, a home directory on a dead file server) ends its host at ``session_start_s`` instead of
holding the sweep forever (paramiko's ``exec_command`` waits without a limit).

The server is paramiko's, in this process, on 127.0.0.1: an OpenSSH sshd cannot be made to stall at
exactly that step on demand. Its exec handler blocks its transport thread, as a frozen sshd would
(keepalives go unanswered too)."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import paramiko
import pytest

from healthcheck.core.model import Host, Status
from healthcheck.run.stages import reachability_finding
from healthcheck.transport.script import Command
from healthcheck.transport.ssh import SshTransport
from healthcheck.transport.sshconfig import load_ssh_config

STALL_S = 60.0  # the server's exec handler waits this long unless released: longer than the test waits


class StallingServer(paramiko.ServerInterface):
    def __init__(self, release: threading.Event, asked: threading.Event) -> None:
        self.release, self.asked = release, asked

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        return paramiko.AUTH_SUCCESSFUL

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        self.asked.set()
        self.release.wait(STALL_S)
        return False


@pytest.fixture
def stalling_node(tmp_path: Path):
    host_key, client_key = paramiko.ECDSAKey.generate(), paramiko.ECDSAKey.generate()
    client_key.write_private_key_file(str(tmp_path / "id_ecdsa"))
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    (tmp_path / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key.get_name()} {host_key.get_base64()}\n")
    (tmp_path / "ssh_config").write_text(
        f"Host stalled\n  HostName 127.0.0.1\n  Port {port}\n  User ops\n  IdentityFile {tmp_path / 'id_ecdsa'}\n"
        f"  IdentitiesOnly yes\n  UserKnownHostsFile {tmp_path / 'known_hosts'}\n")
    release, asked = threading.Event(), threading.Event()
    transports: list[paramiko.Transport] = []

    def serve() -> None:
        listener.settimeout(30)
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        server = paramiko.Transport(conn)
        transports.append(server)
        server.add_server_key(host_key)
        server.start_server(server=StallingServer(release, asked))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield tmp_path / "ssh_config", port, asked
    release.set()
    listener.close()
    thread.join(10)
    for server in transports:
        server.close()


def test_an_unanswered_exec_request_ends_the_host_at_session_start(stalling_node):
    config, port, asked = stalling_node
    transport = SshTransport(load_ssh_config(config), session_start_s=1.5)
    collected = []
    worker = threading.Thread(target=lambda: collected.append(
        transport.collect(Host(name="stalled"), [Command("hostname", "hostname", 5.0)], deadline_s=120)),
        daemon=True)
    worker.start()
    worker.join(20)  # the host deadline (120 s) must not be what ends it, nor the server's 60 s stall
    assert not worker.is_alive(), "collect() still waiting on the exec request"
    assert asked.is_set()  # authentication and the session open went through: it was the exec that stalled
    collection = collected[0]
    assert collection.transport_error == (f"sshd on ops@127.0.0.1:{port} authenticated us but did not answer the "
                                          "exec request within 1.5s: the node's session start hung (PAM, logind, "
                                          "a home directory on an unresponsive file server?)")
    assert collection.results["hostname"].transport_error == collection.transport_error
    finding = reachability_finding(Host(name="stalled"), collection, "ssh")
    assert finding.status is Status.ERROR and finding.remedy.startswith("sshd authenticated but the session never")
