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
views, the asset inventory and its diff read for every host (versions, system, benchmark job
summaries, assets, and each probe's top-level scalars such as the GPU count and driver version).
"""

from __future__ import annotations

import gzip
import json
import os
import threading
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

STORE = "observations.jsonl.gz"
KEY_PROBES = ("system", "versions", "benchmarks", "assets")  # kept whole in results.json (read for every host)


def key_observations(observations: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a host's observations results.json keeps: ``KEY_PROBES`` whole, other probes'
    top-level scalar fields (``gpu.count``, ``gpu.driver_version``); lists and records stay in the store."""
    out: dict[str, Any] = {}
    for probe, obs in observations.items():
        if probe in KEY_PROBES or not isinstance(obs, Mapping):
            out[probe] = obs
            continue
        scalars = {k: v for k, v in obs.items() if not isinstance(v, list | dict)}
        if scalars:
            out[probe] = scalars
    return out


def encode_observations(host: str, observations: Mapping[str, Any]) -> bytes:
    """One host's gzip member (pure; safe to call in a worker process)."""
    line = _LINE({"host": host, "observations": observations})
    # Level 1: on a host's ~70 KB line, level 6 gives ~18% smaller members for ~2.5x the CPU (measured)
    return gzip.compress(line.encode() + b"\n", compresslevel=1, mtime=0)


# json.dumps's, built once; check_circular off (~10% of the encoding): the plain observations are a tree,
# built fresh by to_jsonable (which recursion would end on a cycle first)
_LINE = json.JSONEncoder(separators=(",", ":"), default=str, check_circular=False).encode


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
                os.write(fd, member)
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
            record = json.loads(gzip.decompress(fh.read(at[1])))
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
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and isinstance(record.get("observations"), dict):
                    yield str(record.get("host")), record["observations"]
    except (OSError, EOFError, zlib.error):
        return
