"""The paramiko client's coalesced reads and AES-GCM against real sshd test hosts (sshcoalesce.py).

Only the target's own transport lingers, and only after its exec; a bastion's shared transport
never does (it carries every handshake behind it). Output through both paths arrives intact.
"""

from __future__ import annotations

import pytest

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import Host
from healthcheck.transport.script import Command
from healthcheck.transport.ssh import SshTransport
from healthcheck.transport.sshconfig import load_ssh_config

pytestmark = pytest.mark.sshd


class RecordingTransport(SshTransport):
    """Keeps every paramiko transport it opened, by the ssh_config name it was opened for."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.opened: list[tuple[str, object]] = []

    def _client(self, spec, sock, stack):
        client = super()._client(spec, sock, stack)
        self.opened.append((spec.name, client.get_transport()))
        return client


COMMANDS = [Command("big", "head -c 300000 /dev/zero | tr '\\0' x", 30.0),
            Command("hostname", "hostname", 10.0),
            Command("both", "echo out; echo err >&2; exit 3", 10.0)]


def _check(collection, name: str) -> None:
    assert collection.transport_error is None, collection.transport_error
    results = collection.results
    assert results["big"].stdout == b"x" * 300000 and results["big"].rc == 0
    assert results["hostname"].stdout == f"{name}\n".encode()
    assert (results["both"].stdout, results["both"].stderr, results["both"].rc) == (b"out\n", b"err\n", 3)


def test_target_lingers_after_exec_a_bastion_never_and_gcm_is_negotiated(ssh_cluster_factory):
    cluster = ssh_cluster_factory(2)
    cluster.write_ssh_config(extra={"node02": ["  ProxyJump node01"]})
    transport = RecordingTransport(load_ssh_config(cluster.ssh_config))

    _check(transport.collect(Host(name="node01"), COMMANDS, deadline_s=60), "node01")  # direct: a TCP socket
    _check(transport.collect(Host(name="node02"), COMMANDS, deadline_s=60), "node02")  # a channel via node01

    assert [name for name, _ in transport.opened] == ["node01", "node01", "node02"]
    direct, bastion, behind = (t for _, t in transport.opened)
    for t in (direct, behind):
        assert (t.local_cipher, t.remote_cipher) == ("aes256-gcm@openssh.com", "aes256-gcm@openssh.com")
        assert t.packetizer.reader.linger_s == DEFAULTS.ssh_read_linger_s
    assert bastion.packetizer.reader.linger_s == 0.0
    assert cluster.host("node02").sessions() == 1
