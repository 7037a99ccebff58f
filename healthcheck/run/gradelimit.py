"""A time bound on grading one host: a parser that runs away becomes an ERROR naming its command.

    with host_time_bound(DEFAULTS.grade_host_timeout_s) as bound:
        ...                  # GradingTimeout (a BaseException) is raised here once the bound is reached
    bound.armed              # False where no timer can be armed (a thread other than the main one)

Grading is pure Python and ``re``, and both notice a signal (``re`` checks for one every few thousand
steps of a match), so an interval timer (``setitimer(ITIMER_REAL)``, SIGALRM) ends a runaway parse in
the process doing it: the replay workers (``run.gradepool``), and the main thread of a run, where
``run.fanout`` grades live hosts. ``GradingTimeout`` derives from ``BaseException`` so that no
``except Exception`` of a parser or of the stage loop swallows it. The previous SIGALRM handler is
restored on exit; a timer that fires after the block ended is ignored.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType


class GradingTimeout(BaseException):
    """The host's grading ran past its bound (raised where the work was, by the SIGALRM handler)."""


@dataclass
class Bound:
    armed: bool
    seconds: float
    active: bool = True


def can_bound() -> bool:
    """A timer can be armed here: the main thread of a process on a platform with ``setitimer``."""
    return threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")


@contextmanager
def host_time_bound(seconds: float) -> Iterator[Bound]:
    """Raise ``GradingTimeout`` in this block after ``seconds`` (no bound when ``seconds <= 0`` or where
    ``can_bound`` is False: ``bound.armed`` says which)."""
    if seconds <= 0 or not can_bound():
        yield Bound(False, seconds)
        return
    bound = Bound(True, seconds)

    def expire(signum: int, frame: FrameType | None) -> None:
        if bound.active:
            raise GradingTimeout(f"grading ran past {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield bound
    finally:
        bound.active = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
