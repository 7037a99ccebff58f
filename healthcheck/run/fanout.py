"""Fan-out: a bounded number of hosts in flight, each collected with one exec, graded, and
written to disk the moment it completes.

    runner = Runner(transport, probes, commands, forks=64, listeners=[progress])
    host_results = runner.run(hosts, grade=grade_one)

Hosts are collected in threads (they wait on the network) and graded in the thread that called
``run`` (the main one: grading is CPU-bound Python, which threads would only take turns at, and there
``run.gradelimit`` can bound a parser that runs away). Listeners get ``on_host_start(host)`` in the
collecting thread and ``on_host_done(host, result)`` once graded (the findings.jsonl appender and the
progress display are listeners).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed, wait
from typing import Any, Protocol

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import Finding, Host, HostCollection, Status
from healthcheck.core.spec import Probe, Transport
from healthcheck.store.results import HostResult
from healthcheck.transport.script import Command


class CommandConflictError(ValueError):
    pass


class Listener(Protocol):
    def on_host_start(self, host: Host) -> None: ...

    def on_host_done(self, host: Host, result: HostResult) -> None: ...


def plan_commands(probes: Sequence[Probe], options: Mapping[str, Any], timeout_s: float) -> list[Command]:
    """The union of the probes' commands, each id once; one id with two command lines is a bug."""
    commands: dict[str, Command] = {}
    for probe in probes:
        timeouts = getattr(probe, "command_timeouts", None) or {}
        if callable(timeouts):  # timeouts that depend on the options (e.g. the DCGM diag level)
            timeouts = timeouts(options)
        tools = getattr(probe, "command_tools", None) or {}
        for cid, line in probe.commands(options).items():
            cmd = Command(cid, line, float(timeouts.get(cid, timeout_s)), tuple(tools.get(cid, ())))
            known = commands.get(cid)
            if known is not None and known.line != line:
                raise CommandConflictError(f"command id {cid!r} has two command lines: {known.line!r} "
                                           f"and {line!r} (probe {probe.name})")
            if known is not None:  # the longest timeout, and every tool any probe declares
                cmd = Command(cid, line, max(cmd.timeout_s, known.timeout_s),
                              tuple(dict.fromkeys(known.tools + cmd.tools)))
            commands[cid] = cmd
    return list(commands.values())


def host_deadline(commands: Sequence[Command], kill_after_s: float, margin_s: float) -> float:
    return sum(c.timeout_s + kill_after_s for c in commands) + margin_s


GradeFn = Callable[[Host, HostCollection], HostResult]
CollectedFn = Callable[[HostCollection], None]


CommandsFn = Callable[[Host], Sequence[Command]]


class Runner:
    """``commands_for(host)`` gives each host its command list (it depends on the host's profile:
    e.g. the profile's required mounts); ``deadline_for(commands)`` its host deadline.

    The sweep ends early on Ctrl-C or SIGTERM (``interrupted``) or when a worker calls ``stop``
    (the run directory became unwritable: ``stop_reason``): hosts not started are left out of the
    results, hosts in flight get ``grace_s`` to finish (a second signal ends the grace at once), and
    a host still in flight after that is reported by ``abandoned`` and writes nothing any more."""

    def __init__(self, transport: Transport, commands_for: CommandsFn, forks: int,
                 deadline_for: Callable[[Sequence[Command]], float], listeners: Sequence[Listener] = (),
                 on_collected: CollectedFn | None = None, grace_s: float = DEFAULTS.interrupt_grace_s) -> None:
        self.transport = transport
        self.commands_for = commands_for
        self.forks = max(1, forks)
        self.deadline_for = deadline_for
        self.listeners = list(listeners)
        self.on_collected = on_collected
        self.grace_s = grace_s
        self.interrupted = False
        self.stop_reason: str | None = None
        self.abandoned: list[str] = []
        self._closed = False

    def stop(self, reason: str) -> None:
        """End the sweep early: hosts not started are not swept (called from a worker)."""
        self.stop_reason = self.stop_reason or reason

    def _one(self, host: Host) -> HostCollection | None:
        """Collect one host (in a pool thread); None when the sweep ended before or while it ran."""
        if self.stop_reason is not None or self._closed:
            return None
        for listener in self.listeners:
            listener.on_host_start(host)
        try:
            commands = list(self.commands_for(host))
            collection = self.transport.collect(host, commands, self.deadline_for(commands))
        except Exception as exc:  # a transport bug must not end the sweep
            collection = HostCollection(host=host.name, results={},
                                        transport_error=f"transport crashed: {type(exc).__name__}: {exc}")
        if self._closed:  # the run ended without this host (grace over): write nothing after results.json
            return None
        if self.on_collected is not None:
            self.on_collected(collection)
        return collection

    def _grade(self, host: Host, collection: HostCollection, grade: GradeFn) -> HostResult:
        try:
            result = grade(host, collection)
        except Exception as exc:
            result = HostResult(name=host.name, profile=host.profile, group=host.group, findings=[
                Finding(host=host.name, check="host.grade", status=Status.ERROR,
                        message=f"grading crashed: {type(exc).__name__}: {exc}",
                        remedy="A healthcheck bug: attach the run directory's raw outputs")])
        for listener in self.listeners:
            listener.on_host_done(host, result)
        return result

    def run(self, hosts: Sequence[Host], grade: GradeFn) -> dict[str, HostResult]:
        """Every host's result (see the class docstring for how a sweep ends early)."""
        results: dict[str, HostResult] = {}
        self.interrupted, self._closed, self.abandoned = False, False, []
        pool = ThreadPoolExecutor(max_workers=min(self.forks, max(1, len(hosts))), thread_name_prefix="hc-host")
        futures = {pool.submit(self._one, host): host for host in hosts}
        pending: set[Future[HostCollection | None]] = set(futures)
        try:
            for future in as_completed(futures):
                pending.discard(future)
                self._gather({future}, futures, results, grade)
                if self.stop_reason is not None:
                    break
        except KeyboardInterrupt:
            self.interrupted = True
        for future in pending:
            future.cancel()
        self._grace({f for f in pending if not f.cancelled()}, futures, results, grade)
        self._closed = True
        pool.shutdown(wait=False, cancel_futures=True)
        return results

    def _gather(self, done: set[Future[HostCollection | None]], futures: Mapping[Future[HostCollection | None], Host],
                results: dict[str, HostResult], grade: GradeFn) -> None:
        """Grade the collected hosts of ``done``. A host whose grading a signal cut short is abandoned
        (its raw outputs are on disk; it is reported as not swept), and the signal goes on up."""
        for future in done:
            if future.cancelled() or future.result() is None:
                continue
            host = futures[future]
            try:
                results[host.name] = self._grade(host, future.result(), grade)  # type: ignore[arg-type]
            except KeyboardInterrupt:
                self.abandoned.append(host.name)
                raise

    def _grace(self, running: set[Future[HostCollection | None]],
               futures: Mapping[Future[HostCollection | None], Host], results: dict[str, HostResult],
               grade: GradeFn) -> None:
        """Hosts in flight finish within the grace (a second Ctrl-C/SIGTERM ends it now)."""
        in_flight = set(running)
        try:
            done, running = wait(running, timeout=self.grace_s)
            self._gather(done, futures, results, grade)
        except KeyboardInterrupt:
            running = in_flight  # whatever was not graded by now is abandoned
        self.abandoned += [futures[f].name for f in running if futures[f].name not in results
                           and futures[f].name not in self.abandoned]
