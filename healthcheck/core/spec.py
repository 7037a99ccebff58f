"""The extension contracts: what a probe, fleet check, benchmark and reporter must provide.

Only signatures and semantics live here (like pytest's ``hookspec.py``). Concrete probes are
``ProbeSpec`` values registered in ``probes/``; the runner owns the stage loop
(collect -> parse -> evaluate) and turns every failure into a finding.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol, TypeVar

from healthcheck.core.model import CommandResult, Finding, Host, HostCollection, Status
from healthcheck.core.profiles import Profile


class ParseError(ValueError):
    """A tool's output could not be understood. ``excerpt`` holds the offending text."""

    def __init__(self, message: str, excerpt: str = "") -> None:
        super().__init__(message)
        self.excerpt = excerpt[:200]


F = TypeVar("F", bound=Callable[..., Any])


def parse_guarded(parse: F) -> F:
    """``parse`` with one more way of saying "garbage": Python refuses ``int()`` of a digit run longer
    than ``sys.get_int_max_str_digits()`` with a plain ``ValueError``; no tool prints such a number, so
    it is a ``ParseError`` (an ERROR naming the command), never a parser crash. Parsers bound their
    digit runs themselves; every registered probe and benchmark parser gets this as the backstop."""
    @functools.wraps(parse)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return parse(*args, **kwargs)
        except ParseError:
            raise
        except ValueError as exc:
            if "integer string conversion" not in str(exc):
                raise
            raise ParseError(f"a digit run longer than any number a tool prints ({exc})") from None
    return guarded  # type: ignore[return-value]


PREVIOUS_AT = "_collected_at"  # in a host's previous observations (by probe name): when that collection was recorded


@dataclass(frozen=True)
class EvalContext:
    """What an evaluator may know besides the observations.

    ``previous`` holds this host's observations from the previous run (JSON form, by probe name),
    or is empty when there is none: growth checks compare against it. ``options`` carries run
    options such as ``kernel_log_window_h``; ``now`` is the time the outputs were collected.
    ``collected_at`` and ``previous_at`` are the times the collector recorded for this collection and
    for the previous one (``_host.json`` ``collected_at``), None where none was recorded: an interval
    between them is one a node's own clock cannot stretch (``probes/rates.py``).
    """

    host: Host
    profile: Profile
    previous: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    now: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    collected_at: datetime | None = None
    previous_at: datetime | None = None


def recorded_time(text: Any) -> datetime | None:
    """An ISO-8601 time the collector recorded (naive reads as UTC), or None when absent or unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


class Probe(Protocol):
    """A subject checked on every host (gpu, nvlink, xid, ...).

    ``commands(options)`` maps stable command ids to the shell command run on the node (values
    from options must be ``shlex.quote``d by the probe). ``accepts`` lists further command ids the
    probe can read from a capture bundle (e.g. text ``nvidia-smi-q``). ``parse`` is pure: it gets
    the results present for its ids (never empty; transport errors, timeouts and missing tools
    were already turned into findings) and returns observations, raising ``ParseError`` on output
    it cannot understand. ``evaluate`` is pure and returns every finding, never stopping at the
    first bad GPU, link or port.
    """

    name: str
    description: str
    accepts: Sequence[str]
    missing_tool_status: Status

    def commands(self, options: Mapping[str, Any]) -> Mapping[str, str]: ...

    def parse(self, outputs: Mapping[str, CommandResult]) -> Any: ...

    def evaluate(self, observations: Any, ctx: EvalContext) -> list[Finding]: ...


@dataclass(frozen=True)
class LocalCollector:
    """Observations a probe gathers in this process when the run is on the node itself (``--local``).

    ``collect`` returns None where it cannot (no pynvml, no driver library): the probe then reads its
    commands' output as on any other host. The run bounds the call; a hang is a ``tool``
    (``run.nodetools``) hang finding describing the call as ``what``, and ``fallback`` says what the
    sweep did instead."""

    collect: Callable[[], Any]
    tool: str
    what: str
    fallback: str


@dataclass(frozen=True)
class ProbeSpec:
    """The usual way to implement ``Probe``: a value built from plain functions."""

    name: str
    description: str
    command_map: Mapping[str, str]
    parse_fn: Callable[[Mapping[str, CommandResult]], Any]
    evaluate_fn: Callable[[Any, EvalContext], list[Finding]]
    accepts: Sequence[str] = ()
    missing_tool_status: Status = Status.SKIP
    render_commands: Callable[[Mapping[str, Any]], Mapping[str, str]] | None = None
    unavailable: str | None = None  # set when a dependency is missing: selecting gives SKIP(why)
    # per-command timeout (s) overriding the run's default, e.g. {"dcgmi-diag": 3600.0}, or a function
    # of the run options giving that mapping (the DCGM diag timeout depends on the diag level)
    command_timeouts: Mapping[str, float] | Callable[[Mapping[str, Any]], Mapping[str, float]] = field(
        default_factory=dict)
    # the node tools each command depends on, e.g. {"nvidia-smi-topo": ("nvidia-smi",)} (names in
    # healthcheck/run/nodetools.py): once one of them hung on a node, the command is not started there
    command_tools: Mapping[str, Sequence[str]] = field(default_factory=dict)
    # observations gathered in this process when the run is on the node itself (``--local``): NVML for gpu
    collect_local: LocalCollector | None = None

    def commands(self, options: Mapping[str, Any]) -> Mapping[str, str]:
        if self.render_commands is not None:
            return self.render_commands(options)
        return self.command_map

    def parse(self, outputs: Mapping[str, CommandResult]) -> Any:
        return _guarded_parse(self.parse_fn, outputs)

    def evaluate(self, observations: Any, ctx: EvalContext) -> list[Finding]:
        return self.evaluate_fn(observations, ctx)


@parse_guarded
def _guarded_parse(parse_fn: Callable[[Mapping[str, CommandResult]], Any],
                   outputs: Mapping[str, CommandResult]) -> Any:
    return parse_fn(outputs)


class FleetCheck(Protocol):
    """A check across hosts (version consistency, fleet outliers), run after every host is done.

    ``observations`` maps host name -> probe name -> observations (JSON form) for hosts that
    produced them; hosts without a profile or observations are simply absent. A probe's observations
    are results.json's key ones (``store.observation_store.key_observations``: top-level scalars) unless
    the check names the probe in an optional ``reads`` tuple: then they are whole, or, when the check has
    ``keep(probe, observation) -> observation``, the part of them it compares, taken as each host is read
    (a fleet's whole counters are never held at once). A check may also have
    ``table(observations, hosts, profiles) -> dict``: top-level results.json sections it tabulates
    (the NVLink domain check's ``{"domains": [...]}``); {} when it has nothing to show.
    """

    name: str

    def evaluate_fleet(
        self, observations: Mapping[str, Mapping[str, Any]], hosts: Mapping[str, Host],
        profiles: Mapping[str, Profile],
    ) -> list[Finding]: ...


class Transport(Protocol):
    """How commands reach a host (``local``, ``ssh``, ``replay``).

    ``collect`` runs all ``commands`` in ONE remote exec and never raises for a host's failure: it
    returns a ``HostCollection`` whose ``transport_error`` says why (unreachable, auth, host key,
    deadline). ``run`` executes one ad-hoc command (benchmark launchers) the same way and returns
    a ``CommandResult`` with ``transport_error`` set instead of raising.
    """

    name: str

    def collect(self, host: Host, commands: Sequence[Any], deadline_s: float) -> HostCollection: ...

    def run(self, host: Host, command: str, timeout_s: float, command_id: str = "adhoc") -> CommandResult: ...


class Reporter(Protocol):
    """Writes one output format of a finished run into ``run_dir`` and returns the file written."""

    name: str

    def write(self, run_dir: Path) -> Path: ...
