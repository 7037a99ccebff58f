"""sshchannel: nothing of a channel goes out after its CLOSE (paramiko #1115), and flow control still works.

A recording transport stands in for paramiko's: it holds a message of the kind under test (DATA,
WINDOW_ADJUST) just after the channel built it, until a CLOSE was written or 0.3 s passed. That is
the moment another thread's close can overtake it; an OpenSSH peer drops the whole connection when it
does (tests/integration/test_ssh_sites.py shows it through a real bastion).
"""

from __future__ import annotations

import socket
import threading

import paramiko
import pytest
from paramiko.common import (
    MSG_CHANNEL_CLOSE,
    MSG_CHANNEL_DATA,
    MSG_CHANNEL_EOF,
    MSG_CHANNEL_EXTENDED_DATA,
    MSG_CHANNEL_WINDOW_ADJUST,
)
from paramiko.message import Message

from healthcheck.transport.ssh import AliveTransport
from healthcheck.transport.sshchannel import OrderedChannel, close_through_instance

HOLD_S = 0.3
WINDOW = 1000  # a window adjust is due once more than a tenth of it was read


class RecordingTransport:
    """What a Channel needs of its transport: messages are recorded as (type, recipient) in send order."""

    def __init__(self, hold: int | None = None) -> None:
        self.hold = hold
        self.sent: list[tuple[int, int]] = []
        self.closed = threading.Event()
        self.held = threading.Event()

    def get_log_channel(self) -> str:
        return "test.sshchannel"

    def _sanitize_packet_size(self, size: int) -> int:
        return size

    def _unlink_channel(self, chanid: int) -> None:
        pass

    def _send_user_message(self, m: Message) -> None:
        raw = m.asbytes()
        kind, recipient = raw[0], int.from_bytes(raw[1:5], "big")
        if kind == self.hold:
            self.held.set()
            self.closed.wait(HOLD_S)
        self.sent.append((kind, recipient))
        if kind == MSG_CHANNEL_CLOSE:
            self.closed.set()


def _channel(transport: RecordingTransport, ordered: bool) -> paramiko.Channel:
    channel = paramiko.Channel(3)
    channel._set_transport(transport)
    channel._set_window(WINDOW, 32768)
    channel._set_remote_channel(4, WINDOW, 32768)
    channel.settimeout(1.0)
    return OrderedChannel.adopt(channel) if ordered else channel


def _race(ordered: bool, sender, closer) -> list[int]:
    """``sender(channel)`` in one thread; once its message is built and held, ``closer(channel)``."""
    transport = RecordingTransport(hold=sender.kind)
    channel = _channel(transport, ordered)
    sending = threading.Thread(target=sender, args=(channel,))
    sending.start()
    assert transport.held.wait(5.0)
    closing = threading.Thread(target=closer, args=(channel,))
    closing.start()
    sending.join(5.0)
    closing.join(5.0)
    assert not sending.is_alive() and not closing.is_alive()
    assert {recipient for _kind, recipient in transport.sent} == {4}
    return [kind for kind, _recipient in transport.sent]


def _send_data(channel: paramiko.Channel) -> None:
    channel.send(b"x" * 10)


_send_data.kind = MSG_CHANNEL_DATA  # type: ignore[attr-defined]


def _read_past_threshold(channel: paramiko.Channel) -> None:
    channel._feed(b"y" * 200)
    assert channel.recv(200) == b"y" * 200


_read_past_threshold.kind = MSG_CHANNEL_WINDOW_ADJUST  # type: ignore[attr-defined]


def _our_close(channel: paramiko.Channel) -> None:
    channel.close()


def _peer_close(channel: paramiko.Channel) -> None:
    """The transport thread answering the peer's CLOSE, dispatched as AliveTransport dispatches it."""
    close_through_instance(paramiko.Transport._channel_handler_table)[MSG_CHANNEL_CLOSE](channel, Message())


def _shutdown_write(channel: paramiko.Channel) -> None:
    channel.shutdown_write()


_shutdown_write.kind = MSG_CHANNEL_EOF  # type: ignore[attr-defined]


SENDERS = [pytest.param(_send_data, id="data"), pytest.param(_read_past_threshold, id="window-adjust"),
           pytest.param(_shutdown_write, id="eof")]


def _in_order(kind: int) -> list[int]:
    """What goes out when the close waits for the held message: it, then EOF (unless it was the EOF), CLOSE."""
    return [kind, MSG_CHANNEL_CLOSE] if kind == MSG_CHANNEL_EOF else [kind, MSG_CHANNEL_EOF, MSG_CHANNEL_CLOSE]
CLOSERS = [pytest.param(_our_close, id="our-close"), pytest.param(_peer_close, id="peer-close")]


@pytest.mark.parametrize("closer", CLOSERS)
@pytest.mark.parametrize("sender", SENDERS)
def test_a_message_built_before_the_close_goes_out_before_it(sender, closer):
    assert _race(True, sender, closer) == _in_order(sender.kind)


@pytest.mark.parametrize("closer", CLOSERS)
@pytest.mark.parametrize("sender", SENDERS)
def test_paramiko_alone_lets_the_close_overtake(sender, closer):
    """The race this module exists for: without the gate the CLOSE overtakes the held message."""
    kinds = _race(False, sender, closer)
    if kinds == _in_order(sender.kind):
        pytest.skip("this paramiko orders a channel's sends and its close itself (#1115 fixed?)")
    assert kinds[-1] == sender.kind and kinds[-2] == MSG_CHANNEL_CLOSE  # the held message after the CLOSE


def test_nothing_is_sent_after_the_close():
    transport = RecordingTransport()
    channel = _channel(transport, ordered=True)
    channel.close()
    with pytest.raises(OSError, match="closed"):
        channel.send(b"late")
    channel._feed(b"z" * 200)  # data the peer sent before it saw our CLOSE
    channel.recv(200)
    assert [kind for kind, _ in transport.sent] == [MSG_CHANNEL_EOF, MSG_CHANNEL_CLOSE]


def test_stdout_and_stderr_reads_still_open_the_window():
    transport = RecordingTransport()
    channel = _channel(transport, ordered=True)
    channel._feed(b"a" * 60)
    assert channel.recv(60) == b"a" * 60  # 60 of 1000 read: below the threshold, nothing sent
    assert transport.sent == []
    channel._feed(b"b" * 60)
    channel.recv(60)
    stderr = Message()
    stderr.add_int(1)
    stderr.add_string(b"e" * 150)
    stderr.rewind()
    channel._feed_extended(stderr)
    assert channel.recv_stderr(150) == b"e" * 150
    assert transport.sent == [(MSG_CHANNEL_WINDOW_ADJUST, 4), (MSG_CHANNEL_WINDOW_ADJUST, 4)]
    assert MSG_CHANNEL_EXTENDED_DATA not in [kind for kind, _ in transport.sent]


def test_alive_transport_answers_a_peer_close_through_the_channel():
    """AliveTransport's handler table calls the channel's own _handle_close (paramiko's calls Channel's)."""
    ours, theirs = socket.socketpair()
    try:
        transport = AliveTransport(ours)
        table = transport._channel_handler_table
        assert table[MSG_CHANNEL_DATA] is paramiko.Channel._feed  # the rest is paramiko's
        closed = []

        class Probe:
            def _handle_close(self, m: Message) -> None:
                closed.append(m)

        message = Message()
        table[MSG_CHANNEL_CLOSE](Probe(), message)
        assert closed == [message]
        assert paramiko.Transport._channel_handler_table[MSG_CHANNEL_CLOSE] is paramiko.Channel._handle_close
    finally:
        ours.close()
        theirs.close()
