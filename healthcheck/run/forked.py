"""One job in a forked child process while this process goes on, its outcome waited for with a bound.

    job = Forked.start(lambda: write_report(run_dir))   # None: fork is not available here
    ...                                                 # this process writes the other files meanwhile
    error = job.finish(timeout_s=600)                   # None, or "OSError: [Errno 28] No space left on device"

The child inherits the run's results through fork (nothing is pickled), runs the job, sends back only
the text of an exception (``"{type}: {message}"``, as the serial code would have reported it) and
leaves with ``os._exit``: no atexit handlers, no flushing of the parent's buffers. ``finish`` always
reaps the child: past the bound (or when the waiting is itself interrupted) it is killed, by its pid,
and waited for, so no zombie and no orphan is left. Fork is used only where it is safe: a platform
with ``os.fork`` and a process with no other thread running (a thread holding a lock at the fork
would leave the child waiting for it forever); otherwise the caller does the work itself, serially.
"""

from __future__ import annotations

import contextlib
import gc
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

_MAX_ERROR_BYTES = 4096  # the child's error text is cut here (one pipe buffer, never a blocking write)


def can_fork() -> bool:
    """``os.fork`` exists and no other thread runs in this process."""
    return hasattr(os, "fork") and threading.active_count() == 1


@dataclass
class Forked:
    """A job running in a child process (``start``); ``finish`` waits for it and reaps it."""

    pid: int
    errors: int  # read end of the pipe the child writes its error text to

    @classmethod
    def start(cls, job: Callable[[], None]) -> Forked | None:
        """Run ``job`` in a forked child; None when fork cannot be used here (see ``can_fork``) or fails."""
        if not can_fork():
            return None
        _flush()  # or the child would print again what this process had buffered
        read_end, write_end = os.pipe()
        try:
            pid = os.fork()
        except OSError:  # no memory or process left for a child: the caller writes serially
            os.close(read_end)
            os.close(write_end)
            return None
        if pid == 0:  # the child: run the job, report, leave without running anything of the parent's
            os.close(read_end)
            gc.disable()  # a collection would write to every object's header: copies of the parent's pages
            status = 0
            try:
                job()
            except BaseException as exc:  # every failure, reported to the parent as text
                status = 1
                text = f"{type(exc).__name__}: {exc}".encode("utf-8", errors="replace")[:_MAX_ERROR_BYTES]
                with contextlib.suppress(OSError):
                    os.write(write_end, text)
            _flush()
            os._exit(status)
        os.close(write_end)
        return cls(pid=pid, errors=read_end)

    def finish(self, timeout_s: float) -> str | None:
        """Wait up to ``timeout_s`` for the child; its error text, or None when the job succeeded."""
        text = b""
        deadline = time.monotonic() + timeout_s
        done = False
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self.errors], [], [], left)[0]:
                    break  # past the bound: killed below
                chunk = os.read(self.errors, _MAX_ERROR_BYTES)
                if not chunk:  # end of the pipe: the child has exited (or closed it on its way out)
                    done = True
                    break
                text += chunk
        finally:
            os.close(self.errors)
            if not done:
                _kill(self.pid)
            _, status = os.waitpid(self.pid, 0)
        if not done:
            return f"TimeoutError: not finished in {timeout_s:g} s; the writer process was stopped"
        if os.waitstatus_to_exitcode(status) == 0:
            return None
        return text.decode("utf-8", errors="replace") or f"ChildProcessError: writer exited with status " \
            f"{os.waitstatus_to_exitcode(status)}"


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe or no stream at all never stops the writing
            stream.flush()


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it had just exited: waitpid reaps it
        os.kill(pid, signal.SIGKILL)
