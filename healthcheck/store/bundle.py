"""Reading a run directory or capture bundle back, as untrusted input.

    hosts = read_bundle(Path("runs/20261122T031500Z"))      # {host: HostCollection}
    listed = read_manifest_hosts(Path("runs/20261122T031500Z"))  # the hosts its manifest names, or None
    problems = copy_bundle_rest(bundle, run_dir)             # the rest of raw/ (benchmark jobs), safely
    problems = copy_raw_folder(raw_dir(bundle), run_dir)     # every output (``run --replay --copy-raw``)
    collection = read_referenced_host(HostRef(Path("/shared/hc/gpu001"), spool=True), "gpu001")  # a merged run's

A bundle may come from anywhere (a ticket, an nvidia-bug-report). So: symbolic links are never
followed, anything that is not a regular file or a real folder is refused, and every malformed
piece becomes an error for the host it belongs to, naming the file: a ``*.out`` that cannot be read
is a per-command transport error (``<probe>.collect`` ERROR), a malformed ``_host.json`` or a host
folder without any output is a host transport error (``host.reachable`` ERROR). A directory that is
not a bundle at all, or a malformed ``manifest.json``, raises ``RunDirError`` (a usage error).
A host a merged run references in another bundle is read with plain file names only; one in a node's
spool folder strictly (``NODE_RULES``): a file with another hard link or over the size limit is refused,
never read.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from healthcheck.core.hostnames import host_name_problem
from healthcheck.core.model import CommandResult, Host, HostCollection
from healthcheck.store.hostrefs import HostRef, host_folder, open_host_folder, unreachable
from healthcheck.store.rundir import HOST_META, RAW_SOURCE, RunDirError, raw_dir, referenced_hosts
from healthcheck.store.safeio import MAX_FILE_BYTES, BundleFileError, read_regular

_HOST_FIELDS = {"name", "address", "user", "port", "profile", "group", "transport", "vars"}
PLAIN_FILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,200}\.(out|err|rc)$")
NO_RESULT = "no result from node"


@dataclass(frozen=True)
class ReadRules:
    """How strictly a host folder is read: a node's bundle read in place (``NODE_RULES``) takes only plain
    file names, and refuses a file with other hard links (a node could link any file it can read into
    its spool) or over ``MAX_FILE_BYTES`` (instead of cutting it)."""

    plain_names: bool = False
    single_link: bool = False
    refuse_over_limit: bool = False


BUNDLE_RULES = ReadRules()
REFERENCED_RULES = ReadRules(plain_names=True)   # a bundle named on the merge's command line
NODE_RULES = ReadRules(plain_names=True, single_link=True, refuse_over_limit=True)


def _entries(folder: Path) -> dict[str, os.DirEntry[str]]:
    with os.scandir(folder) as it:
        return {e.name: e for e in it}


def _host_meta(folder: int, rel: str, single_link: bool = False) -> tuple[dict[str, Any], str | None]:
    """``_host.json`` of the open host folder as a checked dict, or ({}, why it is unusable)."""
    try:
        raw, _ = read_regular(HOST_META, dir_fd=folder, single_link=single_link)
        meta = json.loads(raw.decode("utf-8"))
    except (BundleFileError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        return {}, f"malformed {rel}/{HOST_META}: {exc}"
    why = None
    if not isinstance(meta, dict):
        why = "not a JSON object"
    elif not isinstance(meta.get("commands", {}), dict) \
            or not all(isinstance(v, dict) for v in meta.get("commands", {}).values()):
        why = "'commands' is not an object of objects"
    elif not all(isinstance(meta.get(k), str | type(None)) for k in ("transport_error", "collected_at")):
        why = "'transport_error'/'collected_at' are not strings"
    elif not all(_number(v) for v in [meta.get("duration_s", 0)]
                 + [c.get("duration_s", 0) for c in meta.get("commands", {}).values()]):
        why = "a 'duration_s' is not a number"
    elif not all(isinstance(c.get("transport_error"), str | type(None)) for c in meta.get("commands", {}).values()):
        why = "a command's 'transport_error' is not a string"
    return (meta, None) if why is None else ({}, f"malformed {rel}/{HOST_META}: {why}")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value \
        and abs(value) != float("inf")


def _rc(text: str, flags: Mapping[str, Any]) -> tuple[int | None, str | None]:
    """An exit code from a ``.rc`` file: (rc, None) or (None, why it is malformed)."""
    text = text.strip()
    if text == "" and (flags.get("timed_out") or flags.get("transport_error")):
        return None, None  # our writer leaves it empty when the command never exited
    if text.lstrip("-").isdecimal() and len(text) <= 11 and -(2 ** 31) <= int(text) < 2 ** 31:
        return int(text), None
    return None, f"{text[:40]!r} is not an exit code"


def _command(folder: int, rel: str, host: str, cid: str, names: set[str], flags: Mapping[str, Any],
             rules: ReadRules = BUNDLE_RULES) -> CommandResult:
    def refused(name: str, why: str) -> CommandResult:
        return CommandResult(host=host, command_id=cid, transport_error=f"refused {rel}/{name}: {why}")

    files: dict[str, tuple[bytes, bool]] = {}
    for name, default, limit in ((f"{cid}.out", None, MAX_FILE_BYTES), (f"{cid}.err", b"", MAX_FILE_BYTES),
                                 (f"{cid}.rc", b"0", 64)):
        try:
            files[name] = read_regular(name, limit, folder, rules.single_link) if name in names or default is None \
                else (default, False)
        except BundleFileError as exc:
            return refused(name, str(exc))
        if rules.refuse_over_limit and files[name][1]:
            return refused(name, f"over {limit} bytes: not read")
    (stdout, cut), (stderr, cut_err), (rc_bytes, _) = files.values()
    rc, bad_rc = _rc(rc_bytes.decode("utf-8", errors="replace"), flags)
    if bad_rc is not None:
        return refused(f"{cid}.rc", f"malformed: {bad_rc}")
    return CommandResult(
        host=host, command_id=cid, stdout=stdout, stderr=stderr, rc=rc,
        duration_s=float(flags.get("duration_s") or 0.0), timed_out=bool(flags.get("timed_out", False)),
        transport_error=flags.get("transport_error"),
        stdout_truncated=bool(flags.get("stdout_truncated", False)) or cut,
        stderr_truncated=bool(flags.get("stderr_truncated", False)) or cut_err,
        not_run=_text(flags.get("not_run")), timeout_s=_seconds(flags.get("timeout_s")))


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _seconds(value: Any) -> float | None:
    """A finite number of seconds from _host.json, else None (a bundle is untrusted data)."""
    return float(value) if _number(value) else None


def _is_regular(path: Path) -> bool:
    """A regular file, not through a link."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def read_host(folder: Path, expect_meta: bool = False) -> HostCollection:
    """One host's outputs. ``expect_meta``: the folder belongs to a run directory we wrote, so a
    missing ``_host.json`` means the run was killed while writing it (incomplete, an ERROR)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return _read_host_fd(fd, Path(folder).name, expect_meta)
    finally:
        os.close(fd)


def _read_host_fd(folder: int, host: str, expect_meta: bool, expect_outputs: bool = True,
                  rules: ReadRules = BUNDLE_RULES, where: str | None = None) -> HostCollection:
    """``read_host`` of an open host folder: every file is opened relative to it (``openat``), so the
    folder cannot be swapped for a link while it is read, and no path is walked per file. Without
    ``expect_outputs`` (a benchmark-only run: no probe ran) a folder without outputs is no error.
    ``where``: the folder as messages name it (default ``raw/<host>``)."""
    rel = where or f"raw/{host}"
    names = set(os.listdir(folder))
    if rules.plain_names:
        names = {n for n in names if n == HOST_META or PLAIN_FILE.match(n)}
    problem = None
    meta: dict[str, Any] = {}
    if HOST_META in names:
        meta, problem = _host_meta(folder, rel, rules.single_link)
    elif expect_meta:
        problem = f"{rel}/ has no {HOST_META}: the run was killed while writing this host (incomplete)"
    flags = meta.get("commands", {})
    results = {cid: _command(folder, rel, host, cid, names, flags.get(cid, {}), rules)
               for cid in sorted(n[:-4] for n in names if n.endswith(".out") and len(n) > 4)}
    for cid, f in flags.items():  # commands that never produced output (host unreachable, deadline, not run)
        if cid not in results and isinstance(f, Mapping) and (f.get("transport_error") or f.get("not_run")):
            results[cid] = CommandResult(host=host, command_id=cid, timed_out=bool(f.get("timed_out")),
                                         transport_error=_text(f.get("transport_error")),
                                         not_run=_text(f.get("not_run")), timeout_s=_seconds(f.get("timeout_s")))
    error = meta.get("transport_error") or problem
    if not results and error is None and expect_outputs:
        error = f"no collected output in {rel}/ (no <command_id>.out files)"
    return HostCollection(host=host, results=results, transport_error=error, busy=bool(meta.get("busy", False)),
                          duration_s=float(meta.get("duration_s") or 0.0),
                          collected_at=meta.get("collected_at") or "")


def read_bundle_host(raw: Path, name: str, expect_meta: bool = False, expect_outputs: bool = True) -> HostCollection:
    """One host folder of a bundle's raw/, read lazily (replay grading): a linked folder is refused,
    never followed. ``expect_outputs`` False: the replay runs no probe (see ``_read_host_fd``)."""
    try:
        fd = os.open(Path(raw) / name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
            raise
        return _refused_host(name, f"refused raw/{name}: is a symbolic link or not a folder "
                                   "(links in a bundle are never followed)")
    try:
        return _read_host_fd(fd, name, expect_meta, expect_outputs)
    finally:
        os.close(fd)


def read_referenced_host(ref: HostRef, name: str, expect_meta: bool = False,
                         expect_outputs: bool = True) -> HostCollection:
    """A host a merged run references in a bundle (``<bundle>/raw/<name>``, ``store.hostrefs``), read with
    ``NODE_RULES`` when a node wrote it (a spool folder). A folder that is gone or became a link is that
    host's "no result from node", naming the folder."""
    try:
        fd = open_host_folder(ref.bundle, name)
    except OSError as exc:
        return HostCollection(host=name, results={},
                              transport_error=f"{NO_RESULT}: {unreachable(ref.bundle, name, exc)}")
    try:
        return _read_host_fd(fd, name, expect_meta, expect_outputs, NODE_RULES if ref.spool else REFERENCED_RULES,
                             str(host_folder(ref.bundle, name)))
    finally:
        os.close(fd)


def ran_no_probes(bundle: Path) -> bool:
    """Whether the bundle is a run directory whose run collected nothing from the hosts
    (``healthcheck bench``: its manifest lists no probe command): its hosts are checked by their jobs."""
    try:
        manifest = json.loads(read_regular(Path(bundle) / "manifest.json")[0].decode("utf-8"))
    except (BundleFileError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    if not isinstance(manifest, dict) or "healthcheck_version" not in manifest:
        return False
    by_profile = manifest.get("commands_by_profile")
    return manifest.get("commands") == [] and isinstance(by_profile, dict) \
        and all(commands == [] for commands in by_profile.values())

def collection_times(path: Path, hosts: Iterable[str]) -> dict[str, str]:
    """Each host's ``collected_at`` (``raw/<host>/_host.json``) in a run or bundle, for the hosts that have
    one: when the collector recorded that collection. Read as untrusted input (no link followed, bounded);
    a host whose folder or metadata is unusable is left out."""
    try:
        raw = raw_dir(Path(path))
        refs = referenced_hosts(raw)
    except (RunDirError, OSError):
        return {}
    out = {}
    for host in hosts:
        if host_name_problem(host) is not None:
            continue
        try:
            fd = open_host_folder(refs[host].bundle, host) if host in refs \
                else os.open(raw / host, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            meta, _ = _host_meta(fd, f"raw/{host}", host in refs and refs[host].spool)
        finally:
            os.close(fd)
        if isinstance(meta.get("collected_at"), str) and meta["collected_at"]:
            out[host] = meta["collected_at"]
    return out


def written_by_a_run(path: Path) -> bool:
    """The manifest of a run directory written by ``healthcheck run`` (not a hand-made bundle's)."""
    return _written_by_a_run(Path(path))


def _refused_host(name: str, why: str) -> HostCollection:
    return HostCollection(host=name, results={}, transport_error=f"refused raw/{name}: {why}")


def _raw_folder(path: Path) -> Path:
    raw = path / "raw"
    if os.path.lexists(raw):
        if raw.is_symlink() or not raw.is_dir():
            raise RunDirError(f"{raw} is a symbolic link or not a folder (links in a bundle are never followed)")
        return raw
    if not path.is_dir():
        raise RunDirError(f"{path} is not a run directory or capture bundle (no raw/ folder)")
    subdirs = [e for e in _entries(path).values() if e.is_dir(follow_symlinks=False)]
    if any(name.endswith(".out") for d in subdirs for name in _entries(Path(d.path))):
        return path  # a hand-made bundle of <host>/<command_id>.out folders
    runs = sorted(d.name for d in subdirs if (Path(d.path) / "raw").is_dir())
    if runs:
        raise RunDirError(f"{path} holds run directories, not one run: replay one of them, e.g. {path / runs[-1]}")
    raise RunDirError(f"{path} is not a run directory or capture bundle (no raw/<host>/<command_id>.out files)")


def _written_by_a_run(path: Path) -> bool:
    """The manifest of a run directory written by ``healthcheck run`` (not a hand-made bundle's)."""
    try:
        manifest = json.loads(read_regular(path / "manifest.json")[0].decode("utf-8"))
    except (BundleFileError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(manifest, dict) and "healthcheck_version" in manifest


def read_bundle(path: Path) -> dict[str, HostCollection]:
    """Every host under ``path/raw`` (or ``path`` itself when its folders hold ``*.out`` files)."""
    path = Path(path)
    raw = _raw_folder(path)
    ours = _written_by_a_run(path)
    hosts: dict[str, HostCollection] = {}
    for name, entry in sorted(_entries(raw).items()):
        if name.startswith((".", "_")):
            continue  # .partial-* (a host being written when the run was killed), _jobs, _telemetry
        if entry.is_symlink():
            hosts[name] = _refused_host(name, "is a symbolic link (links in a bundle are never followed)")
        elif entry.is_dir(follow_symlinks=False):
            problem = host_name_problem(name)
            hosts[name] = _refused_host(name, problem) if problem else read_host(Path(entry.path), ours)
    if not hosts:
        raise RunDirError(f"{raw} holds no host folders")
    return hosts


def read_manifest_hosts(bundle: Path) -> list[Host] | None:
    """The hosts listed by the bundle's ``manifest.json`` (None without one); a malformed manifest
    raises ``RunDirError`` naming the file and the entry."""
    path = Path(bundle) / "manifest.json"
    if not os.path.lexists(path):
        return None
    try:
        listed = json.loads(read_regular(path)[0].decode("utf-8")).get("hosts", [])
    except (BundleFileError, UnicodeDecodeError, ValueError, RecursionError, AttributeError) as exc:
        raise RunDirError(f"{path}: not a readable manifest: {exc or 'not a JSON object'}") from None
    if not isinstance(listed, list):
        raise RunDirError(f"{path}: 'hosts' is not a list")
    hosts = []
    for index, entry in enumerate(listed):
        where = f"{path}: hosts[{index}]"
        if not isinstance(entry, dict):
            raise RunDirError(f"{where} is not an object")
        problem = host_name_problem(entry.get("name")) or (
            f"unknown keys {sorted(set(entry) - _HOST_FIELDS)}" if set(entry) - _HOST_FIELDS else None)
        problem = problem or next((f"{k} {entry[k]!r} is not a string" for k in
                                   ("address", "user", "profile", "group", "transport")
                                   if not isinstance(entry.get(k), str | type(None))), None)
        if problem is None and not (entry.get("port") is None or (isinstance(entry["port"], int)
                                                                  and not isinstance(entry["port"], bool))):
            problem = f"port {entry['port']!r} is not a number"
        if problem is None and not isinstance(entry.get("vars") or {}, dict):
            problem = "vars is not an object"
        if problem is not None:
            raise RunDirError(f"{where}: {problem}")
        hosts.append(Host(**{**entry, "vars": entry.get("vars") or {},
                             "transport": entry.get("transport") or "ssh"}))
    return hosts


def validate_bundle(path: Path) -> Path:
    """The raw/ folder of a run directory or bundle, or ``RunDirError`` (a usage error) for what is not
    one: a parent folder of runs, a linked raw/, a folder without ``<host>/<command_id>.out`` files."""
    return _raw_folder(Path(path))


def copy_bundle_rest(bundle: Path, run_dir: Path, only: Callable[[str], bool] | None = None) -> list[str]:
    """Copy what a replay did not write itself (benchmark jobs, unlisted hosts; with ``only``, just the
    raw/ entries it accepts) from the bundle's raw/ into the new run's raw/: real folders and regular
    files only, links never followed. Returns what was refused, as ``raw/<path>: why``."""
    source = Path(bundle) / "raw"
    if not source.is_dir() or source.is_symlink():
        return []
    return copy_raw_folder(source, run_dir, only)


def copy_raw_folder(source: Path, run_dir: Path, only: Callable[[str], bool] | None = None) -> list[str]:
    """Copy the entries of a bundle's raw folder ``source`` (``rundir.raw_dir``, a reference already
    checked) into ``run_dir/raw`` as ``copy_bundle_rest`` does; a ``_source.json`` is never copied."""
    refused: list[str] = []
    for name, entry in sorted(_entries(source).items()):
        if name.startswith(".") or name == RAW_SOURCE or (only is not None and not only(name)):
            continue  # tested before the target: a replay of 10,000 hosts copies a few _ entries, no host
        target = Path(run_dir) / "raw" / name
        if not os.path.lexists(target):
            _copy_tree(Path(entry.path), target, f"raw/{name}", refused, depth=0)
    return refused


def _copy_tree(src: Path, dst: Path, rel: str, refused: list[str], depth: int) -> None:
    if src.is_symlink():
        refused.append(f"{rel}: a symbolic link, not followed")
        return
    if src.is_dir():
        if depth > 8:
            refused.append(f"{rel}: nested too deep")
            return
        dst.mkdir()
        for name, entry in sorted(_entries(src).items()):
            _copy_tree(Path(entry.path), dst / name, f"{rel}/{name}", refused, depth + 1)
        return
    try:
        data, cut = read_regular(src)
    except BundleFileError as exc:
        refused.append(f"{rel}: {exc}")
        return
    dst.write_bytes(data)
    if cut:
        refused.append(f"{rel}: cut at {MAX_FILE_BYTES} bytes")
