"""Where scheduler commands run: here (subprocess, argv list) or on a controller host over a transport.

    controller = Controller()                                   # this machine
    controller = Controller(Host("slurmctl01"), open_transport("ssh"))   # the inventory's controller
    states, error = read_states(SLURM, controller, ["gpu001", "gpu003"])
    fleet, error = read_fleet(SLURM, controller)                 # every node the scheduler knows
    outcomes = apply_actions(actions, controller)

Locally the argv list is executed directly (no shell). Remotely it is ``shlex.join``ed, the only
safe way to hand an argv to a remote shell. Failures come back as ``CommandResult`` values
(``transport_error`` set when the tool or host could not be reached), never as exceptions.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from healthcheck.core.model import CommandResult, Host
from healthcheck.core.spec import ParseError, Transport
from healthcheck.ops.schedulers.base import Action, Scheduler

DEFAULT_TIMEOUT_S = 60.0


class Controller:
    """Runs argv lists locally, or on ``host`` through ``transport`` when both are given."""

    def __init__(self, host: Host | None = None, transport: Transport | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        if (host is None) != (transport is None):
            raise ValueError("a remote controller needs both a host and a transport")
        self.host = host
        self.transport = transport
        self.timeout_s = timeout_s

    @property
    def where(self) -> str:
        return self.host.name if self.host else "localhost"

    def run(self, argv: Sequence[str], command_id: str = "scheduler") -> CommandResult:
        if self.host is not None and self.transport is not None:
            return self.transport.run(self.host, shlex.join(argv), self.timeout_s, command_id=command_id)
        return _run_local(list(argv), self.timeout_s, command_id)


def _run_local(argv: list[str], timeout_s: float, command_id: str) -> CommandResult:
    start = time.monotonic()
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return CommandResult("localhost", command_id, transport_error=f"{argv[0]}: command not found")
    except subprocess.TimeoutExpired as exc:
        return CommandResult("localhost", command_id, stdout=exc.stdout or b"", stderr=exc.stderr or b"",
                             duration_s=timeout_s, timed_out=True)
    except OSError as exc:
        return CommandResult("localhost", command_id, transport_error=f"{argv[0]}: {exc}")
    return CommandResult("localhost", command_id, stdout=proc.stdout, stderr=proc.stderr,
                         rc=proc.returncode, duration_s=time.monotonic() - start)


def failure_text(result: CommandResult) -> str | None:
    """Why a command failed, in one line, or None when it ran and exited 0."""
    if result.transport_error:
        return result.transport_error
    if result.timed_out:
        return "timed out"
    if result.rc != 0:
        detail = (result.err_text.strip() or result.text.strip()).splitlines()
        return f"rc={result.rc}" + (f": {detail[-1]}" if detail else "")
    return None


def read_states(scheduler: Scheduler, controller: Controller, nodes: Sequence[str]) -> tuple[Any, str | None]:
    """The scheduler's state of ``nodes``, or (None, why) when it could not be read.

    A non-zero rc with parseable output is accepted: ``scontrol show node a,b`` exits 1 when one
    of them is unknown and still prints the others.
    """
    if not nodes:
        return None, None  # nothing to ask about: there will be no action either
    return _read(scheduler, controller, scheduler.query_argv(nodes))


def read_fleet(scheduler: Scheduler, controller: Controller) -> tuple[Any, str | None]:
    """The state of every node the scheduler knows, or (None, why) when it could not be read."""
    return _read(scheduler, controller, scheduler.fleet_argv())


def _read(scheduler: Scheduler, controller: Controller, argv: list[str]) -> tuple[Any, str | None]:
    result = controller.run(argv, command_id=f"{scheduler.name}-query")
    if result.transport_error or result.timed_out or (result.rc != 0 and not result.text.strip()):
        return None, f"{shlex.join(argv[:3])} on {controller.where}: {failure_text(result)}"
    try:
        return scheduler.parse_state(result.text), None
    except ParseError as exc:
        return None, (f"cannot read {scheduler.name} state on {controller.where}: {exc} "
                      f"({failure_text(result) or 'rc=0'})")


@dataclass(frozen=True)
class Outcome:
    action: Action
    results: tuple[CommandResult, ...]

    @property
    def error(self) -> str | None:
        for r in self.results:
            if (why := failure_text(r)) is not None:
                return why
        return None


def apply_actions(actions: Sequence[Action], controller: Controller) -> list[Outcome]:
    """Run each action's argv lists in order; stop an action at its first failing command."""
    outcomes = []
    for action in actions:
        if action.skipped or action.unchecked:
            continue
        results = []
        for argv in action.argvs:
            results.append(controller.run(argv, command_id="scheduler-update"))
            if failure_text(results[-1]) is not None:
                break
        outcomes.append(Outcome(action, tuple(results)))
    return outcomes
