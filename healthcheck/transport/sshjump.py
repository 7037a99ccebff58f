"""Bastions: ``ProxyJump`` hops parsed, and one authenticated connection per jump host shared by its targets.

    hops = parse_jumps("admin@bastion:2222,inner", "ssh_config:12")   # two hops, in order
    pool = JumpPool(connect=open_hop, handshakes=8)
    with pool.lease(chain_key, connect_args) as jump:   # one connection per chain, opened once
        with jump.handshake_slot():                     # at most 8 target handshakes through it at once
            channel = OrderedChannel.adopt(jump.transport.open_channel("direct-tcpip", (host, port), ...))

Without reuse every target opened its own connection to the bastion: against OpenSSH's default
``MaxStartups 10:30:100`` a 64-fork sweep lost hosts to "Error reading SSH protocol banner". The pool
keeps a connection while any target uses it and closes it with the last one. A failed connection is
remembered for the hosts that waited on that very attempt, so a dead bastion costs one timeout, not one
per target; a host arriving later tries again. A connection that dies under hosts still handshaking
(a bastion's sshd restarted, a network blip) is renewed for them (``renew``): one new connection, and
only the hosts already running their script through the old one are lost.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class JumpHop:
    user: str | None
    host: str
    port: int | None


def parse_jumps(value: str, where: str = "ProxyJump") -> tuple[JumpHop, ...]:
    """``[user@]host[:port]`` or ``ssh://[user@]host[:port]``, comma separated, first hop first."""
    hops = []
    for item in value.split(","):
        item = item.strip()
        if item.startswith("ssh://"):
            item = item[len("ssh://"):].rstrip("/")
        if not item:
            raise ValueError(f"{where}: empty hop in ProxyJump {value!r}")
        user, _, rest = item.rpartition("@")
        host, port = rest, None
        if rest.startswith("["):
            host, _, tail = rest[1:].partition("]")
            port = tail[1:] if tail.startswith(":") else None
        elif rest.count(":") == 1:
            host, _, port = rest.partition(":")
        if not host or (port is not None and not port.isdigit()):
            raise ValueError(f"{where}: cannot parse ProxyJump hop {item!r}")
        hops.append(JumpHop(user or None, host, int(port) if port else None))
    return tuple(hops)


@dataclass
class Jump:
    """One open connection to a jump host and the bound on handshakes made through it."""

    spec: Any                            # the jump host's ConnectSpec
    transport: Any                       # paramiko.Transport
    closer: Any                          # .close() ends it (and the hops it goes through)
    slots: threading.BoundedSemaphore
    key: tuple = ()                      # the pool's key and connect arguments, for ``JumpPool.renew``
    args: Any = None

    @contextmanager
    def handshake_slot(self) -> Iterator[None]:
        with self.slots:
            yield


@dataclass
class _Entry:
    lock: threading.Lock = field(default_factory=threading.Lock)
    jump: Jump | None = None
    users: int = 0
    failed_at: float = 0.0
    failure: BaseException | None = None


class JumpPool:
    """``connect(args) -> (closer, transport, spec)`` opens a jump connection; the pool shares it."""

    def __init__(self, connect: Callable[[Any], tuple[Any, Any, Any]], handshakes: int) -> None:
        self._connect = connect
        self._handshakes = max(1, handshakes)
        self._entries: dict[tuple, _Entry] = {}
        self._lock = threading.Lock()
        self.opened = 0                  # connections made (tests: one per bastion)

    @contextmanager
    def lease(self, key: tuple, args: Any) -> Iterator[Jump]:
        with self._lock:
            entry = self._entries.setdefault(key, _Entry())
            entry.users += 1
        try:
            yield self._get(entry, key, args)
        finally:
            self._release(key, entry)

    def renew(self, jump: Jump) -> Jump:
        """The live connection of ``jump``'s chain for a host that still holds its lease: ``jump`` itself
        while it lives, else the one another host reopened, else a new one (or the reason none opens)."""
        with self._lock:
            entry = self._entries.get(jump.key)
        if entry is None:
            raise RuntimeError("JumpPool.renew outside the lease of the jump it renews")
        return self._get(entry, jump.key, jump.args)

    def _get(self, entry: _Entry, key: tuple, args: Any) -> Jump:
        asked = time.monotonic()
        with entry.lock:
            if entry.jump is not None and entry.jump.transport.is_active():
                return entry.jump
            if entry.failure is not None and entry.failed_at >= asked:
                raise entry.failure      # the attempt this host waited for failed: same reason
            if entry.jump is not None:   # the connection died: close what is left, open a new one
                entry.jump.closer.close()
                entry.jump = None
            try:
                closer, transport, spec = self._connect(args)
            except BaseException as exc:
                entry.failure, entry.failed_at = exc, time.monotonic()
                raise
            self.opened += 1
            entry.jump = Jump(spec, transport, closer, threading.BoundedSemaphore(self._handshakes), key, args)
            entry.failure = None
            return entry.jump

    def _release(self, key: tuple, entry: _Entry) -> None:
        with self._lock:
            entry.users -= 1
            if entry.users > 0:
                return
            self._entries.pop(key, None)
        if entry.jump is not None:
            entry.jump.closer.close()


def backoff_delays(first_s: float = 0.25, cap_s: float = 4.0) -> Iterator[float]:
    """Exponential backoff with jitter: 0.25, 0.5, 1, 2, 4, 4, ... seconds (each ±25 %)."""
    delay = first_s
    while True:
        yield delay * random.uniform(0.75, 1.25)
        delay = min(cap_s, delay * 2)
