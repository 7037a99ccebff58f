"""SshTransport._handshake: a jump connection that died under an attempt is renewed for the next one;
a host that is not behind a jump, or whose jump is alive, keeps the plain retry rules."""

from __future__ import annotations

from contextlib import ExitStack

import pytest

from healthcheck.model import Host
from healthcheck.transport import ssh
from healthcheck.transport.ssh import JumpError, SshTransport
from healthcheck.transport.sshconfig import load_ssh_config


class Transport:
    def __init__(self) -> None:
        self.active = True

    def is_active(self) -> bool:
        return self.active


class Closer:
    def close(self) -> None:
        pass


@pytest.fixture
def behind_bastion(tmp_path, monkeypatch):
    config = tmp_path / "ssh_config"
    config.write_text("Host bastion\n  HostName 127.0.0.1\n  Port 2201\n"
                      "Host node01\n  HostName 127.0.0.2\n  Port 2202\n  ProxyJump bastion\n")
    transport = SshTransport(load_ssh_config(config))
    opened: list[Transport] = []

    def open_jump(args):
        opened.append(Transport())
        return Closer(), opened[-1], args[0][-1]

    transport.jumps._connect = open_jump
    monkeypatch.setattr(ssh.time, "sleep", lambda s: None)
    return transport, opened


def _handshake(transport: SshTransport, host: str = "node01"):
    spec = ssh.resolve(Host(name=host), transport.ssh_config)
    with ExitStack() as stack:
        return transport._handshake(spec, stack, ssh.time.monotonic() + 60, 0)


def test_a_lost_bastion_is_renewed_and_the_handshake_goes_through_the_new_one(behind_bastion, monkeypatch):
    transport, opened = behind_bastion
    through: list[Transport] = []

    def sock(spec, jump, stack):
        through.append(jump.transport)
        if len(through) == 1:  # the bastion connection dies under the first attempt
            jump.transport.active = False
            raise JumpError(jump.spec, EOFError(), "connection to the bastion was lost")
        return "channel"

    monkeypatch.setattr(transport, "_sock", sock)
    monkeypatch.setattr(transport, "_client", lambda spec, s, stack: f"client over {s}")
    assert _handshake(transport) == "client over channel"
    assert len(opened) == 2 and through == opened  # the second attempt went through the renewed connection


def test_a_live_bastion_is_not_renewed_and_a_refusal_is_not_retried(behind_bastion, monkeypatch):
    transport, opened = behind_bastion
    attempts: list[int] = []

    def sock(spec, jump, stack):
        attempts.append(1)
        raise JumpError(jump.spec, OSError("Connect failed"), "could not open a channel to 127.0.0.2:2202")

    monkeypatch.setattr(transport, "_sock", sock)
    with pytest.raises(JumpError, match="could not open a channel"):
        _handshake(transport)
    assert len(attempts) == 1 and len(opened) == 1


def test_a_bastion_that_stays_down_ends_the_host_naming_it(behind_bastion, monkeypatch):
    transport, opened = behind_bastion

    def sock(spec, jump, stack):
        jump.transport.active = False
        raise JumpError(jump.spec, EOFError(), "connection to the bastion was lost")

    def open_jump(args):
        if opened:
            raise JumpError(args[0][-1], ConnectionRefusedError("Connection refused"))
        opened.append(Transport())
        return Closer(), opened[-1], args[0][-1]

    transport.jumps._connect = open_jump
    monkeypatch.setattr(transport, "_sock", sock)
    with pytest.raises(JumpError, match=r"^via bastion bastion: connection refused by \w+@127\.0\.0\.1:2201"):
        _handshake(transport)
    assert len(opened) == 1
