"""Drive a ``FrameReader`` over any byte source with a host deadline (shared by local and ssh).

    collection = read_framed(host, commands, marker, read_chunk, deadline_s=120, byte_limit=...)

``read_chunk(wait_s)`` returns bytes, ``b""`` at end of stream, or ``None`` when nothing
arrived within ``wait_s``; it raises ``ConnectionLost`` when it knows the stream is dead (keepalives).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import CommandResult, HostCollection
from healthcheck.transport.script import Command, FrameError, FrameReader

EOF_GRACE_S = 2.0  # after the last section, how long the script may take to clean up and exit
SILENCE_PROBE_S = 0.5  # the shortest read wait: a stalled orchestrator still sees data that arrived
DEADLINE, SILENT = "host deadline", "host silent"  # how the two "the host is stuck" errors begin


def stuck(error: str | None) -> bool:
    """True for a host ended by its deadline or its silence limit (a command was still running)."""
    return error is not None and error.startswith((DEADLINE, SILENT))


class ConnectionLost(Exception):
    """Raised by a ``read_chunk`` that knows its stream is dead; the message says why."""


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def read_framed(host: str, commands: Sequence[Command], marker: str,
                read_chunk: Callable[[float], bytes | None], deadline_s: float,
                byte_limit: int, stderr_tail: Callable[[], bytes] = lambda: b"",
                started: float | None = None, kill_after_s: float = DEFAULTS.kill_after_s,
                silence_margin_s: float = DEFAULTS.silence_margin_s, startup_s: float = DEFAULTS.connect_timeout_s,
                clock: Callable[[], float] = time.monotonic) -> HostCollection:
    """Collect every finished section; name what went wrong for the ones that did not finish.

    ``started`` (a ``clock()`` value) is when the host's deadline began, e.g. before connecting.
    Sections arrive in plan order as each command ends, so the stream is silent only while one
    command runs: silence longer than that command's timeout + ``kill_after_s`` + the margin
    means the node is stuck (frozen, or a process that SIGKILL cannot end) and the host is ended
    there, keeping what arrived. Before the first byte, ``startup_s`` more is allowed (the remote
    session may still be starting: PAM, a home directory automount). Once every planned command
    has reported, the end of the stream is awaited for ``EOF_GRACE_S`` at most (the script cleans
    up its temporary directory)."""
    started = clock() if started is None else started
    collected_at = utc_now_iso()
    reader = FrameReader(host=host, marker=marker, last_event_s=0.0, planned=frozenset(c.id for c in commands))
    results: dict[str, CommandResult] = {}
    error: str | None = None
    received = 0
    watch = _Watch(commands, clock(), kill_after_s, silence_margin_s, startup_s)
    while True:
        now = clock()
        if now - started >= deadline_s:
            error = f"{DEADLINE} of {deadline_s:g}s exceeded"
            break
        try:
            chunk = read_chunk(max(SILENCE_PROBE_S, min(1.0, deadline_s - (now - started),
                                                        watch.silence_limit_s(results) - (now - watch.last_byte_s))))
        except ConnectionLost as exc:
            error = f"{exc} ({watch.while_running(results, clock())})"
            break
        if chunk is None:  # silence is a read that waited and got nothing, never a clock jump of our own
            now = clock()
            if now - watch.last_byte_s >= watch.silence_limit_s(results):
                error = None if watch.all_reported(results) else watch.silence_error(results, now)
                break  # complete but no EOF within the grace: nothing of ours is left to wait for
            continue
        if chunk == b"":
            break
        watch.last_byte_s = clock()
        received += len(chunk)
        if received > byte_limit:
            error = f"host sent more than {byte_limit} bytes; stream abandoned"
            break
        try:
            for result in reader.feed(chunk, watch.last_byte_s - started):
                results[result.command_id] = result
                watch.section_done(result.command_id, watch.last_byte_s)
        except FrameError as exc:
            error = str(exc)
            if exc.command_id is not None:
                results.pop(exc.command_id, None)  # two sections for it: neither is believed
            break
    missing = [c for c in commands if c.id not in results]
    if missing and error is None:
        tail = stderr_tail().decode("utf-8", errors="replace").strip()[-300:]
        error = ("remote script ended before all commands reported (connection closed "
                 f"{watch.while_running(results, clock())})" + (f": {tail}" if tail else ""))
    elif missing and error.startswith(DEADLINE):
        error += f" ({watch.while_running(results, clock())})"
    timeouts = {c.id: c.timeout_s for c in commands}
    results = {cid: replace(r, timeout_s=timeouts.get(cid)) for cid, r in results.items()}
    for index, cmd in enumerate(missing):
        in_flight = index == 0 and stuck(error)
        results[cmd.id] = CommandResult(
            host=host, command_id=cmd.id, timed_out=in_flight, timeout_s=cmd.timeout_s,
            transport_error=error if index == 0 else f"not run: {error}")
    return HostCollection(host=host, results=results, transport_error=error if missing else None,
                          duration_s=round(clock() - started, 3), collected_at=collected_at)


class _Watch:
    """Which planned command is running (the first one not reported) and since when."""

    def __init__(self, commands: Sequence[Command], now_s: float, kill_after_s: float, margin_s: float,
                 startup_s: float) -> None:
        self.commands = list(commands)
        self.kill_after_s = kill_after_s
        self.margin_s = margin_s
        self.startup_s = startup_s
        self.started_s = now_s
        self.last_byte_s = now_s
        self.since_s = now_s  # when the running command started: the end of the previous section

    def all_reported(self, results: Mapping[str, CommandResult]) -> bool:
        return bool(self.commands) and all(c.id in results for c in self.commands)

    def running(self, results: Mapping[str, CommandResult]) -> Command | None:
        return next((c for c in self.commands if c.id not in results), None)

    def section_done(self, command_id: str, now_s: float) -> None:
        self.since_s = now_s

    def silence_limit_s(self, results: Mapping[str, CommandResult]) -> float:
        if self.all_reported(results):
            return EOF_GRACE_S  # the script only removes its temporary directory and exits
        cmd = self.running(results)
        startup = self.startup_s if self.last_byte_s == self.started_s else 0.0  # nothing received yet
        return (cmd.timeout_s if cmd else 0.0) + self.kill_after_s + self.margin_s + startup

    def while_running(self, results: Mapping[str, CommandResult], now_s: float) -> str:
        cmd = self.running(results)
        return f"while running {cmd.id}, for {now_s - self.since_s:.1f}s" if cmd else "after the last command"

    def silence_error(self, results: Mapping[str, CommandResult], now_s: float) -> str:
        cmd = self.running(results)
        given = f"{cmd.timeout_s:g}s timeout + " if cmd else ""
        startup = f" + {self.startup_s:g}s start-up" if self.last_byte_s == self.started_s else ""
        return (f"{SILENT} for {now_s - self.last_byte_s:.0f}s, longer than {cmd.id if cmd else 'the script'}'s "
                f"{given}{self.kill_after_s:g}s kill-after + {self.margin_s:g}s{startup}: ended it "
                f"({self.while_running(results, now_s)}); the node froze or a process there ignores SIGKILL "
                "(D state)")


def host_failure(host: str, commands: Sequence[Command], reason: str,
                 duration_s: float = 0.0) -> HostCollection:
    """A collection for a host that could not be reached at all."""
    return HostCollection(
        host=host, transport_error=reason, duration_s=round(duration_s, 3), collected_at=utc_now_iso(),
        results={c.id: CommandResult(host=host, command_id=c.id, transport_error=reason) for c in commands})
