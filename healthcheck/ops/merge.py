"""Merge node bundles (node-local spools, partial sweeps) into one run directory, then grade it fleet-wide.

    outcome = merge_bundles([Path("/shared/hc-spool"), Path("runs/20261122T031500Z")], Path("runs/nightly"),
                            inventory=Path("site.yaml"))
    outcome.results.verdict, outcome.provenance["gpu007"]   # {"source": ".../gpu007", "collected_at": ...}

A source is a bundle (a folder with ``raw/<host>/``: a run directory, a node-local ``<spool>/<host>/``,
a capture bundle) or a folder of bundles (a spool directory). Per host the newest collection wins
(``_host.json`` ``collected_at``; ``prefer="newest-reachable"`` passes over collections that failed
to reach the node, ``prefer="last"`` lets later sources win whatever their age). Hosts the inventory
expects but no source holds get ``host.reachable`` ERROR "no result from node". The chosen outputs are
copied into a staging bundle which ``healthcheck run --replay`` machinery grades: same parsers, fleet
checks and reports as any run, and the result replays again.

Inputs are untrusted: symlinks and special files are never followed (``O_NOFOLLOW``, ``lstat``),
host and file names must be plain (``raw/<host>/<command_id>.out|.err|.rc``, ``_host.json``), each
file is read at most ``max_file_bytes`` (larger ones are skipped and reported). Every skipped entry
is listed in ``merge.json`` beside the results.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.profiles import available_profiles
from healthcheck.inventory.load import load_inventory
from healthcheck.run.execute import execute_run
from healthcheck.run.options import OutputOptions, RunOptions, SelectionOptions, TargetOptions
from healthcheck.run.outcome import RunOutcome
from healthcheck.store.rundir import HOST_META, RAW_SOURCE, write_json
from healthcheck.store.safeio import BundleFileError, read_regular

PREFER = ("newest", "newest-reachable", "last")
HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$")
FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,200}\.(out|err|rc)$")
MAX_FILE_BYTES = 64 << 20   # 16x the default per-stream output cap
NO_RESULT = "no result from node"


@dataclass(frozen=True)
class Candidate:
    """One host's collection found in one source bundle."""

    host: str
    folder: Path                      # <bundle>/raw/<host>
    bundle: Path
    order: int                        # position of its source on the command line
    collected_at: str = ""
    reachable: bool = True
    entry: dict[str, Any] | None = None   # the host's entry in that bundle's manifest (profile, vars)
    probes: tuple[str, ...] = ()          # probes that bundle ran (results.json), when it says


@dataclass
class MergeOutcome:
    run: RunOutcome
    provenance: dict[str, dict[str, Any]]
    skipped: list[str] = field(default_factory=list)   # what was not merged, and why


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return path.lstat()
    except OSError:
        return None


def _is_dir(path: Path) -> bool:
    st = _lstat(path)
    return st is not None and stat.S_ISDIR(st.st_mode)


def _read_small(path: Path, limit: int) -> bytes | None:
    """A regular file's bytes, never through a symlink, at most ``limit`` bytes (None when refused)."""
    try:
        data, cut = read_regular(path, limit)
    except BundleFileError:
        return None
    return None if cut else data


def _json(path: Path) -> Any:
    data = _read_small(path, MAX_FILE_BYTES)
    try:
        return json.loads(data) if data is not None else None
    except ValueError:
        return None


def find_bundles(sources: Sequence[Path], skipped: list[str]) -> list[tuple[int, Path]]:
    """(source order, bundle folder) for each source that is a bundle or holds bundles one level down."""
    found = []
    for order, source in enumerate(sources):
        source = Path(source)
        if not _is_dir(source):
            skipped.append(f"{source}: not a directory (symlinks are not followed)")
        elif _is_dir(source / "raw"):
            found.append((order, source))
        else:
            inner = sorted(p for p in source.iterdir() if not p.name.startswith(".") and _is_dir(p / "raw")
                           and _is_dir(p))
            if not inner:
                skipped.append(f"{source}: neither a bundle (raw/) nor a folder of bundles")
            found.extend((order, p) for p in inner)
    return found


def candidates(bundle: Path, order: int, skipped: list[str]) -> list[Candidate]:
    """Every host collection in one bundle, with its time and manifest entry."""
    manifest = _json(bundle / "manifest.json")
    entries = {h["name"]: h for h in (manifest or {}).get("hosts", []) if isinstance(h, dict) and "name" in h} \
        if isinstance(manifest, dict) else {}
    results = _json(bundle / "results.json")
    probes = tuple(str(p) for p in results.get("run", {}).get("probes", [])) if isinstance(results, dict) else ()
    out = []
    if os.path.lexists(bundle / "raw" / RAW_SOURCE):  # its host outputs live elsewhere: never followed here
        skipped.append(f"{bundle / 'raw' / RAW_SOURCE}: a replayed run refers to another bundle's outputs; "
                       "merge does not follow it: give that bundle as a source")
    for folder in sorted((bundle / "raw").iterdir()):
        name = folder.name
        if name.startswith(("_", ".")):
            continue
        if not HOST_NAME.match(name) or not _is_dir(folder):
            skipped.append(f"{folder}: not a plain host folder (bad name, symlink or file)")
            continue
        meta = _json(folder / HOST_META)
        meta = meta if isinstance(meta, dict) else {}
        out.append(Candidate(host=name, folder=folder, bundle=bundle, order=order,
                             collected_at=str(meta.get("collected_at") or ""),
                             reachable=not meta.get("transport_error"), entry=entries.get(name), probes=probes))
    return out


def choose(found: Sequence[Candidate], prefer: str = "newest") -> dict[str, Candidate]:
    """The winning collection per host (ties go to the later source)."""
    if prefer not in PREFER:
        raise ValueError(f"prefer must be one of {', '.join(PREFER)}, not {prefer!r}")
    best: dict[str, Candidate] = {}
    for cand in found:
        current = best.get(cand.host)
        if current is None or _rank(cand, prefer) >= _rank(current, prefer):
            best[cand.host] = cand
    return best


def _when(text: str) -> datetime:
    """``collected_at`` as an aware time; missing or garbled sorts oldest."""
    try:
        when = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return datetime.min.replace(tzinfo=timezone.utc)
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _rank(cand: Candidate, prefer: str) -> tuple[Any, ...]:
    if prefer == "last":
        return (cand.order,)
    if prefer == "newest-reachable":
        return (cand.reachable, _when(cand.collected_at), cand.order)
    return (_when(cand.collected_at), cand.order)


def copy_host(cand: Candidate, target: Path, skipped: list[str], max_file_bytes: int = MAX_FILE_BYTES) -> None:
    """Copy one host's plain files into ``target``; anything else is skipped with a reason. Files are
    written relative to the open target folder, unbuffered (25,000 of them for 1,000 hosts)."""
    target.mkdir(parents=True)
    with os.scandir(cand.folder) as it:
        names = sorted(e.name for e in it)
    into = os.open(target, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in names:
            if name != HOST_META and not FILE_NAME.match(name):
                skipped.append(f"{cand.folder / name}: not a bundle file name")
                continue
            data = _read_small(cand.folder / name, max_file_bytes)
            if data is None:
                skipped.append(f"{cand.folder / name}: not a regular file, a symlink, unreadable or over "
                               f"{max_file_bytes} bytes")
                continue
            _write_new(name, data, into)
    finally:
        os.close(into)


def _write_new(name: str, data: bytes, folder: int) -> None:
    """A new file ``name`` in the open ``folder`` (never an existing file, never through a link)."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=folder)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def merge_bundles(sources: Sequence[Path], run_dir: Path, *, inventory: Path | None = None,
                  profile: str | None = None, prefer: str = "newest", probes: Sequence[str] | None = None,
                  render: bool = True, max_file_bytes: int = MAX_FILE_BYTES) -> MergeOutcome:
    """Merge ``sources`` into ``run_dir`` (absent or empty) and grade the merged fleet."""
    skipped: list[str] = []
    found = [c for order, bundle in find_bundles(sources, skipped) for c in candidates(bundle, order, skipped)]
    chosen = choose(found, prefer)
    expected = None
    if inventory is not None:
        search = [Path(inventory).resolve().parent / "profiles"]
        expected = load_inventory(inventory, known_profiles=available_profiles(search)).hosts
    run_dir = Path(run_dir)
    staging = run_dir.parent / f".{run_dir.name}.merge-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        hosts = _stage(staging, chosen, expected, sources, skipped, max_file_bytes)
        graded = sorted({p for c in chosen.values() for p in c.probes}) or None
        outcome = execute_run(RunOptions(target=TargetOptions(replay=staging, inventory=inventory, profile=profile),
                                         outputs=OutputOptions(run_dir=run_dir, render=render),
                                         selection=SelectionOptions(probes=list(probes) if probes else graded)))
        _adopt_raw(staging, run_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    provenance = {name: {"source": str(c.folder), "collected_at": c.collected_at, "reachable": c.reachable}
                  for name, c in sorted(chosen.items())}
    for name in hosts:
        provenance.setdefault(name, {"source": None, "collected_at": None, "reachable": False})
    write_json(run_dir / "merge.json", {"sources": [str(s) for s in sources], "prefer": prefer,
                                        "candidates": len(found), "hosts": provenance, "skipped": skipped})
    return MergeOutcome(run=outcome, provenance=provenance, skipped=skipped)


def _stage(staging: Path, chosen: dict[str, Candidate], expected: Sequence[Any] | None,
           sources: Sequence[Path], skipped: list[str], max_file_bytes: int) -> list[str]:
    """Write the staging bundle: chosen hosts' files, a manifest listing the hosts, and a
    ``no result from node`` collection for each expected host that no source holds."""
    raw = staging / "raw"
    raw.mkdir(parents=True)
    def copy(item: tuple[str, Candidate]) -> list[str]:
        problems: list[str] = []
        copy_host(item[1], raw / item[0], problems, max_file_bytes)
        return problems

    # creating files waits on the filesystem far more than on the CPU (25,000 files per 1,000 hosts):
    # a few threads overlap those waits; what each host skipped is kept in host order
    with ThreadPoolExecutor(DEFAULTS.merge_copy_threads) as pool:
        for problems in pool.map(copy, sorted(chosen.items())):
            skipped.extend(problems)
    names = [h.name for h in expected] if expected is not None else sorted(chosen)
    for extra in sorted(set(chosen) - set(names)):
        skipped.append(f"{chosen[extra].folder}: host {extra} is not in the inventory: not graded")
    where = ", ".join(str(s) for s in sources)
    for name in names:
        if name not in chosen:
            (raw / name).mkdir()
            write_json(raw / name / HOST_META, {"transport_error": f"{NO_RESULT}: in none of the merged "
                                                f"sources ({where})", "collected_at": "", "commands": {}})
    if expected is not None:
        entries = [h.to_json() for h in expected]
    else:
        known = set(available_profiles())
        entries = [_host_entry(n, chosen[n].entry, known, skipped) for n in names]
    write_json(staging / "manifest.json", {"mode": "merge", "hosts": entries})
    return names


def _host_entry(name: str, entry: dict[str, Any] | None, known_profiles: set[str],
                skipped: list[str]) -> dict[str, Any]:
    """The host's manifest entry from its source, reduced to plain, checked values."""
    out: dict[str, Any] = {"name": name}
    if not entry:
        return out
    profile = entry.get("profile")
    if isinstance(profile, str) and profile in known_profiles:
        out["profile"] = profile
    elif profile is not None:
        skipped.append(f"host {name}: profile {str(profile)[:60]!r} from its bundle is not a known profile "
                       "(give --profile or -i)")
    for key in ("group", "address"):
        if isinstance(entry.get(key), str):
            out[key] = entry[key]
    if isinstance(entry.get("vars"), dict):
        out["vars"] = {str(k): v for k, v in entry["vars"].items() if isinstance(v, str | int | float | bool | list)}
    return out


def _adopt_raw(staging: Path, run_dir: Path) -> None:
    """The replay referenced the staging bundle's raw/ (``rundir.reference_raw``); move those checked
    copies into the run itself, so the merged run is a self-contained bundle once staging is gone."""
    raw = run_dir / "raw"
    raw.mkdir(exist_ok=True)
    for entry in sorted((staging / "raw").iterdir()):
        if not (raw / entry.name).exists():
            entry.rename(raw / entry.name)
    (raw / RAW_SOURCE).unlink(missing_ok=True)
