"""Fan-out: a bounded number of hosts in flight, each collected with one exec, graded, and
written to disk the moment it completes.

    runner = Runner(transport, probes, commands, forks=64, listeners=[progress])
    host_results = runner.run(hosts, grade=grade_one)

Listeners get ``on_host_start(host)`` and ``on_host_done(host, result)`` (the findings.jsonl
appender and the progress display are listeners).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, Protocol

from healthcheck.model import Finding, Host, HostCollection, Status
from healthcheck.results import HostResult
from healthcheck.spec import Probe, Transport
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
    e.g. the profile's required mounts); ``deadline_for(commands)`` its host deadline."""

    def __init__(self, transport: Transport, commands_for: CommandsFn, forks: int,
                 deadline_for: Callable[[Sequence[Command]], float], listeners: Sequence[Listener] = (),
                 on_collected: CollectedFn | None = None) -> None:
        self.transport = transport
        self.commands_for = commands_for
        self.forks = max(1, forks)
        self.deadline_for = deadline_for
        self.listeners = list(listeners)
        self.on_collected = on_collected
        self.interrupted = False

    def _one(self, host: Host, grade: GradeFn) -> HostResult:
        for listener in self.listeners:
            listener.on_host_start(host)
        try:
            commands = list(self.commands_for(host))
            collection = self.transport.collect(host, commands, self.deadline_for(commands))
        except Exception as exc:  # a transport bug must not end the sweep
            collection = HostCollection(host=host.name, results={},
                                        transport_error=f"transport crashed: {type(exc).__name__}: {exc}")
        if self.on_collected is not None:
            self.on_collected(collection)
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
        """Every host's result. On Ctrl-C, hosts not yet started are cancelled, hosts in flight
        finish (bounded by their deadline), ``interrupted`` is set and the partial results return."""
        results: dict[str, HostResult] = {}
        self.interrupted = False
        with ThreadPoolExecutor(max_workers=min(self.forks, max(1, len(hosts))),
                                thread_name_prefix="hc-host") as pool:
            futures = {pool.submit(self._one, host, grade): host for host in hosts}
            try:
                for future in as_completed(futures):
                    results[futures[future].name] = future.result()
            except KeyboardInterrupt:
                self.interrupted = True
                for future in futures:
                    future.cancel()
        for future, host in futures.items():
            if host.name not in results and future.done() and not future.cancelled():
                results[host.name] = future.result()
        return results
