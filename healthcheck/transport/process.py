"""Child-process plumbing shared by the local and slurm transports.

    proc = subprocess.Popen(argv, stdout=PIPE, start_new_session=True)
    read_framed(..., pipe_reader(proc), ...)
    stop_group(proc, grace_s=2, linger_s=0)
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from collections.abc import Callable


def pipe_reader(proc: subprocess.Popen[bytes]) -> Callable[[float], bytes | None]:
    """``read_chunk(wait_s)`` over the child's stdout: bytes, ``b""`` at EOF, None when nothing came."""
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    fd = proc.stdout.fileno()

    def read_chunk(wait_s: float) -> bytes | None:
        if not sel.select(timeout=wait_s):
            return None
        return os.read(fd, 65536)

    return read_chunk


def stop_group(proc: subprocess.Popen[bytes], grace_s: float, linger_s: float = 0.0) -> None:
    """Let the child end by itself for ``linger_s``, else SIGTERM its process group (it was started in
    its own session) and SIGKILL it after ``grace_s``; then close its pipes."""
    deadline = time.monotonic() + linger_s
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, 15)
            deadline = time.monotonic() + grace_s
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass
    proc.wait(timeout=10)
    for stream in (proc.stdout, proc.stderr):
        if stream:
            stream.close()
