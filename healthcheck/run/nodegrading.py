"""A merge takes a node's own grading when it was graded as the merge would grade it.

    taken, grading = take_node_grading(ref, "gpu001", probe_names, host_digest(host, profiles))
    grading   # {"taken": True, "why": "graded by the node: healthcheck 0.1.0, profile sha256:5e1c0a9b2f11"}
    grading   # {"taken": False, "why": "graded against sha256:0123456789ab, this merge grades against sha256:..."}

A node's bundle in a spool (``healthcheck node``) holds its findings (``findings.table.json.gz``), its
observations (``observations.jsonl.gz``) and in ``results.json`` the healthcheck version and the digest of
the effective profile it graded against (``core.profiles.profile_digest``). When the version, the digest
and the probes are the merge's own, grading the outputs again would give the same findings, so they are
taken as they are (the fleet checks and the verdict rules still run over the whole merged fleet).

The bundle is untrusted input, read as its outputs are (no link followed, one hard link per file, bounded
sizes, gzip bounded when inflated) and checked: ``results.json`` of this healthcheck's results schema
naming the spool folder's host only, every finding of the table of that host and of the results schema's
types, its key observations (results.json) an object per probe, and its gzip member of the observation
store complete, bounded and of lines naming that host only (appended to the merged store as it is).
Anything else is a reason to
grade the outputs instead, given in ``grading["why"]``; findings or results for another host are an identity refusal
(``grading["refused"]``: a ``merge.identity`` WARN of the node, docs/security.md). Findings the merged run
adds itself are not taken (fleet checks, the "nothing checked" rule, a stage's crash).
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from itertools import chain
from typing import Any

import orjson

import healthcheck
from healthcheck.core.hostvars import host_profile
from healthcheck.core.model import FINDING_FIELDS, Host, Status
from healthcheck.core.profiles import EMPTY_PROFILE, Profile, profile_digest
from healthcheck.core.verdicts import CHECK as NOTHING_CHECKED
from healthcheck.store.bundle import MAX_FILE_BYTES
from healthcheck.store.findings_table import TABLE, TableError, table_cells
from healthcheck.store.hostrefs import HostRef, open_bundle
from healthcheck.store.jsoncodec import loads
from healthcheck.store.observation_store import STORE
from healthcheck.store.results import SCHEMA
from healthcheck.store.safeio import BundleFileError, read_regular

MAX_INFLATED = 4 * MAX_FILE_BYTES       # a findings table or a host's observations, once inflated
CHECK_NAME = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")   # the results schema's pattern
_SCALAR_TYPES = {str, int, float, bool, type(None)}
_MERGED_RUN_ADDS = ("fleet",)           # categories of findings the merged run computes itself


class NotTaken(Exception):
    """Why the node's grading is not taken; ``identity``: it spoke for another host (refused)."""

    def __init__(self, why: str, identity: bool = False) -> None:
        super().__init__(why)
        self.identity = identity


def take_node_grading(ref: HostRef, host: str, probes: Sequence[str], digest: str
                      ) -> tuple[tuple[list[list[Any]], dict[str, Any], bytes] | None, dict[str, Any]]:
    """The node's findings (as cell columns: ``FINDING_FIELDS`` order, then ``observe``), key observations
    (JSON form) and observation store member when its grading can be taken, and the grading record either
    way (``{"taken", "why"}``, plus ``"refused": True`` for an identity refusal)."""
    if not ref.spool:
        return None, {"taken": False, "why": "a bundle named on the command line is graded by the merge"}
    try:
        fd = open_bundle(ref.bundle)
    except OSError as exc:
        return None, {"taken": False, "why": f"{ref.bundle} could not be opened ({exc.strerror or exc})"}
    try:
        taken = _read_grading(fd, ref, host, probes, digest)
    except NotTaken as exc:
        record: dict[str, Any] = {"taken": False, "why": str(exc)}
        return None, ({**record, "refused": True} if exc.identity else record)
    except Exception as exc:  # untrusted input of a shape no check above foresaw: its outputs are graded
        return None, {"taken": False, "why": f"its grading could not be read: {type(exc).__name__}: {exc}"[:300]}
    finally:
        os.close(fd)
    return taken, {"taken": True, "why": f"graded by the node: healthcheck {healthcheck.__version__}, "
                                         f"profile {_short(digest)}"}


def _read_grading(fd: int, ref: HostRef, host: str, probes: Sequence[str], digest: str
                  ) -> tuple[list[list[Any]], dict[str, Any], bytes]:
    results = _json(_read(fd, "results.json", MAX_FILE_BYTES, ref), "results.json")
    at = _host_entry(results, host, probes, digest)
    table, _ = _inflate(_read(fd, TABLE, MAX_FILE_BYTES, ref), TABLE)
    try:
        cells, distinct = table_cells(table, TABLE)
    except TableError as exc:
        raise NotTaken(f"its {exc}") from None
    others = sorted(str(name) for name in distinct[_HOST] if name != host)
    if others:
        raise NotTaken(f"its findings table held findings for {others[0][:60]}: refused", identity=True)
    _check_columns(distinct)
    added = {c for c in distinct[_CHECK] if not _graded_by_the_node(c)}
    if added:
        rows = [i for i, check in enumerate(cells[_CHECK]) if check not in added]
        cells = [[column[i] for i in rows] for column in cells]
    if not cells[_HOST]:
        raise NotTaken("its findings table has no finding for it")
    return cells, _key_observations(results["hosts"][host]), _member(fd, ref, host, at)


def _host_entry(results: Any, host: str, probes: Sequence[str], digest: str) -> list[int]:
    """Where the host's observations are (its results.json entry's ``observations_at``), once the bundle is
    known to be graded as this merge grades."""
    if not isinstance(results, dict) or results.get("schema") != SCHEMA:
        raise NotTaken(f"its results.json is not of schema {SCHEMA}")
    hosts, run = results.get("hosts"), results.get("run")
    if not isinstance(hosts, dict) or not isinstance(run, dict):
        raise NotTaken("its results.json has no hosts or run object")
    others = sorted(str(name)[:60] for name in hosts if name != host)
    if others:
        raise NotTaken(f"its results.json held results for {others[0]}: refused", identity=True)
    entry = hosts.get(host)
    if not isinstance(entry, dict):
        raise NotTaken("its results.json has no entry for it")
    version = run.get("version")
    if version != healthcheck.__version__:
        raise NotTaken(f"graded by healthcheck {str(version)[:40]}, this merge is {healthcheck.__version__}")
    theirs = entry.get("profile_digest")
    if theirs != digest:
        said = _short(theirs) if isinstance(theirs, str) else "no recorded profile"
        raise NotTaken(f"graded against {said}, this merge grades against {_short(digest)}")
    ran = run.get("probes")
    if not isinstance(ran, list) or sorted(map(str, ran)) != sorted(probes):
        raise NotTaken(f"graded probes {', '.join(sorted(map(str, ran or [])))[:200] or '(none)'}; this merge "
                       f"grades {', '.join(sorted(probes)) or '(none)'}")
    at = entry.get("observations_at")
    if not (isinstance(at, list) and len(at) == 2 and all(type(x) is int and x >= 0 for x in at)
            and at[1] > 0 and at[0] + at[1] <= MAX_FILE_BYTES):
        raise NotTaken("its results.json does not locate its observations")
    return at


def _graded_by_the_node(check: str) -> bool:
    """A check of the node's own grading, not one the merged run adds (fleet checks, verdict rules)."""
    return check != NOTHING_CHECKED and not check.endswith(".stage") and check.split(".", 1)[0] not in _MERGED_RUN_ADDS


_HOST, _CHECK = FINDING_FIELDS.index("host"), FINDING_FIELDS.index("check")
_COLUMN = {name: i for i, name in enumerate((*FINDING_FIELDS, "observe"))}


def _check_columns(distinct: Sequence[Sequence[Any]]) -> None:
    """The results schema's types (``$defs/finding``), tested on each column's distinct values (a host has
    ~100 findings of ~60 checks, a few dozen distinct values a column); anything else is a reason to grade
    the outputs."""
    def kinds(*names: str) -> set[type]:
        return _types(distinct[_COLUMN[name]] for name in names)

    problem = None
    if not kinds("check") <= {str} or not all(map(CHECK_NAME.match, distinct[_CHECK])):
        problem = "a check name that is not a dotted id"
    elif not kinds("status") <= {Status}:
        problem = "a status that is none of PASS, WARN, FAIL, SKIP, ERROR"
    elif not kinds("message", "component") <= {str}:
        problem = "a message or component that is not text"
    elif not kinds("value", "expected") <= _SCALAR_TYPES:
        problem = "a value or expectation that is not a JSON scalar"
    elif not kinds("unit", "remedy", "source") <= {str, type(None)}:
        problem = "a unit, remedy or source that is not text"
    elif not kinds("observe") <= {bool}:
        problem = "an observe mark that is not true or false"
    if problem is not None:
        raise NotTaken(f"its findings table has {problem}")


def _types(rows: Iterable[tuple[Any, ...]]) -> set[type]:
    return set(map(type, chain.from_iterable(rows)))


def _key_observations(entry: dict[str, Any]) -> dict[str, Any]:
    """The host's key observations as its results.json entry holds them (what the fleet checks read)."""
    observations = entry.get("observations", {})
    if not isinstance(observations, dict) or not all(isinstance(v, dict | list) or v is None
                                                     for v in observations.values()):
        raise NotTaken("its results.json entry's observations are not an object per probe")
    return observations


def _member(fd: int, ref: HostRef, host: str, at: list[int]) -> bytes:
    """The host's gzip member of the bundle's observation store, appended to the merged store as it is: one
    complete member (inflated bounded) whose every line is ``{"probe": ..., "host": host, "observations": ...``
    as this healthcheck writes it. Its JSON is not decoded here: the merged run reads the member as the host's
    by where it is, whatever a line says, and leaves out a line that is not JSON (``observation_store``)."""
    data = _read(fd, STORE, at[0] + at[1], ref)
    member = data[at[0]:at[0] + at[1]]
    if len(member) != at[1]:
        raise NotTaken(f"its {STORE} ends before the host's member ({at[0]} + {at[1]} bytes)")
    text, whole = _inflate(member, STORE)
    if not whole or (text and not text.endswith(b"\n")):
        raise NotTaken(f"its {STORE} member of {host} is not one complete member of whole lines")
    own = orjson.dumps(host)
    for line in text.splitlines():
        m = _LINE.match(line)
        if m is None:
            raise NotTaken(f"its {STORE} member of {host} has a line this healthcheck does not write")
        if m[1] != own:
            raise NotTaken(f"its {STORE} member named {m[1].decode(errors='replace')[:60]}: refused", identity=True)
    return member


_LINE = re.compile(rb'\{"probe":"[A-Za-z0-9_]+","host":("(?:[^"\\]|\\.)*"),"observations":')  # encode_observations


_DIGESTS: dict[str, tuple[Profile, str]] = {}   # per worker: one digest per profile a host uses as it is


def host_digest(host: Host, profiles: Mapping[str, Profile]) -> str:
    """The digest of the profile ``host`` is graded against here (its host vars included: a profile they
    extend names the host in its sources, so it is that host's own and digested for it alone)."""
    base = profiles.get(host.profile or "", EMPTY_PROFILE)
    effective = host_profile(host, base)
    if effective is not base:
        return profile_digest(effective)
    known = _DIGESTS.get(host.profile or "")
    if known is None or known[0] is not base:
        known = _DIGESTS[host.profile or ""] = (base, profile_digest(base))
    return known[1]


def _read(fd: int, name: str, limit: int, ref: HostRef) -> bytes:
    try:
        data, cut = read_regular(name, limit, fd, single_link=ref.spool)
    except BundleFileError as exc:
        raise NotTaken(f"its bundle holds no {name}" if _absent(fd, name) else f"its {name} {exc}") from None
    if cut and name != STORE:
        raise NotTaken(f"its {name} is over {limit} bytes")
    return data


def _absent(fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


def _inflate(data: bytes, name: str) -> tuple[bytes, bool]:
    """The first gzip member of ``data`` inflated to at most ``MAX_INFLATED`` bytes (a small file cannot
    become gigabytes), and whether it was all of ``data`` (one complete member, nothing after it)."""
    inflater = zlib.decompressobj(wbits=31)
    try:
        out = inflater.decompress(data, MAX_INFLATED)
    except zlib.error as exc:
        raise NotTaken(f"its {name} is not gzip: {exc}") from None
    if inflater.unconsumed_tail:
        raise NotTaken(f"its {name} inflates past {MAX_INFLATED} bytes")
    if not inflater.eof:
        raise NotTaken(f"its {name} is not a complete gzip member")
    return out, not inflater.unused_data


def _json(data: bytes, name: str) -> Any:
    try:
        return loads(data)
    except (ValueError, RecursionError) as exc:
        raise NotTaken(f"its {name} is not JSON: {exc}") from None


def _short(digest: str) -> str:
    return digest[:19]   # "sha256:" and 12 hex digits
