"""sshcoalesce: a burst is read in one go, bytes stay intact and in order, EOF/timeouts/close reach paramiko.

The linger is made deterministic: the module's ``time.sleep`` is replaced by a function that plays
what "arrives meanwhile" (or closes the socket), so no test depends on the machine's speed.
"""

from __future__ import annotations

import socket
import threading
from types import SimpleNamespace

import paramiko
import pytest
from paramiko.message import Message
from paramiko.packet import Packetizer

from healthcheck.transport import sshcoalesce
from healthcheck.transport.sshcoalesce import CoalescingPacketizer, CoalescingReader, coalesce


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    a.settimeout(5.0)
    yield a, b
    a.close()
    b.close()


def _reader(sock: socket.socket, linger_s: float = 0.0) -> CoalescingReader:
    reader = CoalescingPacketizer(sock).reader
    assert reader is not None
    reader.linger_s = linger_s
    return reader


def _sleeps(monkeypatch, action=lambda s: None) -> list[float]:
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        action(seconds)

    monkeypatch.setattr(sshcoalesce, "time", SimpleNamespace(sleep=sleep))
    return slept


def test_without_linger_bytes_come_in_order_in_the_sizes_asked(pair, monkeypatch):
    a, b = pair
    slept = _sleeps(monkeypatch)
    reader = _reader(a)
    b.sendall(b"0123456789")
    assert [reader.recv(4), reader.recv(4), reader.recv(4)] == [b"0123", b"4567", b"89"]
    b.sendall(b"abc")
    assert reader.recv(16) == b"abc"
    assert slept == []  # never lingers before coalesce()


def test_a_burst_arriving_during_the_linger_is_taken_in_the_same_read(pair, monkeypatch):
    a, b = pair
    slept = _sleeps(monkeypatch, lambda s: b.sendall(b"-second"))
    reader = _reader(a, linger_s=0.2)
    b.sendall(b"first")
    assert reader.recv(64) == b"first-second"
    assert slept == [0.2]


def test_nothing_more_after_the_linger_hands_over_what_arrived(pair, monkeypatch):
    a, b = pair
    slept = _sleeps(monkeypatch)
    reader = _reader(a, linger_s=0.2)
    b.sendall(b"alone")
    assert reader.recv(64) == b"alone"
    assert slept == [0.2]


def test_a_full_read_does_not_linger(pair, monkeypatch):
    a, b = pair
    monkeypatch.setattr(sshcoalesce, "READ_SIZE", 8)
    slept = _sleeps(monkeypatch)
    reader = _reader(a, linger_s=0.2)
    b.sendall(b"0123456789abcdefghij")
    got = [reader.recv(64) for _ in range(3)]
    assert got == [b"01234567", b"89abcdef", b"ghij"]
    assert slept == [0.2]  # only after the short read: bulk output is not paced by the linger


def test_eof_is_reported_again_and_again(pair, monkeypatch):
    a, b = pair
    _sleeps(monkeypatch, lambda s: b.shutdown(socket.SHUT_WR))
    reader = _reader(a, linger_s=0.2)
    b.sendall(b"last")
    assert reader.recv(64) == b"last"  # EOF during the linger: the data first ...
    assert reader.recv(64) == b""      # ... then EOF, as paramiko expects it
    assert reader.recv(64) == b""


def test_a_timeout_reaches_the_caller(pair):
    a, _b = pair
    a.settimeout(0.01)
    with pytest.raises(socket.timeout):
        _reader(a, linger_s=0.2).recv(16)


def test_closed_during_the_linger_hands_over_the_data_then_fails(pair, monkeypatch):
    a, b = pair
    _sleeps(monkeypatch, lambda s: a.close())
    reader = _reader(a, linger_s=0.2)
    b.sendall(b"partial")
    assert reader.recv(64) == b"partial"
    with pytest.raises(OSError):
        reader.recv(64)


def test_only_sockets_and_channels_are_wrapped():
    class Pipe:  # a ProxyCommand: cannot say what is pending
        def recv(self, n: int) -> bytes:
            return b""

    packetizer = CoalescingPacketizer(Pipe())
    assert packetizer.reader is None
    assert coalesce(SimpleNamespace(packetizer=packetizer), 0.2) is False
    assert coalesce(SimpleNamespace(), 0.2) is False
    channel = paramiko.Channel(7)
    assert CoalescingPacketizer(channel).reader.pending == channel.recv_ready


def test_coalesce_sets_the_linger_of_a_wrapped_transport(pair):
    a, _b = pair
    packetizer = CoalescingPacketizer(a)
    assert packetizer.reader.linger_s == 0.0
    assert coalesce(SimpleNamespace(packetizer=packetizer), 0.2) is True
    assert packetizer.reader.linger_s == 0.2


def test_paramiko_packets_split_and_merged_across_reads_arrive_intact(pair, monkeypatch):
    """Encrypted SSH packets through the reader, in reads of 1,000 bytes, half of the stream arriving
    during a linger: packet boundaries fall inside reads; every message comes out whole and in order."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    a, b = pair
    key, iv = bytes(range(32)), bytes(range(12))
    sent = SimpleNamespace(data=bytearray())
    sent.send = lambda data: sent.data.extend(data) or len(data)
    writer = Packetizer(sent)
    writer.set_outbound_cipher(AESGCM(key), 16, None, 16, b"", aead=True, iv_out=iv)
    payloads = [bytes([n]) * size for n, size in enumerate((10, 5000, 1, 70000, 300, 32768))]
    for payload in payloads:
        m = Message()
        m.add_byte(bytes([94]))  # MSG_CHANNEL_DATA
        m.add_string(payload)
        writer.send_message(m)
    stream = bytes(sent.data)
    half = len(stream) // 2 + 7
    later = [stream[half:]]
    monkeypatch.setattr(sshcoalesce, "READ_SIZE", 1000)
    slept = _sleeps(monkeypatch, lambda s: later and b.sendall(later.pop()))
    reading = CoalescingPacketizer(a)
    reading.set_inbound_cipher(AESGCM(key), 16, None, 16, b"", aead=True, iv_in=iv)
    coalesce(SimpleNamespace(packetizer=reading), 0.2)
    b.sendall(stream[:half])
    got = []
    for _ in payloads:
        cmd, message = reading.read_message()
        got.append((cmd, message.get_string()))
    assert got == [(94, p) for p in payloads]
    assert slept == [0.2, 0.2] and not later  # after the first half, and after the last short read


def test_the_handshake_timeout_is_a_deadline_without_a_thread(pair):
    a, _b = pair
    threads = threading.active_count()
    packetizer = CoalescingPacketizer(a)
    assert packetizer.handshake_timed_out() is False  # not started
    packetizer.start_handshake(0)
    assert threading.active_count() == threads
    assert packetizer.handshake_timed_out() is True
    packetizer.complete_handshake()
    assert packetizer.handshake_timed_out() is False
    waiting = CoalescingPacketizer(a)
    waiting.start_handshake(3600)
    waiting.start_handshake(0)  # as paramiko's: the first start counts
    assert waiting.handshake_timed_out() is False
