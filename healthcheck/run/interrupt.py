"""Signals during a run: SIGTERM (systemd, cron wrappers, ``timeout``) and SIGHUP (the terminal or the
ssh session of a sweep started by hand went away) end a run like Ctrl-C does.

    with InterruptGuard() as guard:
        ...                      # SIGINT, SIGTERM or SIGHUP raise Interrupted (a KeyboardInterrupt)
        guard.shield()           # from here on signals are only recorded: results and reports get written
    guard.signal                 # "SIGTERM", "SIGINT", "SIGHUP" or None
    exit_status(guard.signal)    # 143, 130, 129

Handlers are installed only in the main thread (elsewhere the guard does nothing), and the
previous handlers are restored on exit.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread by SIGINT, SIGTERM or SIGHUP; ``args[0]`` is the signal name."""


def exit_status(signal_name: str | None) -> int:
    """The shell's convention: 128 + the signal number (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP)."""
    return 128 + int(getattr(signal, signal_name or "SIGINT"))


class InterruptGuard:
    def __init__(self) -> None:
        self.received: list[str] = []
        self.shielded = False
        self._previous: dict[int, Any] = {}

    @property
    def signal(self) -> str | None:
        return self.received[0] if self.received else None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signal.Signals(signum).name)
        if not self.shielded:
            raise Interrupted(signal.Signals(signum).name)

    def note(self, exc: KeyboardInterrupt) -> None:
        """Record an interrupt that arrived as a plain KeyboardInterrupt (no handler installed)."""
        if not self.received:
            self.received.append(exc.args[0] if isinstance(exc, Interrupted) and exc.args else "SIGINT")

    def shield(self) -> None:
        self.shielded = True

    def __enter__(self) -> InterruptGuard:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
