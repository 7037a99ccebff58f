"""The staging bundle of a merge: the chosen host folders copied, checked file by file, then adopted by the run.

    names = stage_bundle(staging, chosen, expected_hosts, sources, skipped, max_file_bytes)
    adopt_raw(staging, run_dir)      # the checked copies move into the merged run

Only plain names are copied (``<command_id>.out|.err|.rc``, ``_host.json``), each a regular file with one
hard link, read without following links and at most ``max_file_bytes``; anything else is skipped with a
reason. A host folder that vanishes or cannot be read while it is copied is that host's "no result from
node", never the end of the merge. Hosts the inventory expects but no source holds get a "no result"
collection naming the sources.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.profiles import available_profiles
from healthcheck.ops.bundletrust import OLDEST, trusted_entry
from healthcheck.store.rundir import HOST_META, RAW_SOURCE, write_json
from healthcheck.store.safeio import BundleFileError, HardLinkError, read_regular

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
    entry: dict[str, Any] | None = None   # the host's entry in that bundle's manifest (profile)
    probes: tuple[str, ...] = ()          # probes that bundle ran (results.json), when it says
    when: datetime = OLDEST                # collected_at as ranked (bundletrust.collection_time)


def _read_file(path: Path, limit: int) -> tuple[bytes | None, str]:
    """A bundle file's bytes to copy (regular, one hard link, not through a symlink, at most ``limit``
    bytes), or None and why it is refused."""
    try:
        data, cut = read_regular(path, limit, single_link=True)
    except HardLinkError as exc:
        return None, str(exc)
    except BundleFileError:
        cut = True
    if cut:
        return None, f"not a regular file, a symlink, unreadable or over {limit} bytes"
    return data, ""


def copy_host(cand: Candidate, target: Path, skipped: list[str], max_file_bytes: int = MAX_FILE_BYTES) -> None:
    """Copy one host's plain files into ``target``; anything else is skipped with a reason. Files are
    written relative to the open target folder, unbuffered (25,000 of them for 1,000 hosts). Raises
    ``OSError`` when the host folder itself cannot be read (it vanished)."""
    target.mkdir(parents=True)
    with os.scandir(cand.folder) as it:
        names = sorted(e.name for e in it)
    into = os.open(target, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in names:
            if name != HOST_META and not FILE_NAME.match(name):
                skipped.append(f"{cand.folder / name}: not a bundle file name")
                continue
            data, why = _read_file(cand.folder / name, max_file_bytes)
            if data is None:
                skipped.append(f"{cand.folder / name}: {why}")
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


def stage_bundle(staging: Path, chosen: dict[str, Candidate], expected: Sequence[Any] | None,
           sources: Sequence[Path], skipped: list[str], max_file_bytes: int) -> list[str]:
    """Write the staging bundle: chosen hosts' files, a manifest listing the hosts, and a
    ``no result from node`` collection for each expected host that no source holds."""
    raw = staging / "raw"
    raw.mkdir(parents=True)

    def copy(item: tuple[str, Candidate]) -> list[str]:
        problems: list[str] = []
        name, cand = item
        try:
            copy_host(cand, raw / name, problems, max_file_bytes)
        except OSError as exc:  # the folder vanished or became unreadable while the merge ran
            why = f"{cand.folder} could not be read during the merge ({exc.strerror or exc})"
            problems.append(f"{why}: host {name} has no result")
            shutil.rmtree(raw / name, ignore_errors=True)
            _no_result(raw / name, f"{NO_RESULT}: {why}")
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
            _no_result(raw / name, f"{NO_RESULT}: in none of the merged sources ({where})")
    if expected is not None:
        entries = [h.to_json() for h in expected]
    else:
        known = set(available_profiles())
        entries = [trusted_entry(n, chosen[n].entry, known, skipped) for n in names]
    write_json(staging / "manifest.json", {"mode": "merge", "hosts": entries})
    return names


def _no_result(folder: Path, why: str) -> None:
    folder.mkdir()
    write_json(folder / HOST_META, {"transport_error": why, "collected_at": "", "commands": {}})


def adopt_raw(staging: Path, run_dir: Path) -> None:
    """The replay referenced the staging bundle's raw/ (``rundir.reference_raw``); move those checked
    copies into the run itself, so the merged run is a self-contained bundle once staging is gone."""
    raw = run_dir / "raw"
    raw.mkdir(exist_ok=True)
    for entry in sorted((staging / "raw").iterdir()):
        if not (raw / entry.name).exists():
            entry.rename(raw / entry.name)
    (raw / RAW_SOURCE).unlink(missing_ok=True)
