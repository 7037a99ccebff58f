"""Host folders a merged run references in the node bundles instead of copying them.

    write_host_refs(run_dir / "raw", {"gpu001": HostRef(Path("/shared/hc/gpu001"), spool=True)})
    refs = host_refs(run_dir / "raw")          # {"gpu001": HostRef(Path("/shared/hc/gpu001"), spool=True)}
    fd = open_host_folder(refs["gpu001"].bundle, "gpu001")   # /shared/hc/gpu001/raw/gpu001, no link followed
    gone = missing_hosts(refs)                 # ["gpu007: /shared/hc/gpu007/raw/gpu007 could not be read (...)"]

A merged run's ``raw/_source.json`` is ``{"hosts": {host: bundle}, "spool": [host, ...]}``: each host's
outputs stay in ``<bundle>/raw/<host>/`` (a node's bundle in a spool, listed under ``spool``: read with
the node rules of ``store.bundle``; or a bundle named on the command line), where the grading reads them
as untrusted input. The bundle folder, its ``raw/`` and the host folder are each opened
without following a link (``O_NOFOLLOW``, relative to the folder above: ``openat``), and the folder above
the bundle (the spool, given by the operator and resolved when the merge wrote the reference) must
still resolve to itself. A run directory may come from anyone, so every reference is checked when read:
an absolute, normalised path outside the system trees, and a plain host name. (A replay's single
reference, ``{"raw": ...}``, is ``healthcheck.store.rundir``'s.)
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from healthcheck.core.hostnames import host_name_problem
from healthcheck.store.safeio import BundleFileError, read_regular

KEPT = "_kept"                  # raw/_kept/<host>/<command_id>.out: what a merged run's report shows, kept
REFS_FILE = "_source.json"      # the same file as a replay's reference: one hop from a run to its outputs
MAX_REFS_BYTES = 64 << 20        # 10,000 references take about 0.6 MB
SYSTEM_TREES = ("/etc", "/proc", "/sys", "/dev", "/boot", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64",
                "/libx32", "/run", "/var/run")  # a reference into these is refused whatever it holds
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class HostRefError(ValueError):
    """A ``raw/_source.json`` whose host references cannot be believed; the message names the file."""


@dataclass(frozen=True)
class HostRef:
    """Where a merged run's host is: ``<bundle>/raw/<host>``; ``spool``: a node wrote it (its own spool
    folder), so it is read with the node rules (one hard link per file)."""

    bundle: Path
    spool: bool = False


_SYSTEM_PREFIXES = tuple(f"{t}/" for t in SYSTEM_TREES)


def in_system_tree(path: Path) -> bool:
    """Whether the absolute, normalised ``path`` is ``/`` or in one of the system trees (compared as text:
    asked once per referenced host)."""
    text = str(path)
    return text == "/" or text in SYSTEM_TREES or text.startswith(_SYSTEM_PREFIXES)


def write_host_refs(raw: Path, refs: Mapping[str, HostRef]) -> None:
    """``raw/_source.json`` naming each host's bundle (absolute, resolved by the caller)."""
    path = Path(raw) / REFS_FILE
    tmp = path.with_name(path.name + ".tmp")
    doc = {"hosts": {name: str(ref.bundle) for name, ref in sorted(refs.items())},
           "spool": sorted(name for name, ref in refs.items() if ref.spool)}
    tmp.write_text(json.dumps(doc, indent=0))
    tmp.replace(path)


_READ: dict[tuple[str, int, int, int, int], dict[str, HostRef]] = {}   # by the file's identity: read once
_READ_MAX = 8


def host_refs(raw: Path) -> dict[str, HostRef]:
    """The host references of ``raw/_source.json`` (empty when there is none, or when it is a replay's
    single ``{"raw": ...}`` reference); ``HostRefError`` naming the file and the entry when one is refused.
    Checked once per file (its path, device, inode, size and change time: a rewrite is a new file)."""
    ref = Path(raw) / REFS_FILE
    try:
        st = os.lstat(ref)
    except OSError:
        return {}
    key = (str(ref), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _READ:
        if len(_READ) >= _READ_MAX:
            _READ.clear()
        _READ[key] = _read_refs(ref)
    return dict(_READ[key])


def _read_refs(ref: Path) -> dict[str, HostRef]:
    try:
        data, cut = read_regular(ref, MAX_REFS_BYTES)
        doc = None if cut else json.loads(data.decode("utf-8"))
    except BundleFileError as exc:
        raise HostRefError(f"{ref}: refused: {exc}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise HostRefError(f"{ref} is unreadable: {exc}") from None
    listed = doc.get("hosts") if isinstance(doc, dict) else None
    if listed is None:
        return {}
    spool = doc.get("spool", [])
    if not isinstance(listed, dict) or not isinstance(spool, list):
        raise HostRefError(f"{ref}: refused: 'hosts' is not an object or 'spool' not a list")
    spool_hosts = set(spool)
    return {name: HostRef(_checked(ref, name, bundle), name in spool_hosts) for name, bundle in listed.items()}


def _checked(ref: Path, name: str, bundle: object) -> Path:
    problem = host_name_problem(name)
    if problem is None and (not isinstance(bundle, str) or "\x00" in bundle or not os.path.isabs(bundle)
                            or os.path.normpath(bundle) != bundle):
        problem = f"{str(bundle)[:200]!r} is not an absolute, normalised path"
    if problem is None and in_system_tree(Path(bundle)):
        problem = f"{bundle} is a system directory, never a bundle"
    if problem is not None:
        raise HostRefError(f"{ref}: refused: host {str(name)[:60]!r}: {problem}")
    return Path(str(bundle))


@lru_cache(maxsize=4096)
def _resolves_to_itself(folder: str) -> bool:
    """Whether ``folder`` (the spool above a bundle) has no link on the way; asked once per folder."""
    try:
        return os.path.realpath(folder, strict=True) == folder
    except OSError:
        return False


def open_bundle(bundle: Path) -> int:
    """An open descriptor of the bundle folder, not through a link (nor one above it). ``OSError`` else."""
    if not _resolves_to_itself(str(Path(bundle).parent)):
        raise OSError(errno.ELOOP, "the folder above the bundle passes through a symbolic link or is gone")
    return os.open(bundle, _OPEN_DIR)


def open_host_folder(bundle: Path, host: str) -> int:
    """An open descriptor of ``<bundle>/raw/<host>``: the bundle, raw/ and the host folder each opened
    without following a link. ``OSError`` (``ELOOP`` for a link, ``ENOENT`` for a removed bundle) else."""
    fd = open_bundle(bundle)
    try:
        for name in ("raw", host):
            inner = os.open(name, _OPEN_DIR, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def host_folder(bundle: Path, host: str) -> Path:
    """Where a referenced host's outputs are: ``<bundle>/raw/<host>``."""
    return Path(bundle) / "raw" / host


def unreachable(bundle: Path, host: str, exc: OSError) -> str:
    """Why a referenced host folder cannot be read, naming it."""
    why = "a symbolic link or not a folder (links are never followed)" if exc.errno in (errno.ELOOP, errno.ENOTDIR) \
        else (exc.strerror or str(exc))
    return f"{host_folder(bundle, host)} could not be read ({why})"


def missing_hosts(refs: Mapping[str, HostRef]) -> list[str]:
    """``"<host>: <why>"`` for each referenced host folder that can no longer be opened (a node bundle
    removed or replaced by a link after the merge)."""
    out = []
    for name, ref in sorted(refs.items()):
        try:
            os.close(open_host_folder(ref.bundle, name))
        except OSError as exc:
            out.append(f"{name}: {unreachable(ref.bundle, name, exc)}")
    return out
