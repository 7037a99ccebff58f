"""Every host's full observations, out of results.json: ``observations.jsonl.gz``, one gzip member per host.

    store = ObservationStore(run_dir)
    at = store.append(encode_observations("gpu001", observations))   # -> [offset, length]
    read_observations(run_dir, at)                                    # one host, nothing else read
    read_observations(run_dir, at, probes=("rates",))                 # only its rates line decoded
    dict(iter_observations(run_dir, {"gpu001": at, ...}))             # hosts by offset, the file opened once

Each host is appended as its own gzip member holding one JSON line per probe,
``{"probe": "gpu", "host": "gpu001", "observations": ...}``: the concatenation is an ordinary ``.jsonl.gz``
(``zcat`` reads it, ``jq 'select(.probe == "gpu")'`` selects), a host is read alone from its
``[offset, length]`` (kept in results.json), a reader that wants some probes decodes only their lines (the
fleet's counters, the report's heat list), and a run killed mid-write loses only the host being written.
A member belongs to the host whose ``observations_at`` locates it: the ``host`` of its lines is for people
reading the file, never how a reader attributes them (a node's bundle is untrusted). Members of the one-line
form ``{"host", "observations": {probe: ...}}`` are read too. ``encode_observations`` is pure, so worker
processes compress in parallel.

results.json keeps only ``key_observations``: what fleet checks, the fleet view and the benchmark
views read for every host (versions, system, benchmark job summaries, and each probe's top-level scalars
such as the GPU count and driver version), and on the trays of a multi-node NVLink domain their fabric
and IMEX observations (the NVLink domain check). The asset inventory (serials, part numbers: the largest
observation a healthy host keeps) is read from here by the commands that need it (``healthcheck assets``,
``diff``, the history's swap check: ``load_results(run_dir, observations=("assets",))``).
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import os
import threading
import zlib
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from operator import attrgetter
from pathlib import Path
from typing import Any

from healthcheck.store.jsoncodec import dumps, loads

STORE = "observations.jsonl.gz"
KEY_PROBES = ("system", "versions", "benchmarks")  # kept whole in results.json (read for every host)
# kept whole only on hosts whose GPUs joined a multi-node NVLink domain (a cluster UUID other than all zeros):
# the NVLink domain fleet check groups those trays by them; elsewhere (HGX, PCIe) their scalars, as any probe's
DOMAIN_PROBES = ("fabric", "imex")
NO_DOMAIN = (None, "00000000-0000-0000-0000-000000000000")
LINE_START = b'{"probe":"'  # how encode_observations starts each line (orjson: no spaces), before the probe's name


def key_observations(observations: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a host's observations results.json keeps: ``KEY_PROBES`` whole, other probes' top-level
    scalar fields (``gpu.count``, ``gpu.driver_version``); lists and records stay in the store.
    ``observations`` are each probe's parsed records (dataclasses: ``jsoncodec.plain`` of the result is
    its JSON) or their JSON already (a stored run's), selected alike."""
    out: dict[str, Any] = {}
    whole = KEY_PROBES + DOMAIN_PROBES if in_nvlink_domain(observations) else KEY_PROBES
    for probe, obs in observations.items():
        fields = _fields(obs)
        if probe in whole or fields is None:
            out[probe] = obs
            continue
        scalars = {k: v for k, v in fields if not _nested(v)}
        if scalars:
            out[probe] = scalars
    return out


def in_nvlink_domain(observations: Mapping[str, Any]) -> bool:
    """Whether a GPU of the host reports a multi-node NVLink domain (``fabric`` observations, records or JSON)."""
    fields = _fields(observations.get("fabric"))
    gpus = dict(fields).get("gpus") if fields is not None else None
    return any(_field(g, "cluster_uuid") not in NO_DOMAIN for g in gpus or ())


def _field(record: Any, name: str) -> Any:
    return record.get(name) if isinstance(record, Mapping) else getattr(record, name, None)


def _fields(obs: Any) -> Iterable[tuple[str, Any]] | None:
    """A record's (name, value) pairs: a mapping's items or a dataclass's fields; None for anything else."""
    if isinstance(obs, Mapping):
        return obs.items()
    if dataclasses.is_dataclass(obs) and not isinstance(obs, type):
        names = _field_names(type(obs))
        return zip(names, attrgetter(*names)(obs) if len(names) > 1 else [getattr(obs, n) for n in names], strict=True)
    return None


@functools.lru_cache(maxsize=1024)
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


_SCALARS = frozenset({str, int, float, bool, type(None)})  # exact types: never nested, tested without a call


def _nested(value: Any) -> bool:
    """A value that JSON writes as an array or object (``jsoncodec``): a record or a collection."""
    return type(value) not in _SCALARS and (isinstance(value, list | tuple | set | frozenset | Mapping) or (
        dataclasses.is_dataclass(value) and not isinstance(value, type)))


def encode_observations(host: str, observations: Mapping[str, Any]) -> bytes:
    """One host's gzip member (pure; safe to call in a worker process): one JSON line per probe
    (``jsoncodec.dumps``: dataclasses as objects, non-finite floats null); no line for a host without any."""
    lines = b"".join(dumps({"probe": probe, "host": host, "observations": obs}) + b"\n"
                     for probe, obs in observations.items())
    # Level 1: a higher level saves little space on a host's lines for much more CPU (docs/performance.md)
    return gzip.compress(lines, compresslevel=1, mtime=0)


def member_observations(text: bytes, probes: Collection[str] | None = None) -> dict[str, Any]:
    """An inflated member's observations by probe; with ``probes``, only those probes' lines are decoded
    (a line this module wrote names its probe first, so the others are passed over unread). A line that is
    not JSON is left out; a one-line-form member's probes are read from its one line."""
    skip = None if probes is None else tuple(LINE_START + p.encode() + b'",' for p in probes)
    out: dict[str, Any] = {}
    for line in text.splitlines():
        if not line or (skip is not None and line.startswith(LINE_START) and not line.startswith(skip)):
            continue
        try:
            record = loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        probe, obs = record.get("probe"), record.get("observations")
        if isinstance(probe, str):
            if probes is None or probe in probes:
                out[probe] = obs
        elif "probe" not in record and isinstance(obs, dict):
            out.update(obs if probes is None else {p: v for p, v in obs.items() if p in probes})
    return out


class ObservationStore:
    """Appender for ``observations.jsonl.gz``; thread-safe, one writer process."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / STORE
        self._lock = threading.Lock()
        self._size = self.path.stat().st_size if self.path.exists() else 0

    def append(self, member: bytes) -> list[int]:
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                view = memoryview(member)
                while view:  # a full disk gives a short write, then ENOSPC: never a silent partial member
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            offset, self._size = self._size, self._size + len(member)
        return [offset, len(member)]


def read_observations(run_dir: Path, at: Any, probes: Collection[str] | None = None) -> dict[str, Any] | None:
    """One host's observations (``probes`` only, when given) from its ``[offset, length]``; None when absent
    or unreadable."""
    if not _located(at):
        return None
    try:
        with (Path(run_dir) / STORE).open("rb") as fh:
            return _read_member(fh, at, probes)
    except (OSError, EOFError, ValueError, zlib.error):
        return None


def iter_observations(run_dir: Path, where: Mapping[str, Any], probes: Collection[str] | None = None
                      ) -> Iterator[tuple[str, dict[str, Any]]]:
    """(host, observations) for each host of ``where`` (host -> ``observations_at``) that the store has,
    in the order of ``where``, the file opened once; a member that cannot be read is left out."""
    path = Path(run_dir) / STORE
    try:
        fh = path.open("rb")
    except OSError:
        return
    with fh:
        for host, at in where.items():
            if not _located(at):
                continue
            try:
                yield host, _read_member(fh, at, probes)
            except (OSError, EOFError, ValueError, zlib.error):
                continue


def _located(at: Any) -> bool:
    return isinstance(at, list | tuple) and len(at) == 2 and all(type(x) is int and x >= 0 for x in at)


def _read_member(fh: Any, at: Sequence[int], probes: Collection[str] | None) -> dict[str, Any]:
    fh.seek(at[0])
    return member_observations(gzip.decompress(fh.read(at[1])), probes)
