"""Merge node bundles (node-local spools, partial sweeps) into one run directory, then grade it fleet-wide.

    outcome = merge_bundles([Path("/shared/hc-spool"), Path("runs/20261122T031500Z")], Path("runs/nightly"),
                            inventory=Path("site.yaml"))
    outcome.results.verdict, outcome.provenance["gpu007"]   # {"source": ".../gpu007", "collected_at": ...}
    outcome.refused    # ["gpu003's bundle carried data for gpu002: refused (...)"]

A source is a bundle (a folder with ``raw/<host>/``: a run directory, a capture bundle) or a folder of
bundles (a spool directory, ``<spool>/<host>/``). Per host the newest collection wins (``_host.json``
``collected_at``; ``prefer="newest-reachable"`` passes over collections that failed to reach the node,
``prefer="last"`` lets later sources win whatever their age). Hosts the inventory expects but no source
holds get ``host.reachable`` ERROR "no result from node". Nothing is copied: an index bundle references
each chosen host in its bundle (``ops.mergestage``, ``store.hostrefs``) and the ``healthcheck run --replay``
machinery grades it there: same parsers, fleet checks and reports as any run. The merged run references
the same bundles (``raw/_source.json``) and keeps what its report shows of failing hosts, so it re-renders
without them and replays while they are there.

Inputs are untrusted (``healthcheck.ops.bundletrust``, docs/security.md): a spool's ``<spool>/<X>/``
supplies host X only (anything else in it is refused), a node's clock cannot make its collection win,
its manifest gives no drain target. Symlinks, hard links and special files are never followed or read
(``O_NOFOLLOW``, ``openat``), host and file names must be plain (``raw/<host>/<command_id>.out|.err|.rc``,
``_host.json``), each file is read at most 64 MiB (``store.bundle.NODE_RULES``): a refused file is an error
of its host's command, naming it. A malformed bundle is skipped and named, a host folder that vanishes is
that host's "no result from node", the others merged. Everything refused or skipped is listed in
``merge.json`` beside the results; what concerns a graded host is also a ``merge.*`` WARN finding in its report.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from healthcheck import probes as probe_registry
from healthcheck.core.profiles import available_profiles
from healthcheck.inventory.load import load_inventory
from healthcheck.ops.bundletrust import (
    MERGE_RECORD,
    Flag,
    Source,
    bundle_probes,
    collection_time,
    is_merged_run,
    manifest_entries,
    read_json,
)
from healthcheck.ops.mergestage import Candidate, keep_excerpts, stage_index
from healthcheck.run.execute import execute_run
from healthcheck.run.options import OutputOptions, RunOptions, SelectionOptions, TargetOptions
from healthcheck.run.outcome import RunOutcome
from healthcheck.run.outputs import render_or_error
from healthcheck.store.hostrefs import host_folder
from healthcheck.store.results import write_results
from healthcheck.store.rundir import HOST_META, RAW_SOURCE, referenced_hosts, write_json

PREFER = ("newest", "newest-reachable", "last")
HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$")


@dataclass
class MergeOutcome:
    run: RunOutcome
    provenance: dict[str, dict[str, Any]]
    skipped: list[str] = field(default_factory=list)   # what was not merged, and why
    refused: list[str] = field(default_factory=list)   # host folders a bundle may not supply
    clock: list[str] = field(default_factory=list)     # collection times not believed

    def graded_by(self) -> dict[str, int]:
        """Hosts whose node's grading was taken, and hosts the merge graded from their outputs."""
        grading = [h.grading for h in self.run.results.hosts.values()]
        taken = sum(1 for g in grading if g is not None and g.get("taken"))
        return {"node": taken, "merge": len(grading) - taken}


@dataclass
class _Found:
    """What reading the sources gave: candidates, and everything refused or flagged on the way."""

    candidates: list[Candidate] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    flags: list[Flag] = field(default_factory=list)

    def lines(self, check: str) -> list[str]:
        return [f.text for f in self.flags if f.check == check]


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return path.lstat()
    except OSError:
        return None


def _is_dir(path: Path) -> bool:
    st = _lstat(path)
    return st is not None and stat.S_ISDIR(st.st_mode)


def find_bundles(sources: Sequence[Path], skipped: list[str]) -> list[Source]:
    """Each source that is a bundle (it may supply any host), and each bundle one level down in a source
    that is a spool (it may supply only the host its folder names)."""
    found = []
    for order, given in enumerate(sources):
        source = Path(os.path.realpath(given))  # referenced from the run: no link left above a bundle
        if not _is_dir(source):
            skipped.append(f"{source}: not a directory (symlinks are not followed)")
        elif _is_dir(source / "raw"):
            found.append(Source(source, order))
        else:
            inner = _spool_entries(source, skipped)
            if not inner:
                skipped.append(f"{source}: neither a bundle (raw/) nor a folder of bundles")
            found.extend(Source(p, order, speaks_for=p.name) for p in inner)
    return found


def _spool_entries(spool: Path, skipped: list[str]) -> list[Path]:
    """The node bundles of a spool folder; a merged run written inside it is named and left out."""
    try:
        inner = sorted(p for p in spool.iterdir() if not p.name.startswith(".") and _is_dir(p / "raw") and _is_dir(p))
    except OSError as exc:
        skipped.append(f"{spool}: cannot be listed ({exc.strerror or exc})")
        return []
    merged = [p for p in inner if is_merged_run(p)]
    skipped.extend(f"{p}: a merged run ({MERGE_RECORD}) inside the spool, not a node's bundle: not read again"
                   for p in merged)
    return [p for p in inner if p not in merged]


def candidates(source: Source, found: _Found, now: datetime, known_probes: Collection[str],
               entries_needed: bool = True) -> None:
    """Every host collection ``source`` may supply, with its time and (when ``entries_needed``: no
    inventory gives the hosts) manifest entry, into ``found``."""
    bundle = source.bundle
    entries = manifest_entries(read_json(bundle / "manifest.json")) if entries_needed else {}
    probes, unknown = bundle_probes(read_json(bundle / "results.json"), known_probes)
    if unknown:
        found.skipped.append(f"{bundle / 'results.json'}: probe(s) {', '.join(unknown[:5])} unknown to this "
                             "healthcheck: not graded")
    if os.path.lexists(bundle / "raw" / RAW_SOURCE):  # its host outputs live elsewhere: never followed here
        found.skipped.append(f"{bundle / 'raw' / RAW_SOURCE}: a replayed or merged run refers to other bundles' "
                             "outputs; merge does not follow it: give those bundles as sources")
    try:
        folders = sorted((bundle / "raw").iterdir())
    except OSError as exc:  # removed or replaced while the merge runs
        found.skipped.append(f"{bundle / 'raw'}: cannot be listed ({exc.strerror or exc}): bundle skipped")
        return
    for folder in folders:
        name = folder.name
        if name.startswith(("_", ".")):
            continue
        if not HOST_NAME.match(name) or not _is_dir(folder):
            found.skipped.append(f"{folder}: not a plain host folder (bad name, symlink or file)")
            continue
        if not source.may_supply(name):
            found.flags.append(Flag(str(source.speaks_for), "merge.identity", source.refusal(name, folder)))
            continue
        meta = read_json(folder / HOST_META)
        meta = meta if isinstance(meta, dict) else {}
        when, problem = collection_time(meta.get("collected_at"), now)
        if problem is not None:
            found.flags.append(Flag(name, "merge.collected_at", f"{folder}: {problem}"))
        found.candidates.append(Candidate(
            host=name, folder=host_folder(bundle, name), bundle=bundle, order=source.order,
            spool=source.speaks_for is not None, when=when, probes=probes,
            collected_at=str(meta.get("collected_at") or ""), reachable=not meta.get("transport_error"),
            entry=entries.get(name)))


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


def _rank(cand: Candidate, prefer: str) -> tuple[Any, ...]:
    if prefer == "last":
        return (cand.order,)
    if prefer == "newest-reachable":
        return (cand.reachable, cand.when, cand.order)
    return (cand.when, cand.order)


def merge_bundles(sources: Sequence[Path], run_dir: Path, *, inventory: Path | None = None,
                  profile: str | None = None, prefer: str = "newest", probes: Sequence[str] | None = None,
                  render: bool = True, regrade: bool = False, now: datetime | None = None) -> MergeOutcome:
    """Merge ``sources`` into ``run_dir`` (absent or empty) and grade the merged fleet: a node's own grading
    is taken when it was graded as this merge grades (``run.nodegrading``), unless ``regrade``. ``now`` is
    the merge's clock, against which node times are bounded (default: this machine's)."""
    found = _Found()
    known = {p.name for p in probe_registry.all_probes()}
    for source in find_bundles(sources, found.skipped):
        candidates(source, found, now or datetime.now(timezone.utc), known, entries_needed=inventory is None)
    chosen = choose(found.candidates, prefer)
    expected = None
    if inventory is not None:
        search = [Path(inventory).resolve().parent / "profiles"]
        expected = load_inventory(inventory, known_profiles=available_profiles(search)).hosts
    run_dir = Path(run_dir)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    index = Path(tempfile.mkdtemp(prefix=f".{run_dir.name}.merge-", dir=run_dir.parent))  # ours alone: removed below
    flags = found.flags
    try:
        hosts = stage_index(index, chosen, expected, sources, found.skipped)
        graded = sorted({p for c in chosen.values() for p in c.probes}) or None
        outcome = execute_run(RunOptions(
            target=TargetOptions(replay=index, inventory=inventory, profile=profile),
            outputs=OutputOptions(run_dir=run_dir, render=render and not flags),
            selection=SelectionOptions(probes=list(probes) if probes else graded,
                                       node_grading="regrade" if regrade else "take")))
    finally:
        shutil.rmtree(index, ignore_errors=True)
    flags = [*flags, *grading_refusals(outcome, chosen)]
    if flags:
        outcome.report_error = report_flags(outcome, flags, render)
    refs = referenced_hosts(run_dir / "raw")
    kept = keep_excerpts(run_dir, outcome.results, refs)  # the report read them in place; kept for re-renders
    provenance = {name: {"source": str(c.folder), "collected_at": c.collected_at, "reachable": c.reachable}
                  for name, c in sorted(chosen.items())}
    for name in hosts:
        provenance.setdefault(name, {"source": None, "collected_at": None, "reachable": False})
        result = outcome.results.hosts.get(name)
        if result is not None and result.grading is not None:
            provenance[name]["grading"] = dict(result.grading)
    merged = MergeOutcome(run=outcome, provenance=provenance, skipped=found.skipped,
                          refused=[f.text for f in flags if f.check == "merge.identity"],
                          clock=found.lines("merge.collected_at"))
    outputs = {"referenced": len(refs), "kept_excerpts": kept, "in_run": len(hosts) - len(refs)}
    write_json(run_dir / MERGE_RECORD, {"sources": [str(s) for s in sources], "prefer": prefer, "regrade": regrade,
                                        "candidates": len(found.candidates), "outputs": outputs,
                                        "graded_by": merged.graded_by(), "hosts": provenance,
                                        "refused": merged.refused, "clock": merged.clock, "skipped": merged.skipped})
    note_in_manifest(run_dir, outputs, merged.graded_by())
    return merged


def grading_refusals(outcome: RunOutcome, chosen: Mapping[str, Candidate]) -> list[Flag]:
    """A node whose own grading spoke for another host (``run.nodegrading``): refused as its bundle's other
    host folders are, a ``merge.identity`` flag of that node (it was graded from its own outputs instead)."""
    return [Flag(name, "merge.identity", f"{name}'s bundle carried a grading for another host: refused "
                                         f"({chosen[name].bundle}): {result.grading.get('why')}")
            for name, result in outcome.results.hosts.items()
            if result.grading is not None and result.grading.get("refused") and name in chosen]


def note_in_manifest(run_dir: Path, outputs: Mapping[str, int], graded_by: Mapping[str, int]) -> None:
    """``manifest.json`` says what the run is: a merge whose host outputs stay in the node bundles."""
    path = run_dir / "manifest.json"
    manifest = read_json(path)
    if isinstance(manifest, dict):
        manifest["merge"] = {"record": MERGE_RECORD, "graded_by": dict(graded_by), "outputs": {
            **outputs, "where": f"raw/{RAW_SOURCE} names each host's bundle; raw/_kept/ holds report excerpts"}}
        write_json(path, manifest)


def report_flags(outcome: RunOutcome, flags: Sequence[Flag], render: bool) -> str | None:
    """Each flag about a graded host becomes a ``merge.*`` WARN finding of that host (never drained:
    ``merge.*`` is advisory); results.json is rewritten and, with ``render``, the reports written
    Returns the reports' error, if any."""
    results = outcome.results
    added = []
    for flag in flags:
        host = results.hosts.get(flag.host)
        if host is None:
            continue
        finding = flag.finding()
        host.findings.append(finding)
        added.append(finding)
    if added:
        write_results(outcome.run_dir, results)   # the findings table holds the flags too
    return render_or_error(outcome.run_dir, results) if render else outcome.report_error


