"""The jump pool: one connection per chain while in use, waiters share a failed attempt, bounded slots, a
dead connection renewed; and ``SshTransport._handshake`` going through the renewed one (a host not behind
a jump, or whose jump is alive, keeps the plain retry rules)."""

from __future__ import annotations

import threading
import time
from contextlib import ExitStack

import pytest

from healthcheck.core.model import Host
from healthcheck.transport import ssh
from healthcheck.transport.ssh import JumpError, SshTransport
from healthcheck.transport.sshconfig import load_ssh_config
from healthcheck.transport.sshjump import JumpPool, backoff_delays


class FakeTransport:
    def __init__(self) -> None:
        self.active = True

    def is_active(self) -> bool:
        return self.active


class Closer:
    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name

    def close(self) -> None:
        self.log.append(f"closed {self.name}")


def test_one_connection_shared_then_closed_with_the_last_user():
    log: list[str] = []
    pool = JumpPool(lambda args: (Closer(log, args), FakeTransport(), args), handshakes=2)
    with pool.lease(("b",), "b") as first, pool.lease(("b",), "b") as second:
        assert first is second and pool.opened == 1
    assert log == ["closed b"]
    with pool.lease(("b",), "b"):
        assert pool.opened == 2  # nobody held it: a later host opens a new one


def test_dead_connection_is_replaced_and_closed():
    log: list[str] = []
    pool = JumpPool(lambda args: (Closer(log, args), FakeTransport(), args), handshakes=2)
    with pool.lease(("b",), "b") as first:
        first.transport.active = False
        with pool.lease(("b",), "b") as second:
            assert second is not first and pool.opened == 2 and log == ["closed b"]


def test_hosts_waiting_on_a_failed_attempt_share_its_failure():
    calls: list[float] = []
    release = threading.Event()

    def connect(args):
        calls.append(time.monotonic())
        release.wait(5)
        raise ConnectionRefusedError("bastion down")

    pool = JumpPool(connect, handshakes=2)
    errors: list[BaseException] = []

    def host() -> None:
        try:
            with pool.lease(("b",), "b"):
                pass
        except ConnectionRefusedError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=host) for _ in range(10)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 5
    while not calls and time.monotonic() < deadline:
        time.sleep(0.01)
    release.set()
    for t in threads:
        t.join(10)
    assert len(errors) == 10
    assert len(calls) < 10  # threads that arrived during the attempt reused its failure
    with pytest.raises(ConnectionRefusedError), pool.lease(("b",), "b"):  # a later host tries again
        pass
    assert len(calls) >= 2


def test_handshake_slots_bound_concurrency():
    pool = JumpPool(lambda args: (Closer([], args), FakeTransport(), args), handshakes=3)
    inside, peak, lock = [0], [0], threading.Lock()

    def host() -> None:
        with pool.lease(("b",), "b") as jump, jump.handshake_slot():
            with lock:
                inside[0] += 1
                peak[0] = max(peak[0], inside[0])
            time.sleep(0.05)
            with lock:
                inside[0] -= 1

    threads = [threading.Thread(target=host) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert peak[0] == 3


def test_backoff_grows_to_the_cap_with_jitter():
    delays = backoff_delays(0.25, 4.0)
    got = [next(delays) for _ in range(7)]
    for value, nominal in zip(got, [0.25, 0.5, 1, 2, 4, 4, 4], strict=True):
        assert 0.75 * nominal <= value <= 1.25 * nominal


def test_renew_reopens_a_dead_connection_once_for_every_host_holding_it():
    log: list[str] = []
    pool = JumpPool(lambda args: (Closer(log, args), FakeTransport(), args), handshakes=2)
    with pool.lease(("b",), "b") as first, pool.lease(("b",), "b") as second:
        assert pool.renew(first) is first  # alive: nothing reopened
        first.transport.active = False
        renewed = pool.renew(first)
        assert renewed is not first and renewed.transport.is_active() and pool.opened == 2
        assert pool.renew(second) is renewed  # the other host gets the one already reopened
        assert log == ["closed b"]  # the dead one was closed, once
    assert log == ["closed b", "closed b"] and pool.opened == 2


def test_renew_raises_why_the_bastion_cannot_be_reached_now():
    state = {"up": True}

    def connect(args):
        if not state["up"]:
            raise ConnectionRefusedError("bastion down")
        return Closer([], args), FakeTransport(), args

    pool = JumpPool(connect, handshakes=2)
    with pool.lease(("b",), "b") as jump:
        jump.transport.active, state["up"] = False, False
        with pytest.raises(ConnectionRefusedError, match="bastion down"):
            pool.renew(jump)
    with pytest.raises(RuntimeError, match="outside the lease"):
        pool.renew(jump)


@pytest.fixture
def behind_bastion(tmp_path, monkeypatch):
    config = tmp_path / "ssh_config"
    config.write_text("Host bastion\n  HostName 127.0.0.1\n  Port 2201\n"
                      "Host node01\n  HostName 127.0.0.2\n  Port 2202\n  ProxyJump bastion\n")
    transport = SshTransport(load_ssh_config(config))
    opened: list[FakeTransport] = []

    def open_jump(args):
        opened.append(FakeTransport())
        return Closer([], "bastion"), opened[-1], args[0][-1]

    transport.jumps._connect = open_jump
    monkeypatch.setattr(ssh.time, "sleep", lambda s: None)
    return transport, opened


def _handshake(transport: SshTransport, host: str = "node01"):
    spec = ssh.resolve(Host(name=host), transport.ssh_config)
    with ExitStack() as stack:
        return transport._handshake(spec, stack, ssh.time.monotonic() + 60, 0)


def test_a_lost_bastion_is_renewed_and_the_handshake_goes_through_the_new_one(behind_bastion, monkeypatch):
    transport, opened = behind_bastion
    through: list[FakeTransport] = []

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
        opened.append(FakeTransport())
        return Closer([], "bastion"), opened[-1], args[0][-1]

    transport.jumps._connect = open_jump
    monkeypatch.setattr(transport, "_sock", sock)
    with pytest.raises(JumpError, match=r"^via bastion bastion: connection refused by \w+@127\.0\.0\.1:2201"):
        _handshake(transport)
    assert len(opened) == 1
