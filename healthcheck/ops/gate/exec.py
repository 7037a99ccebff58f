"""Running the gate's tests as child processes that can always be stopped, and the budget's last word.

    groups = ChildGroups()
    out = run_launch(launch, workdir, timeout_s=12.0, groups=groups)   # StepOutput; never raises
    watchdog = Watchdog(deadline_s=57.5, on_fire=lambda: print("budget reached"), groups=groups).start()

Each test runs in its own session (``start_new_session``), so a timeout kills the whole process group: the
test, its helpers (nvcc, a CUDA C program, mpirun-less NCCL threads) and anything they started, SIGTERM first
and SIGKILL ``kill_grace_s`` later. Output beyond ``DEFAULTS.output_cap_bytes`` per stream is cut. The
``Watchdog`` is the hard stop: at the deadline it kills every group still alive and ends the process with the
exit code it was given, whatever the gate is doing (a write on a hung filesystem, a scheduler call), so the
gate never outlives its budget.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from healthcheck.core.defaults import DEFAULTS
from healthcheck.ops.gate.steps import Launch, StepOutput, write_files


class ChildGroups:
    """Process groups of the tests running now (thread-safe): what the watchdog must kill."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: set[int] = set()

    def add(self, pgid: int) -> None:
        with self._lock:
            self._groups.add(pgid)

    def discard(self, pgid: int) -> None:
        with self._lock:
            self._groups.discard(pgid)

    def kill_all(self, sig: int = signal.SIGKILL) -> list[int]:
        with self._lock:
            groups = sorted(self._groups)
        for pgid in groups:
            _signal_group(pgid, sig)
        return groups


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _cap(data: bytes | None) -> str:
    data = data or b""
    if len(data) > DEFAULTS.output_cap_bytes:
        data = data[:DEFAULTS.output_cap_bytes] + b"\n[healthcheck: output cut]\n"
    return data.decode("utf-8", errors="replace")


def run_launch(launch: Launch, workdir: Path, timeout_s: float, groups: ChildGroups,
               kill_grace_s: float = DEFAULTS.gate_kill_grace_s) -> StepOutput:
    """Run one test; a test past ``timeout_s`` is killed (its group), what it printed is kept."""
    start = time.monotonic()
    try:
        write_files(launch, workdir)
        proc = subprocess.Popen(list(launch.argv), cwd=workdir, env={**os.environ, **launch.env},
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    except OSError as exc:
        return StepOutput(rc=None, stdout="", stderr="", duration_s=time.monotonic() - start,
                          start_error=f"could not start {launch.argv[0]}: {exc}", timeout_s=timeout_s)
    groups.add(proc.pid)
    timed_out = False
    try:
        try:
            stdout, stderr = proc.communicate(timeout=max(timeout_s, 0.1))
        except subprocess.TimeoutExpired:
            timed_out = True
            stdout, stderr = _stop(proc, kill_grace_s)
    finally:
        _signal_group(proc.pid, signal.SIGKILL)  # helpers the test left behind (same group) go with it
        groups.discard(proc.pid)
    return StepOutput(rc=proc.returncode, stdout=_cap(stdout), stderr=_cap(stderr),
                      duration_s=time.monotonic() - start, timed_out=timed_out, timeout_s=timeout_s)


def _stop(proc: subprocess.Popen[bytes], grace_s: float) -> tuple[bytes, bytes]:
    """SIGTERM the group, SIGKILL it ``grace_s`` later; what was printed is returned (bounded waits only)."""
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        return proc.communicate(timeout=grace_s)
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
    try:
        return proc.communicate(timeout=grace_s)
    except subprocess.TimeoutExpired:  # a grandchild in its own session still holds the pipes: give up on them
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        proc.wait(timeout=grace_s)
        return b"", b""


class Watchdog:
    """Ends the process at ``deadline_s`` (``time.monotonic()`` value): kills the test groups, calls
    ``on_fire`` (prints the one line a scheduler log gets), exits with ``exit_code``."""

    def __init__(self, deadline_s: float, exit_code: int, groups: ChildGroups,
                 on_fire: Callable[[], None] = lambda: None) -> None:
        self.deadline_s = deadline_s
        self.exit_code = exit_code
        self.groups = groups
        self.on_fire = on_fire
        self._timer: threading.Timer | None = None

    def start(self) -> Watchdog:
        self._timer = threading.Timer(max(self.deadline_s - time.monotonic(), 0.0), self._fire)
        self._timer.daemon = True
        self._timer.start()
        return self

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _fire(self) -> None:
        self.groups.kill_all()
        try:
            self.on_fire()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(self.exit_code)
