"""Live progress on a TTY: hosts done / failed / in flight with the slowest ones, then benchmark jobs.

    with ProgressDisplay(total=len(hosts), enabled=sys.stderr.isatty()) as progress:
        runner = Runner(..., listeners=[progress])
    # sweep ━━━━━━━━━━━━━━━━━━━━ 1873/2000 failed 12  in flight 64  slowest: gpu0007 58s, gpu1033 41s  0:02:11
    with JobProgress(enabled=...) as jobs:
        execute_benchmarks(..., listener=jobs)
    # bench ━━━━━━━━━━━ job 14 of 22  nccl pair (round 2)  running 4  0:08:40

Silent when not a TTY (cron, CI, tests): the status text is computed all the same (``status_text``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.text import Text

from healthcheck.benchmarks.plan import GROUP_SHAPES, stage_of
from healthcheck.core.model import Host, Status
from healthcheck.store.results import HostResult

SLOWEST = 3


class _LiveText(ProgressColumn):
    """A column re-rendered on every refresh (4/s), so in-flight durations tick without events."""

    def __init__(self, render: Callable[[], str]) -> None:
        super().__init__()
        self._render = render

    def render(self, task: Task) -> Text:
        return Text(self._render())


class ProgressDisplay:
    def __init__(self, total: int, enabled: bool, console: Console | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total = total
        self.enabled = enabled
        self.done = self.failed = 0
        self.started: dict[str, float] = {}  # in-flight host -> when it started
        self._clock = clock
        self._lock = threading.Lock()
        self._progress = Progress(TextColumn("[bold]sweep"), BarColumn(), MofNCompleteColumn(),
                                  _LiveText(self.status_text), TimeElapsedColumn(),
                                  console=console or Console(stderr=True), transient=False,
                                  disable=not enabled, refresh_per_second=4)
        self._task = self._progress.add_task("sweep", total=total)

    @property
    def in_flight(self) -> int:
        return len(self.started)

    def __enter__(self) -> ProgressDisplay:
        self._progress.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._progress.stop()

    def status_text(self) -> str:
        """``failed N  in flight K  slowest: host 58s, ...`` (the slowest in-flight hosts)."""
        with self._lock:
            now = self._clock()
            slow = sorted(self.started.items(), key=lambda kv: kv[1])[:SLOWEST]
            failed, in_flight = self.failed, len(self.started)
        text = f"failed {failed}  in flight {in_flight}"
        if slow:
            text += "  slowest: " + ", ".join(f"{name} {now - start:.0f}s" for name, start in slow)
        return text

    def on_host_start(self, host: Host) -> None:
        with self._lock:
            self.started[host.name] = self._clock()

    def on_host_done(self, host: Host, result: HostResult) -> None:
        with self._lock:
            self.started.pop(host.name, None)
            self.done += 1
            if result.verdict in (Status.FAIL, Status.ERROR):
                self.failed += 1
        self._progress.update(self._task, advance=1)


class JobProgress:
    """Benchmark jobs: ``job i of n``, the stage of the newest job, how many run now, how many failed."""

    def __init__(self, enabled: bool, console: Console | None = None) -> None:
        self.planned = self.started = self.done = self.failed = 0
        self.running: dict[str, str] = {}   # job id -> stage label
        self.stage = ""
        self._lock = threading.Lock()
        self._progress = Progress(TextColumn("[bold]bench"), BarColumn(), _LiveText(self.status_text),
                                  TimeElapsedColumn(), console=console or Console(stderr=True),
                                  disable=not enabled, refresh_per_second=4)
        self._task = self._progress.add_task("bench", total=None)

    def __enter__(self) -> JobProgress:
        self._progress.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._progress.stop()

    @staticmethod
    def stage_label(job: Any) -> str:
        if job.shape in GROUP_SHAPES:  # the isolation's jobs: which of its rounds
            return f"{job.benchmark} isolate round {job.stage - stage_of('isolate')} ({job.test})"
        retest = " retest" if getattr(job, "retest_of", None) else ""
        return f"{job.benchmark} {job.shape}{retest} ({job.test})"

    def status_text(self) -> str:
        with self._lock:
            failed = f"  failed {self.failed}" if self.failed else ""
            return (f"job {self.started} of {self.planned}  {self.stage}  running {len(self.running)}"
                    f"  done {self.done}{failed}")

    def on_jobs_planned(self, count: int) -> None:
        with self._lock:
            self.planned += count
        self._progress.update(self._task, total=self.planned)

    def on_job_start(self, job: Any) -> None:
        with self._lock:
            self.started += 1
            self.stage = self.stage_label(job)
            self.running[job.job_id] = self.stage

    def on_job_done(self, outcome: Any) -> None:
        with self._lock:
            self.running.pop(outcome.job.job_id, None)
            self.done += 1
            self.failed += bool(outcome.rc not in (0, None) or outcome.timed_out or outcome.transport_error)
        self._progress.update(self._task, completed=self.done)
