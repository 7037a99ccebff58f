"""Channels that never send a message after their CLOSE (paramiko issue #1115, still open in 5.x).

    channel = OrderedChannel.adopt(transport.open_channel("direct-tcpip", (host, port), ("127.0.0.1", 0)))

paramiko builds a channel message under the channel's lock and hands it to the transport after
releasing the lock, so a close in another thread can go out first: ours at the end of a host, or the
transport thread answering the peer's CLOSE. OpenSSH frees a channel once CLOSE went both ways, and
a DATA or WINDOW_ADJUST for a freed channel makes it drop the whole connection ("data packet referred
to nonexistent channel"). Through a shared bastion that is every host in flight: a loaded 100-host
sweep behind one bastion lost 67 of them at once (tests/integration/test_ssh_sites.py).

An adopted channel holds one gate from building a message until the transport has written it, for
data, window adjusts, EOF and both ways of closing, so nothing of it follows its CLOSE on the wire. The
peer's CLOSE reaches ``_handle_close`` through the instance only where the transport dispatches
channel messages that way (``AliveTransport`` does). What a gate holder may wait for, and so how long
a close may wait: the send window (at most the channel's timeout) or a key exchange (paramiko's
``clear_to_send_timeout``), as any paramiko send does.
"""

from __future__ import annotations

import threading
from typing import Any

from paramiko import Channel, Message
from paramiko.common import MSG_CHANNEL_CLOSE, cMSG_CHANNEL_WINDOW_ADJUST


class OrderedChannel(Channel):
    """A paramiko ``Channel`` whose sends and closes go out one at a time, in the order they were made."""

    _gate: threading.RLock

    @classmethod
    def adopt(cls, channel: Channel) -> OrderedChannel:
        """Turn an open ``channel`` into an ordered one (paramiko creates its channels itself)."""
        channel._gate = threading.RLock()  # type: ignore[attr-defined]
        channel.__class__ = cls
        return channel  # type: ignore[return-value]

    def _send(self, s: bytes, m: Message) -> int:
        with self._gate:
            return super()._send(s, m)

    def recv(self, nbytes: int) -> bytes:
        return self._window_taken(super().recv(nbytes))

    def recv_stderr(self, nbytes: int) -> bytes:
        return self._window_taken(super().recv_stderr(nbytes))

    def _check_add_window(self, n: int) -> int:
        return 0  # paramiko's recv would send the adjust outside the gate: _window_taken does it inside

    def _window_taken(self, out: bytes) -> bytes:
        with self._gate:
            ack = Channel._check_add_window(self, len(out))
            if ack > 0:
                m = Message()
                m.add_byte(cMSG_CHANNEL_WINDOW_ADJUST)
                m.add_int(self.remote_chanid)
                m.add_int(ack)
                self.transport._send_user_message(m)
        return out

    def shutdown(self, how: int) -> None:
        with self._gate:  # its EOF, built under the lock and sent after, like data
            super().shutdown(how)

    def close(self) -> None:
        with self._gate:
            super().close()

    def _handle_close(self, m: Message) -> None:
        with self._gate:
            super()._handle_close(m)


def close_through_instance(table: dict[int, Any]) -> dict[int, Any]:
    """A transport's channel handler table that answers a CLOSE with the channel's own ``_handle_close``
    (paramiko's table calls ``Channel._handle_close`` on any channel, passing over a subclass)."""
    return {**table, MSG_CHANNEL_CLOSE: lambda chan, m: chan._handle_close(m)}
