"""read_framed on a scripted byte source and a fake clock: silent hosts, dropped connections."""

from __future__ import annotations

from collections.abc import Iterable

from healthcheck.transport.script import Command
from healthcheck.transport.stream import read_framed

MARKER = "@@HC-test"


def section(cid: str, out: bytes = b"ok\n", rc: int = 0) -> bytes:
    return (f"\n{MARKER} BEGIN {cid} rc={rc} out={len(out)} err=0 outsize={len(out)} errsize=0\n".encode()
            + out + f"\n{MARKER} END {cid}\n".encode())


class Source:
    """``read_chunk`` over scripted chunks; ``None`` chunks (and the end of the script) are silence
    that lasts the wait asked for; reads are counted so a test can see reading stopped."""

    def __init__(self, chunks: Iterable[bytes | tuple[bytes, float] | None], eof: bool = False) -> None:
        self.chunks = list(chunks)
        self.eof = eof
        self.now = 0.0
        self.stall = 0.0
        self.clocks_since_read = 0
        self.reads = 0

    def clock(self) -> float:
        self.clocks_since_read += 1
        if self.clocks_since_read == 2:  # after taking the time of the bytes, before the next read
            self.now += self.stall
            self.stall = 0.0
        return self.now

    def read_chunk(self, wait_s: float) -> bytes | None:
        self.reads += 1
        self.clocks_since_read = 0
        if self.chunks:
            chunk = self.chunks.pop(0)
            if isinstance(chunk, tuple):  # (data, stall): after reading data our own process stalls
                self.stall = chunk[1]
                return chunk[0]
            if chunk is not None:
                self.now += 0.01
                return chunk
        elif self.eof:
            return b""
        self.now += wait_s
        return None


def collect(source: Source, commands: list[Command], deadline_s: float = 10_000.0):
    return read_framed("gpu001", commands, MARKER, source.read_chunk, deadline_s, byte_limit=1 << 20,
                       started=0.0, kill_after_s=5.0, silence_margin_s=10.0, clock=source.clock)


def test_silent_host_is_ended_after_the_running_commands_timeout_not_the_deadline():
    source = Source([section("hostname"), None])
    commands = [Command("hostname", "hostname", 60), Command("nvidia-smi-q-x", "nvidia-smi -q -x", 20),
                Command("dcgmi-diag", "dcgmi diag -r 1 -j", 300)]
    got = collect(source, commands)
    assert got.results["hostname"].stdout == b"ok\n"
    running = got.results["nvidia-smi-q-x"]
    assert running.timed_out and "host silent for 35s" in running.transport_error
    assert "nvidia-smi-q-x's 20s timeout + 5s kill-after + 10s" in running.transport_error
    assert "while running nvidia-smi-q-x, for 35.0s" in got.transport_error
    assert got.results["dcgmi-diag"].transport_error.startswith("not run: host silent")
    assert 35.0 <= source.now < 36.0  # the fake clock: ended at 20 + 5 + 10 s of silence, not at the deadline


def test_a_host_that_keeps_sending_is_not_silent():
    chunks: list[bytes | None] = [None] * 3 + [section("a")] + [None] * 3 + [section("b")]
    got = collect(Source(chunks), [Command("a", "a", 2), Command("b", "b", 2)])
    assert got.transport_error is None and sorted(got.results) == ["a", "b"]


def test_reading_stops_soon_after_every_command_reported_even_without_eof():
    source = Source([section("a"), section("b")])  # then silence forever: a held pipe
    got = collect(source, [Command("a", "a", 60), Command("b", "b", 60)])
    assert got.transport_error is None and source.now < 3.0  # the 2 s grace for the script to exit
    assert got.results["b"].timeout_s == 60


def test_dropped_connection_names_the_running_command_and_for_how_long():
    source = Source([section("a"), None, None, None], eof=True)
    got = collect(source, [Command("a", "a", 60), Command("b", "nvidia-smi -q -x", 60), Command("c", "c", 5)])
    assert got.transport_error.startswith("remote script ended before all commands reported (connection "
                                          "closed while running b, for 3.0s)")
    assert not got.results["b"].timed_out and got.results["c"].transport_error.startswith("not run: remote")


def test_host_deadline_still_bounds_a_host_that_trickles():
    chunks: list[bytes | None] = [section("a")] + [None] * 50
    got = collect(Source(chunks), [Command("a", "a", 60), Command("b", "b", 60)], deadline_s=30)
    assert got.results["b"].timed_out and "host deadline of 30s exceeded (while running b" in got.transport_error


def test_a_host_that_never_starts_gets_the_start_up_allowance_too():
    source = Source([None])
    got = collect(source, [Command("hostname", "hostname", 20)])
    assert "hostname's 20s timeout + 5s kill-after + 10s + 10s start-up" in got.transport_error
    assert 45.0 <= source.now < 46.0


def test_a_stall_of_the_orchestrator_itself_is_not_silence_of_the_host():
    source = Source([(section("a"), 120.0), section("b")])  # b is in the socket when we wake up
    got = collect(source, [Command("a", "a", 5), Command("b", "b", 5)])
    assert got.transport_error is None and got.results["b"].stdout == b"ok\n"
