"""Coalesced reads for paramiko's transport thread: one wake-up per burst of packets, not per packet.

    transport = paramiko.Transport(sock, packetizer_class=CoalescingPacketizer)
    ...  # handshake and exec as usual, then, once the session's output is what is left to read:
    coalesce(transport, linger_s=0.2)

A node prints a command's section in three or four writes (header, output, END) as each command
ends, so a session arrives as ~3 small packets per command, tens of milliseconds apart. Woken for
each, the transport thread and the thread reading the channel paid CPU per packet (system calls,
thread switches, the GIL); that was most of the client's CPU per host. Once ``coalesce`` was called,
a read that returned less than a full buffer waits ``linger_s`` and then takes everything that arrived
meanwhile in one more read, so a burst costs two wake-ups.

What it costs: each burst is handled up to ``linger_s`` later (the sections' arrival times, and so
their ``duration_s``, and the end of a host by that much); a full read (bulk output) never waits,
so throughput is not capped. Bytes are neither dropped nor reordered; timeouts, EOF and a socket
closed by another thread reach paramiko as they did. A TCP socket or a channel through a jump host
is wrapped (a ProxyCommand's pipe is not: it cannot tell what is pending), and only the target's
transport lingers, after its exec: never a handshake, never a jump host's shared transport.
The packetizer also keeps paramiko's handshake timeout as a deadline rather than a Timer thread.
"""

from __future__ import annotations

import contextlib
import select
import socket
import time
from collections.abc import Callable

from paramiko import Channel, SSHException
from paramiko.packet import Packetizer

READ_SIZE = 1 << 18  # one read takes up to this much; a full read means more is queued: no linger


class CoalescingReader:
    """The socket as the Packetizer sees it: ``recv`` serves from what one read brought in."""

    def __init__(self, sock: socket.socket | Channel, pending: Callable[[], bool]) -> None:
        self.sock = sock
        self.pending = pending  # True when a read would not block
        self.linger_s = 0.0
        self._data = b""
        self._at = 0

    def recv(self, n: int) -> bytes:
        if self._at >= len(self._data):
            self._data, self._at = self._read(), 0
            if not self._data:
                return b""  # EOF, as the socket says it
        out = self._data[self._at:self._at + n]
        self._at += len(out)
        return out

    def _read(self) -> bytes:
        data = self.sock.recv(READ_SIZE)  # blocks up to the socket's timeout; socket.timeout propagates
        if not data or not self.linger_s or len(data) >= READ_SIZE:
            return data
        time.sleep(self.linger_s)
        try:
            if self.pending():
                data += self.sock.recv(READ_SIZE)  # b"" at EOF: the next read reports it
        except (OSError, ValueError):  # closed meanwhile: hand over what arrived; the next read fails
            pass
        return data

    def send(self, data: bytes) -> int:
        return self.sock.send(data)

    def close(self) -> None:
        with contextlib.suppress(OSError, EOFError, SSHException):  # a jump channel's bastion connection is gone
            self.sock.close()


def _pending_check(sock: object) -> Callable[[], bool] | None:
    if isinstance(sock, socket.socket):
        return lambda: bool(select.select([sock], [], [], 0)[0])
    if isinstance(sock, Channel):
        return sock.recv_ready
    return None


class CoalescingPacketizer(Packetizer):
    """paramiko's Packetizer reading through a ``CoalescingReader`` where the socket can say what is
    pending. Its handshake timeout is a deadline checked where paramiko checks its timer, instead of
    a ``threading.Timer`` (one more thread per connection, started and cancelled within the handshake)."""

    def __init__(self, sock: object) -> None:
        pending = _pending_check(sock)
        self.reader = CoalescingReader(sock, pending) if pending else None  # type: ignore[arg-type]
        self.handshake_deadline: float | None = None
        self.handshake_done = False
        super().__init__(self.reader or sock)

    def start_handshake(self, timeout: float) -> None:
        if self.handshake_deadline is None:
            self.handshake_deadline = time.monotonic() + float(timeout)

    def handshake_timed_out(self) -> bool:
        return (self.handshake_deadline is not None and not self.handshake_done
                and time.monotonic() >= self.handshake_deadline)

    def complete_handshake(self) -> None:
        if self.handshake_deadline is not None:
            self.handshake_done = True


def coalesce(transport: object, linger_s: float) -> bool:
    """Let ``transport`` linger ``linger_s`` after a short read; False where it cannot (not wrapped)."""
    reader = getattr(getattr(transport, "packetizer", None), "reader", None)
    if reader is None:
        return False
    reader.linger_s = linger_s
    return True
