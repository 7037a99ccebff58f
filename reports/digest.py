"""The run as every report format sees it: results, manifest, grouped findings, raw excerpts.

    digest = load_digest(Path("runs/20261122T031500Z"))
    digest.verdict                     # Status.FAIL
    digest.groups[0].nodeset           # "gpu[001-004,017]"
    digest.raw_excerpt("gpu001", "nvidia-smi-l")

Grouping follows ``clush -b``: identical findings (same status, check, component, message) are
listed once under the folded set of hosts that produced them.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ClusterShell.NodeSet import NodeSet
from ClusterShell.RangeSet import RangeSet

from healthcheck.core.model import Finding, Status
from healthcheck.reports.findings_index import BAD, FindingIndex, HostTally, index_findings
from healthcheck.store.hostrefs import KEPT, HostRef, open_host_folder
from healthcheck.store.observation_store import iter_observations, read_observations
from healthcheck.store.results import HostResult, RunResults, load_results, run_verdict
from healthcheck.store.rundir import RunDirError, raw_dir, referenced_hosts

EXCERPT_BYTES = 4096


def fold(hosts: Iterable[str]) -> str:
    """Hosts as a folded ClusterShell nodeset: ``gpu[001-004,017]``."""
    names = sorted(set(hosts))
    return _fold(tuple(names)) if names else ""


def fold_brief(hosts: Iterable[str], width: int = 72) -> str:
    """``fold(hosts)`` cut at a range boundary to about ``width`` characters for a one-line summary:
    250 hosts one in four apart is ``gpu[00003,00007,…]``, not a 2,000-character line."""
    text = fold(hosts)
    if len(text) <= width:
        return text
    cut = max(text.rfind(",", 0, width), text.rfind("[", 0, width)) + 1
    head = text[:cut] if cut > 0 else text[:width]
    return head + ("…]" if head.count("[") > head.count("]") else "…")


_SIMPLE = re.compile(r"([A-Za-z_.-]+)(\d+)")  # one name = letters then one number: ``gpu00042``


@functools.lru_cache(maxsize=256)  # the same sets (hosts per verdict, per group) are folded by several formats
def _fold(names: tuple[str, ...]) -> str:
    """``NodeSet.fromlist(names)``, with the common names (letters then a number) grouped by prefix first:
    one RangeSet parse per prefix instead of one NodeSet parse per name (10,000 names: 7x less CPU)."""
    numbers: dict[str, list[str]] = defaultdict(list)
    others = []
    for name in names:
        m = _SIMPLE.fullmatch(name)
        if m:
            numbers[m[1]].append(m[2])
        else:
            others.append(name)
    try:
        parts = [f"{prefix}[{RangeSet(','.join(nums))}]" for prefix, nums in numbers.items()]
        return str(NodeSet.fromlist(parts + others))
    except Exception:  # a name NodeSet cannot parse (brackets, commas): list them plainly
        return ",".join(names)


@dataclass(frozen=True)
class FindingGroup:
    """Findings of one check on one component with one status, across hosts (``clush -b`` style).

    ``messages`` holds the distinct messages (the measured value, a host-key fingerprint or an address
    often differs per host); the first one is shown, the count of the others is stated, and
    ``message_hosts`` names the first host of each (the report lists them under the group).
    """

    status: Status
    check: str
    component: str
    messages: tuple[str, ...]
    remedy: str | None
    hosts: tuple[str, ...]
    expected: Any = None
    unit: str | None = None
    message_hosts: tuple[str, ...] = ()

    @property
    def similar(self) -> list[tuple[str, str]]:
        """(host, message) of the other distinct messages, the details a folded line leaves out."""
        return list(zip(self.message_hosts[1:], self.messages[1:], strict=False))

    @property
    def category(self) -> str:
        return self.check.split(".", 1)[0]

    @property
    def message(self) -> str:
        return self.messages[0] if self.messages else ""

    @property
    def nodeset(self) -> str:
        return fold(self.hosts)


def group_findings(findings: Iterable[Finding], statuses: Iterable[Status] = BAD) -> list[FindingGroup]:
    """Findings grouped by (status, check, component) across hosts; worst, then widest first."""
    wanted = set(statuses)
    buckets: dict[tuple[Status, str, str], list[Finding]] = defaultdict(list)
    for f in findings:
        if f.status in wanted:
            buckets[(f.status, f.check, f.component)].append(f)
    groups = []
    for (s, c, comp), fs in buckets.items():
        first: dict[str, str] = {}  # each distinct message with the first host that reported it
        for f in fs:
            first.setdefault(f.message, f.host)
        groups.append(FindingGroup(status=s, check=c, component=comp, messages=tuple(first),
                                   remedy=next((f.remedy for f in fs if f.remedy), None),
                                   hosts=tuple(sorted({f.host for f in fs})), expected=fs[0].expected,
                                   unit=fs[0].unit, message_hosts=tuple(first.values())))
    return sorted(groups, key=lambda g: (-g.status.rank, -len(g.hosts), g.check, _natural(g.component)))


def _natural(text: str) -> tuple:
    """Sort key that puts gpu2 before gpu10."""
    return tuple(int(p) if p.isdecimal() else p for p in re.split(r"(\d+)", text))


@dataclass
class RunDigest:
    """Everything a report needs, computed once per run."""

    run_dir: Path
    results: RunResults
    document: Mapping[str, Any] = field(default_factory=dict)  # results.json's schema, run and extra keys
    manifest: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)  # report options (``metrics_detail``)
    _memo: dict[str, Any] = field(default_factory=dict, repr=False)

    def memo(self, key: str, compute: Callable[[], Any]) -> Any:
        """A view computed once per digest and shared by the formats (``bench_views``)."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    @property
    def run(self) -> Mapping[str, Any]:
        return self.results.run

    @functools.cached_property
    def verdict(self) -> Status:
        return run_verdict(self.verdicts.values())  # ``results.verdict`` would grade every host again

    @functools.cached_property
    def verdicts(self) -> dict[str, Status]:
        """Each host's verdict, computed once (``HostResult.verdict`` recomputes it per call)."""
        return {name: host.verdict for name, host in self.results.hosts.items()}

    @functools.cached_property
    def hosts(self) -> list[HostResult]:
        """Hosts, worst verdict first, then by name."""
        v = self.verdicts
        return sorted(self.results.hosts.values(), key=lambda h: (-v[h.name].rank, h.name))

    @functools.cached_property
    def index(self) -> FindingIndex:
        """Every finding indexed once for all formats (tallies, by check, not passing)."""
        return index_findings(self.results.hosts.values())

    @property
    def tallies(self) -> dict[str, HostTally]:
        return self.index.tallies

    def summary(self) -> dict[str, Any]:
        def compute() -> dict[str, Any]:
            counts = {name: host.counts() if host.stored is not None else self.tallies[name].counts
                      for name, host in self.results.hosts.items()}
            return self.results.summary(self.verdicts, counts)
        return self.memo("summary", compute)

    @functools.cached_property
    def groups(self) -> list[FindingGroup]:
        return group_findings(self.index.not_passing)  # BAD has no PASS: the same groups, a fraction of the loop

    def observations(self, host: HostResult, probes: Collection[str] | None = None) -> Mapping[str, Any]:
        """A host's full observations (``probes`` only, when given): from the observation store when
        results.json keeps only the key ones (read per host, for the hosts a report details), else as loaded."""
        kept = host.observations if probes is None else {p: v for p, v in host.observations.items() if p in probes}
        if host.observations_at is None:
            return kept
        full = read_observations(self.run_dir, host.observations_at, probes)
        return {**kept, **full} if full is not None else kept

    def iter_observations(self, probes: Collection[str] | None = None, stored: Collection[str] | None = None
                          ) -> Iterable[tuple[HostResult, Mapping[str, Any]]]:
        """Every host with its full observations (``probes`` only, when given), one host in memory at a time
        (read from the observation store, the file opened once, when results.json keeps only the key ones).
        ``stored``: the probes worth reading from the store (default ``probes``); () reads nothing there."""
        hosts = self.results.hosts
        stored = probes if stored is None else stored
        where = {name: h.observations_at for name, h in hosts.items() if h.observations_at is not None} \
            if stored is None or stored else {}
        found = iter_observations(self.run_dir, where, stored) if where else iter(())
        pending = next(found, None)
        for name, host in hosts.items():
            kept = host.observations if probes is None else {p: v for p, v in host.observations.items() if p in probes}
            if pending is not None and pending[0] == name:
                yield host, {**kept, **pending[1]}
                pending = next(found, None)
            else:
                yield host, kept

    def hosts_by_verdict(self) -> dict[Status, list[str]]:
        out: dict[Status, list[str]] = {s: [] for s in Status}
        for name, verdict in self.verdicts.items():
            out[verdict].append(name)
        return {s: sorted(v) for s, v in out.items()}

    def raw_excerpt(self, host: str, command_id: str, limit: int = EXCERPT_BYTES) -> str | None:
        """The first ``limit`` bytes of ``raw/<host>/<command_id>.out`` (or of the benchmark job
        ``raw/_jobs/<command_id>.out``) as text, or None when there is no such output."""
        if "/" in command_id or "\\" in command_id or command_id.startswith("."):
            return None
        try:  # resolved once per digest: following a replay's raw/_source.json checks the bundle
            raw = self.memo("raw_dir", lambda: raw_dir(self.run_dir))
        except RunDirError:
            return None
        from healthcheck.store.safeio import BundleFileError, read_regular  # a referenced bundle is untrusted input

        refs = self.memo("host_refs", lambda: _host_refs(raw))
        if host.startswith(".") or "/" in host:
            return None
        name = f"{command_id}.out"
        for path in (raw / host / name, raw / KEPT / host / name, raw / "_jobs" / name):
            if path.parent.is_symlink() or (path.parent.parent.name == KEPT and path.parent.parent.is_symlink()):
                continue
            try:
                chunk, cut = read_regular(path, limit + 1)  # links are never followed
            except BundleFileError:
                continue
            return _excerpt(chunk, cut, limit)
        if host in refs:  # a merged run's host, read in its node bundle while it is there
            return _referenced_excerpt(refs[host], host, name, limit)
        return None


def _excerpt(chunk: bytes, cut: bool, limit: int) -> str:
    text = chunk[:limit].decode("utf-8", errors="replace")
    return text + ("\n[... truncated]" if cut or len(chunk) > limit else "")


def _host_refs(raw: Path) -> dict[str, HostRef]:
    try:
        return referenced_hosts(raw)
    except RunDirError:
        return {}


def _referenced_excerpt(ref: HostRef, host: str, name: str, limit: int) -> str | None:
    """The excerpt of ``name`` in a referenced host folder (no link followed; one hard link only in a
    node's spool folder)."""
    from healthcheck.store.safeio import BundleFileError, read_regular

    try:
        folder = open_host_folder(ref.bundle, host)
    except OSError:
        return None
    try:
        chunk, cut = read_regular(name, limit + 1, folder, single_link=ref.spool)
    except BundleFileError:
        return None
    finally:
        os.close(folder)
    return _excerpt(chunk, cut, limit)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return {}


def load_digest(run_dir: Path) -> RunDigest:
    """Read ``results.json`` (required), its findings table and ``manifest.json`` (optional) from ``run_dir``."""
    return digest_of(run_dir, load_results(Path(run_dir)))


def digest_of(run_dir: Path, results: RunResults) -> RunDigest:
    """The digest of results held in memory (the run that just finished, or a run ``healthcheck report``
    loaded once): nothing re-read but the manifest."""
    run_dir = Path(run_dir)
    return RunDigest(run_dir=run_dir, results=results,
                     document={**results.extra, "schema": results.schema, "run": results.run},
                     manifest=_read_json(run_dir / "manifest.json"))


_EXPECTED = re.compile(r"^\s*(>=|<=|>|<|==)\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)")
_FRACTION = re.compile(r"^\s*(>=|>)\s*(\d+(?:\.\d+)?)%\s+of\s+(-?\d+(?:\.\d+)?)")  # benchmarks/bands.py
_BETWEEN = re.compile(r"^\s*between\s+(-?[\d.]+(?:[eE][-+]?\d+)?)\s+and\s+(-?[\d.]+(?:[eE][-+]?\d+)?)")


def expected_bounds(expected: Any) -> tuple[float | None, float | None]:
    """(low, high) numeric bounds from an expectation text such as ``>= 460 GB/s``."""
    if isinstance(expected, int | float) and not isinstance(expected, bool):
        return float(expected), float(expected)
    text = str(expected or "")
    if m := _FRACTION.match(text):
        return float(m[2]) / 100 * float(m[3]), None
    if m := _BETWEEN.match(text):
        return float(m[1]), float(m[2])
    if m := _EXPECTED.match(text):
        value = float(m[2])
        return {">=": (value, None), ">": (value, None), "<=": (None, value), "<": (None, value),
                "==": (value, value)}[m[1]]
    return None, None


def expected_band(expected: Any) -> tuple[float, float | None] | None:
    """(pass threshold, nominal) of a band expectation ``>= 60% of 480 GB/s``; else (low, high)."""
    if m := _FRACTION.match(str(expected or "")):
        return float(m[2]) / 100 * float(m[3]), float(m[3])
    low, high = expected_bounds(expected)
    return (low, high) if low is not None else None


def margin(f: Finding) -> float | None:
    """Headroom of a measured value to its bound as a fraction (negative: the bound is violated)."""
    if isinstance(f.value, bool) or not isinstance(f.value, int | float):
        return None
    low, high = expected_bounds(f.expected)
    if low is not None and high is not None and low == high:
        return None  # equality checks have no meaningful margin
    value = float(f.value)
    candidates = []
    if low is not None and low != 0:
        candidates.append((value - low) / abs(low))
    if high is not None and high != 0:
        candidates.append((high - value) / abs(high))
    return min(candidates) if candidates else None


def split_source(message: str) -> tuple[str, str]:
    """``("text rest", "source text")``: the message without its balanced ``(source: ...)`` clause."""
    start = message.find("(source: ")
    if start < 0:
        return message, ""
    depth = 0
    for i in range(start, len(message)):
        depth += {"(": 1, ")": -1}.get(message[i], 0)
        if depth == 0:
            rest = (message[:start].rstrip() + " " + message[i + 1:].lstrip()).strip()
            return rest, message[start + len("(source: "):i]
    return message, ""


def short_cited(message: str, shown: int = 48) -> str:
    """The message with its ``(source: ...)`` clause cut to ``shown`` characters (tickets, chat)."""
    text, source = split_source(message)
    if len(source) <= shown:
        return message
    return f"{text} (source: {source[:shown].rsplit(' ', 1)[0]} …)"
