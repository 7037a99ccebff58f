"""The index a merge grades: each chosen host referenced in its node bundle, nothing copied.

    names = stage_index(index, chosen, expected_hosts, sources, skipped)   # manifest + raw/_source.json
    kept = keep_excerpts(run_dir, results, refs)    # what the report shows of failing hosts, kept in the run

The index (a hidden folder beside the run directory, removed after grading) holds a manifest listing
the hosts, ``raw/_source.json`` naming each chosen host's bundle and whether a node wrote it
(``store.hostrefs``), and a small "no result from node" folder for each expected host that no source
holds: a few files in all, whatever the fleet's size. The replay grades it reading every host's outputs
where they are, as untrusted input (plain names, no link followed; in a node's spool folder
``store.bundle.NODE_RULES``: one hard link per file, bounded size); the run directory references the same
bundles. What the HTML report shows of the node bundles (the first ``KEPT_BYTES`` of each output its
detailed hosts' WARN/FAIL/ERROR findings name: a few hundred hosts at most) is copied into
``raw/_kept/<host>/``, so the run re-renders after the node bundles are replaced or removed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from healthcheck.core.profiles import available_profiles
from healthcheck.ops.bundletrust import OLDEST, trusted_entry
from healthcheck.reports.html import excerpted_outputs
from healthcheck.store.bundle import NO_RESULT, PLAIN_FILE
from healthcheck.store.hostrefs import KEPT, HostRef, open_host_folder, write_host_refs
from healthcheck.store.results import RunResults
from healthcheck.store.rundir import HOST_META, write_json
from healthcheck.store.safeio import BundleFileError, read_regular

KEPT_BYTES = 16 << 10     # the report shows 4 KiB of an output; a little more tells it was cut


@dataclass(frozen=True)
class Candidate:
    """One host's collection found in one source bundle."""

    host: str
    folder: Path                      # <bundle>/raw/<host>
    bundle: Path                      # absolute, its parent resolved (hostrefs)
    order: int                        # position of its source on the command line
    spool: bool = False               # found in a spool folder: written by the node (hostrefs.HostRef)
    collected_at: str = ""
    reachable: bool = True
    entry: dict[str, Any] | None = None   # the host's entry in that bundle's manifest (profile)
    probes: tuple[str, ...] = ()          # probes that bundle ran (results.json), when it says
    when: datetime = OLDEST                # collected_at as ranked (bundletrust.collection_time)


def stage_index(index: Path, chosen: Mapping[str, Candidate], expected: Sequence[Any] | None,
                sources: Sequence[Path], skipped: list[str]) -> list[str]:
    """Write the index bundle: a manifest listing the hosts, the chosen hosts' references, and a
    ``no result from node`` collection for each expected host that no source holds. Returns the names."""
    raw = index / "raw"
    raw.mkdir(parents=True)
    names = [h.name for h in expected] if expected is not None else sorted(chosen)
    for extra in sorted(set(chosen) - set(names)):
        skipped.append(f"{chosen[extra].folder}: host {extra} is not in the inventory: not graded")
    write_host_refs(raw, {name: HostRef(chosen[name].bundle, chosen[name].spool) for name in names if name in chosen})
    where = ", ".join(str(s) for s in sources)
    for name in names:
        if name not in chosen:
            _no_result(raw / name, f"{NO_RESULT}: in none of the merged sources ({where})")
    if expected is not None:
        entries = [h.to_json() for h in expected]
    else:
        known = set(available_profiles())
        entries = [trusted_entry(n, chosen[n].entry, known, skipped) for n in names]
    write_json(index / "manifest.json", {"mode": "merge", "hosts": entries})
    return names


def _no_result(folder: Path, why: str) -> None:
    folder.mkdir()
    write_json(folder / HOST_META, {"transport_error": why, "collected_at": "", "commands": {}})


def keep_excerpts(run_dir: Path, results: RunResults, refs: Mapping[str, HostRef]) -> int:
    """Copy the first ``KEPT_BYTES`` of each referenced output whose excerpt the HTML report shows
    (``reports.html.excerpted_outputs``: at most a few hundred hosts) into ``raw/_kept/<host>/``, read as
    the grading read it (no link; one hard link in a spool). Returns the files kept."""
    kept = 0
    for name, sources in excerpted_outputs(results).items():
        wanted = [f"{cid}.out" for cid in sources if PLAIN_FILE.match(f"{cid}.out")]
        if name not in refs or not wanted:
            continue
        try:
            folder = open_host_folder(refs[name].bundle, name)
        except OSError:
            continue  # gone since it was graded: its findings say what there was
        try:
            kept += _keep(folder, wanted, Path(run_dir) / "raw" / KEPT / name, refs[name].spool)
        finally:
            os.close(folder)
    return kept


def _keep(folder: int, names: Sequence[str], target: Path, spool: bool) -> int:
    count = 0
    for file_name in names:
        try:
            data, _ = read_regular(file_name, KEPT_BYTES, folder, single_link=spool)
        except BundleFileError:
            continue
        target.mkdir(parents=True, exist_ok=True)
        (target / file_name).write_bytes(data)
        count += 1
    return count
