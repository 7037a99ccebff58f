"""Live progress of a sweep: hosts done / failed / in flight (rich), silent when not a TTY.

    with ProgressDisplay(total=len(hosts), enabled=sys.stderr.isatty()) as progress:
        runner = Runner(..., listeners=[progress])
"""

from __future__ import annotations

import threading
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from healthcheck.model import Host, Status
from healthcheck.results import HostResult


class ProgressDisplay:
    def __init__(self, total: int, enabled: bool, console: Console | None = None) -> None:
        self.total = total
        self.enabled = enabled
        self.done = self.failed = self.in_flight = 0
        self._lock = threading.Lock()
        self._progress = Progress(TextColumn("[bold]sweep"), BarColumn(), MofNCompleteColumn(),
                                  TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
                                  console=console or Console(stderr=True), transient=False,
                                  disable=not enabled)
        self._task = self._progress.add_task("sweep", total=total, status="")

    def __enter__(self) -> ProgressDisplay:
        self._progress.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._progress.stop()

    def _status(self) -> str:
        return f"failed {self.failed}  in flight {self.in_flight}"

    def on_host_start(self, host: Host) -> None:
        with self._lock:
            self.in_flight += 1
            self._progress.update(self._task, status=self._status())

    def on_host_done(self, host: Host, result: HostResult) -> None:
        with self._lock:
            self.in_flight -= 1
            self.done += 1
            if result.verdict in (Status.FAIL, Status.ERROR):
                self.failed += 1
            self._progress.update(self._task, advance=1, status=self._status())
