"""The run's machine-readable result: ``results.json`` as typed values.

    results = load_results(Path("runs/20261122T031500Z"))
    results.hosts["gpu001"].verdict        # Status.FAIL
    results.summary()["by_verdict"]        # {"PASS": 3, "FAIL": 1, ...}

Schema ``healthcheck.results/3`` (docs/results-schema.md, JSON Schema ``schemas/results.schema.json``)::

    {"schema": "healthcheck.results/3",
     "run": {"id", "started", "finished", "duration_s", "mode", "probes", "inventory", "version", ...},
     "summary": {"verdict", "hosts", "by_verdict": {status: n}, "findings_by_status": {status: n}},
     "files": {"findings": "findings.table.json.gz", "observations": "observations.jsonl.gz"},
     "hosts": {name: {"verdict", "profile", "group", "address", "counts": {status: n},
                      "findings": [non-PASS Finding...], "observations": {key observations},
                      "observations_at": [offset, length], "profile_digest": "sha256:...",
                      "grading": {"taken", "why"} (merged runs)}}}

Every finding, PASS included, is in the findings table (``healthcheck.store.findings_table``); every
observation in the observation store (``healthcheck.store.observation_store``). ``load_results`` reads
version 1 documents (every finding and observation inline) and version 2 (the assets observation among
the key observations) as well.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from itertools import chain
from operator import attrgetter
from pathlib import Path
from typing import Any

from healthcheck.core.model import Finding, Status, host_verdict, worst
from healthcheck.store.findings_table import TableError, read_table, write_table
from healthcheck.store.gcpause import gc_paused
from healthcheck.store.jsoncodec import dumps
from healthcheck.store.observation_store import (
    STORE,
    ObservationStore,
    encode_observations,
    iter_observations,
    key_observations,
)
from healthcheck.store.rundir import FindingsLog

SCHEMA = "healthcheck.results/3"
STATUS_VALUES = tuple(s.value for s in Status)  # iterating the Enum per host is slow at 10,000 hosts
# readable: version 1 held every finding and observation inline, version 2 the assets among the key observations
SCHEMAS = ("healthcheck.results/1", "healthcheck.results/2", SCHEMA)
FILES = {"findings": "findings.table.json.gz", "observations": STORE}
_STATUS = attrgetter("status")
_PASS = Status.PASS  # every other status is kept inline in results.json (an identity test per finding)



@dataclass
class HostResult:
    """One host. ``observations`` holds the key observations after a run (all of them for a version-1
    document, or after ``load_results(..., observations=True)``); ``observations_at`` locates the rest.
    ``stored`` is the verdict and counts results.json states, used only when ``findings`` could not be
    completed from the findings table (then it holds only the non-PASS findings)."""

    name: str
    findings: list[Finding] = field(default_factory=list)
    observations: dict[str, Any] = field(default_factory=dict)
    profile: str | None = None
    group: str | None = None
    address: str | None = None
    observations_at: list[int] | None = None
    stored: Mapping[str, Any] | None = None
    profile_digest: str | None = None        # the effective profile graded against (core.profiles.profile_digest)
    grading: Mapping[str, Any] | None = None  # a merge's: {"taken": bool, "why": text} (run.nodegrading)
    # what the fleet checks compare of the stored observations (run.fleetinputs), from grading to the fleet
    # stage only: never written; None reads the store
    compared: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def verdict(self) -> Status:
        if self.stored is not None:
            try:
                recorded = Status(self.stored.get("verdict"))
            except ValueError:
                recorded = Status.ERROR
            return worst([recorded, *(f.status for f in self.findings if f.status is not Status.SKIP)])
        return host_verdict(self.findings)

    def counts(self) -> dict[str, int]:
        """Findings per status (every status present, zero included)."""
        out = dict.fromkeys(STATUS_VALUES, 0)
        if self.stored is not None and isinstance(self.stored.get("counts"), Mapping):
            out.update({k: int(v) for k, v in self.stored["counts"].items() if k in out and isinstance(v, int)})
            return out
        for status, n in Counter(map(_STATUS, self.findings)).items():  # C-level count, then one lookup a status
            out[status.value] = n
        return out

    def to_json(self, verdict: Status | None = None, counts: dict[str, int] | None = None) -> dict[str, Any]:
        """``verdict`` and ``counts``: this host's, when the caller has computed them already."""
        out = {"verdict": (self.verdict if verdict is None else verdict).value, "profile": self.profile,
               "group": self.group, "address": self.address, "counts": self.counts() if counts is None else counts,
               "findings": [f.to_json() for f in self.findings if f.status is not _PASS],
               "observations": key_observations(self.observations)}  # already JSON form (stages.grade_host)
        if self.observations_at is not None:
            out["observations_at"] = list(self.observations_at)
        if self.profile_digest is not None:
            out["profile_digest"] = self.profile_digest
        if self.grading is not None:
            out["grading"] = dict(self.grading)
        return out

    @classmethod
    def from_json(cls, name: str, obj: Mapping[str, Any]) -> HostResult:
        """From a version-2 entry (then ``stored`` is set until the table completes the findings) or a
        version-1 entry (complete as it is)."""
        at = obj.get("observations_at")
        return cls(name=name, findings=[Finding.from_json(f) for f in obj.get("findings", [])],
                   observations=dict(obj.get("observations") or {}), profile=obj.get("profile"),
                   group=obj.get("group"), address=obj.get("address"),
                   observations_at=list(at) if isinstance(at, list) else None,
                   profile_digest=obj.get("profile_digest") if isinstance(obj.get("profile_digest"), str) else None,
                   grading=obj.get("grading") if isinstance(obj.get("grading"), dict) else None,
                   stored={"verdict": obj.get("verdict"), "counts": obj.get("counts")} if "counts" in obj else None)


_TOP_LEVEL = ("schema", "run", "summary", "hosts", "files")  # results.json's own keys; the rest is ``extra``


@dataclass
class RunResults:
    """``extra`` keeps top-level keys added after the run (``changes``, ``trends`` from history);
    ``schema`` is the one the results were read in (written always in ``SCHEMA``)."""

    run: dict[str, Any]
    hosts: dict[str, HostResult]
    extra: dict[str, Any] = field(default_factory=dict)
    schema: str = SCHEMA

    @property
    def verdict(self) -> Status:
        return run_verdict(h.verdict for h in self.hosts.values())

    def findings(self) -> Iterable[Finding]:
        """Every host's findings, lazily, in host order (``chain``: no Python frame per finding)."""
        return chain.from_iterable(host.findings for host in self.hosts.values())

    def summary(self, verdicts: Mapping[str, Status] | None = None,
                counts: Mapping[str, Mapping[str, int]] | None = None) -> dict[str, Any]:
        """Verdict, hosts per verdict, findings per status. ``verdicts``/``counts``: every host's, when the
        caller has them (a host's verdict walks its findings: computed once per host, not once per use)."""
        verdicts = verdicts if verdicts is not None else {n: h.verdict for n, h in self.hosts.items()}
        by_verdict = dict.fromkeys(STATUS_VALUES, 0)
        by_status = dict.fromkeys(STATUS_VALUES, 0)
        for name, host in self.hosts.items():
            by_verdict[verdicts[name].value] += 1
            for status, n in (counts[name] if counts is not None else host.counts()).items():
                by_status[status] += n
        return {"verdict": run_verdict(verdicts.values()).value, "hosts": len(self.hosts),
                "by_verdict": by_verdict, "findings_by_status": by_status}

    def to_json(self) -> dict[str, Any]:
        head, verdicts, counts = self._head()
        return {**head, "hosts": {name: self.hosts[name].to_json(verdicts[name], counts[name])
                                  for name in sorted(self.hosts)}}

    def json_chunks(self) -> Iterator[bytes]:
        """``to_json()`` as compact JSON text (``jsoncodec.dumps``), one host at a time: a fleet's results
        are never held whole as one document or one string."""
        head, verdicts, counts = self._head()
        yield dumps(head)[:-1] + (b',"hosts":{' if head else b'{"hosts":{')
        for i, name in enumerate(sorted(self.hosts)):
            yield (b"," if i else b"") + dumps(name) + b":" + dumps(self.hosts[name].to_json(verdicts[name],
                                                                                             counts[name]))
        yield b"}}"

    def _head(self) -> tuple[dict[str, Any], dict[str, Status], dict[str, dict[str, int]]]:
        """Everything but ``hosts``, and each host's verdict and counts (computed once)."""
        verdicts = {name: host.verdict for name, host in self.hosts.items()}
        counts = {name: host.counts() for name, host in self.hosts.items()}
        extra = {k: v for k, v in self.extra.items() if k not in _TOP_LEVEL}
        return ({**extra, "schema": SCHEMA, "run": self.run, "summary": self.summary(verdicts, counts),
                 "files": FILES}, verdicts, counts)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> RunResults:
        if obj.get("schema") not in SCHEMAS:
            raise ValueError(f"results.json has schema {obj.get('schema')!r}, expected one of {', '.join(SCHEMAS)}")
        extra = {k: v for k, v in obj.items() if k not in _TOP_LEVEL}
        return cls(run=dict(obj.get("run") or {}),
                   hosts={n: HostResult.from_json(n, h) for n, h in (obj.get("hosts") or {}).items()},
                   extra=extra, schema=obj["schema"])


def run_verdict(verdicts: Iterable[Status]) -> Status:
    """The run's verdict from its hosts': the worst graded one; SKIP when every host was skipped, ERROR
    when there is no host."""
    seen = set(verdicts)
    if not seen:
        return Status.ERROR
    graded = seen - {Status.SKIP}
    return worst(graded) if graded else Status.SKIP


def results_schema() -> dict[str, Any]:
    """The JSON Schema of results.json (``healthcheck/results.schema.json``, shipped in the package)."""
    return json.loads(resources.files("healthcheck.store").joinpath("results.schema.json").read_text(encoding="utf-8"))


def load_results(run_dir: Path, observations: bool | Collection[str] = False) -> RunResults:
    """The run as written. A version-2 or 3 run gets every finding back from its findings table (when the
    table is missing or damaged, the non-PASS findings and the stated verdicts and counts stand);
    ``observations=True`` also reads every host's full observations from the observation store, a
    collection of probe names (``("assets",)``) only those probes' observations."""
    run_dir = Path(run_dir)
    with gc_paused():
        results = RunResults.from_json(json.loads((run_dir / "results.json").read_text(encoding="utf-8")))
        complete_results(run_dir, results, observations)
    return results


def complete_results(run_dir: Path, results: RunResults, observations: bool | Collection[str] = False) -> None:
    """Fill version-2/3 hosts' findings from the findings table (and observations from the store: every
    probe's with ``True``, the named probes' with a collection of names)."""
    partial = {name: h for name, h in results.hosts.items() if h.stored is not None}
    if partial:
        try:
            table = read_table(run_dir)
        except TableError:
            table = None
        if table is not None:
            for name, host in partial.items():
                host.findings, host.stored = table.get(name, []), None
    where = {name: h.observations_at for name, h in results.hosts.items() if h.observations_at is not None}
    if observations and where:
        probes = None if observations is True else frozenset(observations)
        for name, obs in iter_observations(run_dir, where, probes):
            host = results.hosts[name]  # the store has everything the probes saw; results.json adds benchmarks
            host.observations = {**host.observations, **obs}


def expanded_document(run_dir: Path) -> dict[str, Any]:
    """The run as one JSON document with every finding and observation inline (the version-1 shape,
    ``"expanded": true``), for scripts that want a single object and can afford its size."""
    results = load_results(run_dir, observations=True)
    doc = results.to_json()
    for name, host in doc["hosts"].items():
        host["findings"] = [f.to_json() for f in results.hosts[name].findings]
        host["observations"] = results.hosts[name].observations
    return {**doc, "expanded": True}


def store_observations(run_dir: Path, results: RunResults) -> None:
    """Append to the observation store the hosts whose observations are not in it yet (built in memory, or
    read from version 1), setting their ``observations_at``; the others are left alone."""
    store = ObservationStore(run_dir)
    for host in results.hosts.values():
        if host.observations_at is None and host.observations:
            host.observations_at = store.append(encode_observations(host.name, host.observations))


def write_results(run_dir: Path, results: RunResults) -> Path:
    """Write the findings table, then ``results.json`` (each atomically: temp file + rename). Hosts whose
    observations are not in the observation store yet (built in memory, or read from version 1) are
    appended to it first: results.json keeps only their key observations."""
    store_observations(run_dir, results)
    write_table(run_dir, results.findings())
    path = Path(run_dir) / "results.json"
    tmp = path.with_suffix(".json.tmp")
    try:
        with tmp.open("wb") as out:  # compact, UTF-8; a NaN from elsewhere: null (jsoncodec)
            out.writelines(results.json_chunks())
            out.write(b"\n")
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)  # disk full: no half-written file left behind
        raise
    return path


def retire_journal(run_dir: Path) -> None:
    """A finished run's ``findings.jsonl`` (its crash journal) removed: results.json and the findings table
    hold every finding, so they are flushed to disk first and a crash after this still finds them whole.
    Only the run that wrote the journal calls this; a rebuilt run keeps its journal."""
    run_dir = Path(run_dir)
    for name in ("results.json", FILES["findings"]):
        fd = os.open(run_dir / name, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    FindingsLog(run_dir).retire()
