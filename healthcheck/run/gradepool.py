"""Replay grading in worker processes: parse and evaluate on every core, the bundle read host by host.

    job = GradeJob(raw=raw_dir(bundle), names=frozenset(host_names(bundle)), probes=selected,
                   profiles=profiles, options=options, previous={})
    grade_hosts(job, hosts, workers=2, on_done=lambda graded: ...)   # in host order

Grading is CPU-bound Python, so threads would share one core; worker processes
forked from the run inherit its probes, profiles and options, and only host names go out and
results come back. Each worker reads one host's folder, grades it exactly as a live sweep does
(``stages.grade_host``), and returns its findings, its key observations and its full observations
already compressed (``observation_store.encode_observations``). The findings travel as columns
of plain values and are rebuilt in the run's process with their repeated strings shared (``Graded``
pickles through ``_received``): that process keeps every host's findings until the reports are written.
A host whose grading crashes, or whose worker dies, gets a ``host.grade`` ERROR; the others go on.
One worker, or a platform without ``fork``, grades in-process.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter
from pathlib import Path
from typing import Any

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.hostvars import host_profile
from healthcheck.core.model import Finding, Host, HostCollection, Status
from healthcheck.core.profiles import EMPTY_PROFILE, Profile
from healthcheck.core.spec import Probe
from healthcheck.run.baselines import current_assets, reset_swapped
from healthcheck.run.fleetinputs import fleet_inputs
from healthcheck.run.nodegrading import host_digest, take_node_grading
from healthcheck.run.stages import grade_host
from healthcheck.store.bundle import read_bundle_host, read_referenced_host
from healthcheck.store.hostrefs import HostRef
from healthcheck.store.jsoncodec import plain
from healthcheck.store.observation_store import encode_observations, key_observations

CHUNK = 8  # hosts per task sent to a worker: fewer round trips, still an even spread
REGRADE = {"taken": False, "why": "merge --regrade: graded from its outputs"}


@dataclass(frozen=True)
class GradeJob:
    """What every worker needs, inherited through fork (never pickled)."""

    raw: Path
    names: frozenset[str]
    probes: Sequence[Probe]
    profiles: Mapping[str, Profile]
    options: Mapping[str, Any]
    previous: Mapping[str, Mapping[str, Any]]
    expect_meta: bool = False  # the bundle is a run directory we wrote: a host without _host.json is incomplete
    refs: Mapping[str, HostRef] = field(default_factory=dict)  # a merged run's hosts, read in their bundles
    node_grading: str = ""  # a merge: "take" a node's own grading when graded as here (run.nodegrading), "regrade"

    @property
    def expect_outputs(self) -> bool:
        """A host folder without outputs is an error only when some probe needs them."""
        return bool(self.probes)


@dataclass(frozen=True)
class Graded:
    host: str
    findings: list[Finding]
    key: dict[str, Any]
    member: bytes  # the full observations, one gzip member of observations.jsonl.gz
    grading: Mapping[str, Any] | None = None   # a merge's: node grading taken or not, and why
    columns: list[list[Any]] | None = field(default=None, compare=False)  # findings as cells, not yet built
    compared: Mapping[str, Any] | None = None  # what the fleet checks compare of the host (run.fleetinputs)

    def __reduce__(self) -> tuple[Any, ...]:
        """Sent from a worker as columns of plain values; rebuilt with shared strings (``_received``)."""
        columns = self.columns if self.columns is not None else list(zip(*map(_FINDING_ROW, self.findings),
                                                                         strict=True))
        return _received, (self.host, columns, self.key, self.member, self.grading, self.compared)

    def built(self) -> Graded:
        """With its findings built, where they came as cells (a node's grading, taken in this process)."""
        if self.columns is None:
            return self
        return Graded(self.host, _rebuilt([list(c) for c in self.columns]), self.key, self.member, self.grading,
                      compared=self.compared)


_FINDING_ROW = attrgetter(*Finding.__dataclass_fields__)  # every field, in order: Finding(*row) rebuilds them
_TEXT_FIELDS = frozenset(i for i, name in enumerate(Finding.__dataclass_fields__)
                         if name in ("host", "check", "message", "component", "unit", "remedy", "source"))
_STRINGS: dict[str, str] = {}  # one object per distinct text received; cleared at _MAX_STRINGS (bounded)
_MAX_STRINGS = 200_000
_TEXT_TYPES = {str, type(None)}


def _received(host: str, columns: list[tuple[Any, ...]], key: dict[str, Any], member: bytes,
              grading: Mapping[str, Any] | None = None, compared: Mapping[str, Any] | None = None) -> Graded:
    """A worker's result in the run's process, which keeps every host's findings and key observations
    until the reports are written: check names, remedies, messages and observation keys repeated on
    thousands of hosts become one shared string each instead of a copy per host.
    Strings are immutable, so sharing them is safe; every container here is new."""
    if len(_STRINGS) > _MAX_STRINGS:
        _STRINGS.clear()
    columns = [_shared_column(column, index in _TEXT_FIELDS) for index, column in enumerate(columns)]
    return Graded(_STRINGS.setdefault(host, host), _rebuilt(columns), _shared(key), member, grading,
                  compared=None if compared is None else _shared(compared, {}))


def _rebuilt(columns: list[Sequence[Any]]) -> list[Finding]:
    """``Finding(*row)`` for each row of a worker's columns (every field, ``_FINDING_ROW``'s order)."""
    if not columns:  # a host without findings
        return []
    built = list(map(object.__new__, repeat(Finding, len(columns[0]))))
    # optimization: the worker built each finding by its constructor; here they are copied field by field
    for set_field, column in zip(_FIELD_SETTERS, columns, strict=True):
        deque(map(set_field, built, column), maxlen=0)
    return built


_FIELD_SETTERS = tuple(getattr(Finding, name).__set__ for name in Finding.__dataclass_fields__)  # slot setters


def _shared_column(column: tuple[Any, ...], text: bool) -> Sequence[Any]:
    """Exact ``str`` values shared, anything else (None, numbers, a str subclass such as an Enum) kept as is."""
    if text and set(map(type, column)) <= _TEXT_TYPES:  # the usual case: one C-level pass
        return list(map(_STRINGS.setdefault, column, column))
    return [_STRINGS.setdefault(v, v) if type(v) is str else v for v in column]


def _shared(value: Any, seen: dict[int, Any] | None = None) -> Any:
    """A JSON value (key observations) with its strings shared through ``_STRINGS``; containers are new.
    ``seen``: a container met twice (the fleet inputs' readers keep the same counters) is made new once."""
    kind = type(value)
    if kind is str:
        return _STRINGS.setdefault(value, value)
    if kind is not dict and kind is not list:
        return value
    if seen is not None and id(value) in seen:
        return seen[id(value)]
    if kind is dict:
        out: Any = {_STRINGS.setdefault(k, k) if type(k) is str else k: _shared(v, seen) for k, v in value.items()}
    else:
        out = [_shared(v, seen) for v in value]
    if seen is not None:
        seen[id(value)] = out
    return out


def _crashed(host: Host, what: str) -> Graded:
    finding = Finding(host=host.name, check="host.grade", status=Status.ERROR, expected="graded",
                      message=f"grading crashed: {what}",
                      remedy="A healthcheck bug: attach the run directory's raw outputs")
    return Graded(host.name, [finding], {}, encode_observations(host.name, {}))


def grade_collection(job: GradeJob, host: Host, collection: HostCollection, transport: str,
                     preparsed: Mapping[str, Any] | None = None) -> tuple[list[Finding], dict[str, Any]]:
    """One host's findings and observations, as every sweep grades them (live runs call it too): the
    host's profile with its host vars, and counter baselines reset for swapped GPUs and HCAs."""
    profile = host_profile(host, job.profiles.get(host.profile or "", EMPTY_PROFILE))
    before = job.previous.get(host.name)
    if before and "assets" in before:  # a swapped GPU/HCA starts a fresh counter baseline
        before, _ = reset_swapped(before, current_assets(collection.results), host.name)
    return grade_host(host, collection, job.probes, profile, transport, before, job.options, preparsed)


def grade_one(job: GradeJob, host: Host) -> Graded:
    """Read and grade one host of the bundle (or take its node's grading, ``job.node_grading``); never raises."""
    try:
        grading = REGRADE if job.node_grading == "regrade" and host.name in job.refs else None
        if job.node_grading == "take" and host.name in job.refs:
            names = [p.name for p in job.probes]
            taken, grading = take_node_grading(job.refs[host.name], host.name, names, host_digest(host, job.profiles))
            if taken is not None:  # its findings travel as the table's cells, built once where they are kept
                cells, observations, member = taken
                return Graded(host.name, [], plain(key_observations(observations)), member, grading, cells)
        if host.name in job.refs:  # another bundle's folder: whether it lacks a _host.json is not ours to judge
            collection = read_referenced_host(job.refs[host.name], host.name, False, job.expect_outputs)
        elif host.name in job.names:
            collection = read_bundle_host(job.raw, host.name, job.expect_meta, job.expect_outputs)
        else:
            collection = HostCollection(host=host.name, results={},
                                        transport_error=f"host {host.name} is not in bundle {job.raw.parent}")
        findings, observations = grade_collection(job, host, collection, "replay")
        return Graded(host.name, findings, plain(key_observations(observations)),
                      encode_observations(host.name, observations), grading, compared=fleet_inputs(observations))
    except Exception as exc:
        return _crashed(host, f"{type(exc).__name__}: {exc}")


_JOB: GradeJob | None = None


def _init(job: GradeJob) -> None:
    global _JOB
    _JOB = job
    # Forked while the run's process pauses its collector (pipeline): a worker collects its own garbage, but
    # never walks what it inherited (the run's hosts, profiles, modules): frozen, a full collection skips it
    # and leaves those pages shared with the parent.
    gc.freeze()
    gc.enable()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it stops handing out hosts


def _work(host: Host) -> Graded:
    assert _JOB is not None, "worker started without its GradeJob"
    return grade_one(_JOB, host)


def worker_count(hosts: int, requested: int | None = None) -> int:
    """Processes for ``hosts``: the request, else ``DEFAULTS.grade_workers`` or one per core; 1 for few hosts."""
    wanted = requested or DEFAULTS.grade_workers or os.cpu_count() or 1
    if requested is None and hosts < DEFAULTS.grade_pool_min_hosts:
        return 1
    return max(1, min(wanted, hosts))


def grade_hosts(job: GradeJob, hosts: Sequence[Host], workers: int, on_done: Callable[[Graded], None]) -> None:
    """Grade ``hosts`` in order, calling ``on_done`` in this process as each result arrives."""
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        for host in hosts:
            on_done(grade_one(job, host).built())
        return
    done = 0
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"), initializer=_init,
                               initargs=(job,))
    try:
        for graded in pool.map(_work, hosts, chunksize=CHUNK):
            on_done(graded)
            done += 1
    except BrokenProcessPool as exc:  # a worker was killed (OOM killer, signal): the rest are ERRORs
        for host in hosts[done:]:
            on_done(_crashed(host, f"worker process died ({exc})"))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
