"""Every host's full observations, out of results.json: ``observations.jsonl.gz``, one gzip member per host.

    store = ObservationStore(run_dir)
    at = store.append(encode_observations("gpu001", observations))   # -> [offset, length]
    read_observations(run_dir, at)                                    # one host, nothing else read
    dict(iter_observations(run_dir))                                  # every host, streamed

Each host is appended as its own gzip member holding one JSON line ``{"host", "observations"}``:
the concatenation is an ordinary ``.jsonl.gz`` (``zcat`` reads it), a host can be read alone from
its ``[offset, length]`` (kept in results.json), and a run killed mid-write loses only the host being
written. ``encode_observations`` is pure, so worker processes compress in parallel.

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
from collections.abc import Iterable, Iterator, Mapping
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
    """One host's gzip member (pure; safe to call in a worker process): its observations as JSON
    (``jsoncodec.dumps``: dataclasses as objects, non-finite floats null)."""
    line = dumps({"host": host, "observations": observations})
    # Level 1: a higher level saves little space on a host's line for much more CPU (docs/performance.md)
    return gzip.compress(line + b"\n", compresslevel=1, mtime=0)


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


def read_observations(run_dir: Path, at: Any) -> dict[str, Any] | None:
    """One host's observations from its ``[offset, length]``; None when absent or unreadable."""
    path = Path(run_dir) / STORE
    if not (isinstance(at, list | tuple) and len(at) == 2 and all(isinstance(x, int) and x >= 0 for x in at)):
        return None
    try:
        with path.open("rb") as fh:
            fh.seek(at[0])
            record = loads(gzip.decompress(fh.read(at[1])))
    except (OSError, EOFError, ValueError, zlib.error):
        return None
    obs = record.get("observations") if isinstance(record, dict) else None
    return obs if isinstance(obs, dict) else None


def iter_observations(run_dir: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(host, observations) for every host in the store; stops quietly at a member cut by a kill."""
    path = Path(run_dir) / STORE
    if not path.is_file():
        return
    try:
        with gzip.open(path, "rb") as fh:
            for line in fh:
                try:
                    record = loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and isinstance(record.get("observations"), dict):
                    yield str(record.get("host")), record["observations"]
    except (OSError, EOFError, zlib.error):
        return
