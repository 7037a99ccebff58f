"""Drive a ``FrameReader`` over any byte source with a host deadline (shared by local and ssh).

    collection = read_framed(host, commands, marker, read_chunk, deadline_s=120, byte_limit=...)

``read_chunk(wait_s)`` returns bytes, ``b""`` at end of stream, or ``None`` when nothing
arrived within ``wait_s``; it raises ``ConnectionLost`` when it knows the stream is dead (keepalives).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone

from healthcheck.model import CommandResult, HostCollection
from healthcheck.transport.script import Command, FrameError, FrameReader


class ConnectionLost(Exception):
    """Raised by a ``read_chunk`` that knows its stream is dead; the message says why."""


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def read_framed(host: str, commands: Sequence[Command], marker: str,
                read_chunk: Callable[[float], bytes | None], deadline_s: float,
                byte_limit: int, stderr_tail: Callable[[], bytes] = lambda: b"",
                started: float | None = None) -> HostCollection:
    """Collect every finished section; name what went wrong for the ones that did not finish.

    ``started`` (a ``time.monotonic()`` value) is when the host's deadline began, e.g. before connecting."""
    started = time.monotonic() if started is None else started
    collected_at = utc_now_iso()
    reader = FrameReader(host=host, marker=marker, last_event_s=0.0)
    results: dict[str, CommandResult] = {}
    error: str | None = None
    ended = False
    received = 0
    while not ended:
        elapsed = time.monotonic() - started
        if elapsed >= deadline_s:
            error = f"host deadline of {deadline_s:g}s exceeded"
            break
        try:
            chunk = read_chunk(min(1.0, deadline_s - elapsed))
        except ConnectionLost as exc:
            error = str(exc)
            break
        if chunk is None:
            continue
        if chunk == b"":
            ended = True
        received += len(chunk)
        if received > byte_limit:
            error = f"host sent more than {byte_limit} bytes; stream abandoned"
            break
        try:
            for result in reader.feed(chunk, time.monotonic() - started):
                results[result.command_id] = result
        except FrameError as exc:
            error = str(exc)
            break
    missing = [c for c in commands if c.id not in results]
    if missing and error is None:
        tail = stderr_tail().decode("utf-8", errors="replace").strip()[-300:]
        error = "remote script ended before all commands reported" + (f": {tail}" if tail else "")
    for index, cmd in enumerate(missing):
        in_flight = index == 0 and error is not None and "deadline" in error
        results[cmd.id] = CommandResult(
            host=host, command_id=cmd.id, timed_out=in_flight,
            transport_error=f"{error} (while running {cmd.id})" if in_flight
            else f"not run: {error}")
    return HostCollection(host=host, results=results, transport_error=error if missing else None,
                          duration_s=round(time.monotonic() - started, 3), collected_at=collected_at)


def host_failure(host: str, commands: Sequence[Command], reason: str,
                 duration_s: float = 0.0) -> HostCollection:
    """A collection for a host that could not be reached at all."""
    return HostCollection(
        host=host, transport_error=reason, duration_s=round(duration_s, 3), collected_at=utc_now_iso(),
        results={c.id: CommandResult(host=host, command_id=c.id, transport_error=reason) for c in commands})
