"""The run directory on disk, which is also the capture-bundle format.

    <run>/manifest.json                      args, hosts, profiles as used, versions
    <run>/raw/<host>/<command_id>.out|.err|.rc   exactly what the host returned (.rc: exit code); .err only
                                             when stderr is not empty, .rc only when the exit code is not 0
    <run>/raw/<host>/_host.json              transport error, timings, per-command flags
    <run>/raw/_source.json                   a replay: {"raw": "<bundle>/raw"}, the outputs it re-graded;
                                             a merge: {"hosts": {host: "<node bundle>"}} (store/hostrefs.py)
    <run>/findings.jsonl                     a live run's crash journal: one finding per line, appended as each
                                             host completes, removed once results.json and the findings table
                                             are written (store/results.py ``retire_journal``)
    <run>/results.json                       see healthcheck/store/results.py

A hand-made bundle needs only ``raw/<host>/<command_id>.out``; a missing ``.err`` reads as empty, a
missing ``.rc`` as 0 (the run directory's own writer leaves them out when they would say just that).
Reading a bundle (untrusted input) is ``healthcheck/store/bundle.py``.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import threading
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from healthcheck.core.model import Finding, HostCollection
from healthcheck.store.hostrefs import MAX_REFS_BYTES, REFS_FILE, HostRef, host_refs, in_system_tree, missing_hosts
from healthcheck.store.jsoncodec import json_lines
from healthcheck.store.safeio import BundleFileError, read_regular

HOST_META = "_host.json"
JOURNAL = "findings.jsonl"     # a live run's crash journal, until results.json is written
RAW_SOURCE = REFS_FILE   # a replay (or a merge) references the bundle's raw outputs instead of copying them
_MAX_REFERENCE_BYTES = MAX_REFS_BYTES   # a merge's per-host references: ~70 bytes a host
_MAX_PROBED_FOLDERS = 256     # host folders looked into for outputs before a referenced folder is refused


class RunDirError(ValueError):
    pass


_MAX_SUFFIX = 1000
_partial = itertools.count()


def new_run_dir(out: Path | None, run_dir: Path | None) -> Path:
    """``run_dir`` exactly (must be absent or empty), else ``out/<UTC timestamp>[-N]``.

    Created atomically and exclusively (``mkdir`` without exist_ok): two runs started in the same
    second never share a directory, and of two runs given the same empty ``--run-dir`` one is refused."""
    try:
        if run_dir is not None:
            return _claim(Path(run_dir))
        parent = Path(out or "runs")
        parent.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        for suffix in range(_MAX_SUFFIX):
            candidate = parent / (stamp if suffix == 0 else f"{stamp}-{suffix}")
            try:
                candidate.mkdir()
            except FileExistsError:
                continue
            (candidate / "raw").mkdir()
            return candidate
        raise RunDirError(f"{parent}: {_MAX_SUFFIX} run directories named {stamp}* exist already")
    except OSError as exc:
        raise RunDirError(f"cannot create the run directory under {run_dir or out or 'runs'}: "
                          f"{exc.strerror or exc}") from exc


def _claim(run_dir: Path) -> Path:
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        run_dir.mkdir()
    except FileExistsError:
        if not run_dir.is_dir() or any(run_dir.iterdir()):
            raise RunDirError(f"run directory {run_dir} exists and is not empty") from None
    try:
        (run_dir / "raw").mkdir()  # exclusive: of two runs given the same empty directory, one wins
    except FileExistsError:
        raise RunDirError(f"run directory {run_dir} exists and is not empty (another run took it)") from None
    return run_dir


LATEST = "latest"


def update_latest(run_dir: Path) -> Path | None:
    """Point ``<parent>/latest`` at ``run_dir`` (a relative symlink, swapped atomically with a rename,
    so a reader of ``runs/latest/metrics.prom`` never sees it missing). A real file or folder named
    ``latest`` is left alone (returns None)."""
    run_dir = Path(run_dir)
    link = run_dir.parent / LATEST
    if link.exists() and not link.is_symlink():
        return None
    tmp = run_dir.parent / f".{LATEST}.{os.getpid()}.{threading.get_ident()}"
    tmp.unlink(missing_ok=True)
    os.symlink(run_dir.name, tmp)
    os.replace(tmp, link)
    return link


def _safe_component(name: str) -> str:
    if not isinstance(name, str) or not name or name.startswith(".") or "/" in name or "\x00" in name:
        raise RunDirError(f"unsafe name for a file in the run directory: {name!r}")
    return name


def write_collection(run_dir: Path, collection: HostCollection) -> None:
    """Write one host's raw outputs (exact bytes) and its metadata into ``raw/<host>/``.

    The folder is written under a temporary name (``raw/.partial-*``, which replay ignores) and
    renamed into place when complete, so a killed run never leaves a half-written host folder
    that a replay would grade. An ``OSError`` (disk full, name too long) leaves nothing behind."""
    name = _safe_component(collection.host)
    raw = Path(run_dir) / "raw"
    tmp = raw / f".partial-{os.getpid()}-{next(_partial)}"
    raw.mkdir(parents=True, exist_ok=True)
    tmp.mkdir()
    try:
        _write_host_files(tmp, collection)
        os.rename(tmp, raw / name)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _write_host_files(folder: Path, collection: HostCollection) -> None:
    """Every file of one host, created relative to the open ``folder`` (``openat``: no path walked per
    file). ``.err`` only when the command wrote to stderr and ``.rc`` only when its exit code is not 0:
    the bundle reader reads an absent one as exactly that, and a host's files are fewer to create."""
    meta: dict[str, Any] = {"transport_error": collection.transport_error, "busy": collection.busy,
                            "duration_s": collection.duration_s,
                            "collected_at": collection.collected_at, "commands": {}}
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for cid, result in collection.results.items():
            cid = _safe_component(cid)
            meta["commands"][cid] = {"timed_out": result.timed_out,
                                     "transport_error": result.transport_error,
                                     "duration_s": result.duration_s,
                                     "stdout_truncated": result.stdout_truncated,
                                     "stderr_truncated": result.stderr_truncated,
                                     "not_run": result.not_run, "timeout_s": result.timeout_s}
            if (result.transport_error is not None or result.not_run is not None) and result.rc is None:
                continue
            _create(dir_fd, f"{cid}.out", result.stdout)
            if result.stderr:
                _create(dir_fd, f"{cid}.err", result.stderr)
            if result.rc != 0:
                _create(dir_fd, f"{cid}.rc", b"" if result.rc is None else f"{result.rc}\n".encode())
        _create(dir_fd, HOST_META, (json.dumps(meta, indent=1) + "\n").encode())
    finally:
        os.close(dir_fd)


def _create(dir_fd: int, name: str, data: bytes) -> None:
    """A new file ``name`` in the folder open as ``dir_fd`` holding ``data`` (three system calls)."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def raw_dir(path: Path) -> Path:
    """The folder holding the host folders of a run or bundle: ``path/raw`` (or ``path`` itself when it
    has no raw/ folder), following a replay's ``raw/_source.json`` to the bundle it re-graded when
    ``reference_problem`` finds nothing wrong with it; a refused reference raises ``RunDirError``
    naming the file and why (docs/results-schema.md). A merged run's per-host references
    (``store.hostrefs``) are not followed here: its raw/ holds the hosts that have no reference."""
    path = Path(path)
    raw = path / "raw"
    if raw.is_symlink():
        raise RunDirError(f"{raw} is a symbolic link (links in a bundle are never followed)")
    raw = raw if raw.is_dir() else path
    ref = raw / RAW_SOURCE
    return _follow(ref) if os.path.lexists(ref) else raw


def _follow(ref: Path) -> Path:
    """The folder a ``raw/_source.json`` names, once checked (a run directory may come from anyone)."""
    try:
        text, cut = read_regular(ref, _MAX_REFERENCE_BYTES)
        doc = None if cut else json.loads(text.decode("utf-8"))
        if isinstance(doc, dict) and "hosts" in doc and "raw" not in doc:
            return ref.parent  # a merge's per-host references (store.hostrefs)
        target = None if doc is None else doc["raw"]
    except BundleFileError as exc:
        raise RunDirError(f"{ref}: refused: {exc}") from None
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise RunDirError(f"{ref} is unreadable: {exc}") from None
    if not isinstance(target, str) or "\x00" in target or not os.path.isabs(target) \
            or os.path.normpath(target) != target:
        raise RunDirError(f"{ref}: refused: 'raw' is not an absolute, normalised path: {str(target)[:200]!r}")
    problem = reference_problem(Path(target))
    if problem is not None:
        raise RunDirError(f"{ref}: refused: {target} {problem}")
    return Path(target)


def reference_problem(target: Path) -> str | None:
    """Why ``target`` cannot be a replay's referenced raw/ folder, or None. Honoured only: outside the
    system trees, with no symbolic link on the way, a folder named ``raw`` holding host folders
    (``<host>/*.out`` or ``<host>/_host.json``), and not itself a reference (a replay refers to the
    outputs directly, so one hop is all a run ever writes)."""
    if in_system_tree(target):
        return "is a system directory, never a bundle"
    try:
        real = os.path.realpath(target, strict=True)
    except OSError:
        return "does not exist (the bundle this run re-graded was moved or deleted)"
    if real != str(target):
        return f"passes through a symbolic link (it resolves to {real}); links are never followed"
    if not target.is_dir():
        return "is not a folder"
    if target.name != "raw":
        return "is not a bundle's raw/ folder"
    if os.path.lexists(target / RAW_SOURCE):
        return f"holds a {RAW_SOURCE} itself (a reference to a reference is never written by a replay)"
    if not _holds_host_folders(target):
        return "holds no host folders with outputs (<host>/<command_id>.out or _host.json): not a bundle"
    return None


def _holds_host_folders(raw: Path) -> bool:
    with os.scandir(raw) as entries:
        folders = (e for e in entries if not e.name.startswith(("_", ".")) and e.is_dir(follow_symlinks=False))
        for entry in itertools.islice(folders, _MAX_PROBED_FOLDERS):
            with os.scandir(entry.path) as files:
                if any((f.name == HOST_META or f.name.endswith(".out")) and f.is_file(follow_symlinks=False)
                       for f in files):
                    return True
    return False


def reference_raw(run_dir: Path, bundle: Path) -> bool:
    """Make ``run_dir`` a bundle by pointing its raw/ at ``bundle``'s outputs (no copy: a replay of
    10,000 hosts would otherwise rewrite 850,000 files). False, and nothing written, when those outputs
    could not be followed back (``reference_problem``: a bundle without raw/, one under /usr): copy them."""
    raw = raw_dir(bundle).resolve()
    if reference_problem(raw) is not None:
        return False
    write_json(Path(run_dir) / "raw" / RAW_SOURCE, {"raw": str(raw)})
    return True


def host_names(path: Path) -> list[str]:
    """Names of the host folders of a run or bundle, sorted, without reading them (a merged run's
    referenced hosts included)."""
    raw = raw_dir(path)
    if not raw.is_dir():
        raise RunDirError(f"{path} is not a run directory or capture bundle (no raw/ folder)")
    with os.scandir(raw) as entries:
        local = {e.name for e in entries  # a linked host folder is listed, then refused when read
                 if (e.is_dir(follow_symlinks=False) or e.is_symlink()) and not e.name.startswith(("_", "."))}
    names = sorted(local | set(referenced_hosts(raw)))
    if not names:
        raise RunDirError(f"{raw} holds no host folders")
    return names


def referenced_hosts(raw: Path) -> dict[str, HostRef]:
    """A merged run's host references (``store.hostrefs.host_refs``); a refused one is a ``RunDirError``."""
    try:
        return host_refs(raw)
    except ValueError as exc:
        raise RunDirError(str(exc)) from None


def missing_outputs(path: Path) -> list[str]:
    """``"<host>: <folder> could not be read (...)"`` for each host a merged run references in a bundle
    that is gone (removed, replaced by a link) since the merge; empty for any other run, and for a run
    whose references are refused (reading it says so: ``raw_dir``, ``referenced_hosts``)."""
    try:
        return missing_hosts(referenced_hosts(raw_dir(path)))
    except (RunDirError, OSError):
        return []


def encode_findings(findings: Iterable[Finding]) -> bytes:
    """``findings.jsonl`` lines for ``findings`` (pure: grading workers call it in parallel)."""
    return json_lines([f.to_json() for f in findings])


class FindingsLog:
    """``findings.jsonl``, the crash journal of a live run: appended (and flushed to the kernel) as each host
    completes, so a run killed before results.json can be rebuilt from it (``store.recover``); ``retire``
    removes it once results.json and the findings table hold every finding. ``enabled=False`` (a replay,
    whose bundle is its journal: replay it again) appends nothing."""

    def __init__(self, run_dir: Path, enabled: bool = True) -> None:
        self.path = Path(run_dir) / JOURNAL
        self.enabled = enabled
        self._lock = threading.Lock()

    def append(self, findings: Iterable[Finding]) -> None:
        if self.enabled:
            self.append_lines(encode_findings(findings))

    def append_lines(self, data: bytes) -> None:
        """Append lines already encoded by ``encode_findings``."""
        if not self.enabled:
            return
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                view = memoryview(data)
                while view:  # a full disk gives a short write, then ENOSPC: never a silent partial append
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)

    def retire(self) -> None:
        """Remove the journal (the run's own file): its findings are in the findings table now."""
        with self._lock:
            self.path.unlink(missing_ok=True)

    def read(self) -> list[Finding]:
        if not self.path.is_file():
            return []
        out = []
        for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                out.append(Finding.from_json(json.loads(line)))
            except (ValueError, KeyError):
                continue  # a line cut by a kill mid-write
        return out


def write_json(path: Path, obj: Any) -> None:
    tmp = Path(str(path) + ".tmp")
    try:
        tmp.write_text(json.dumps(obj, indent=1, default=str) + "\n")
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
