"""The run's machine-readable result: ``results.json`` as typed values.

    results = load_results(Path("runs/20261122T031500Z"))
    results.hosts["gpu001"].verdict        # Status.FAIL
    results.summary["by_verdict"]          # {"PASS": 3, "FAIL": 1, ...}

Schema ``healthcheck.results/1`` (documented in docs/results-schema.md)::

    {"schema": "healthcheck.results/1",
     "run": {"id", "started", "finished", "duration_s", "mode", "probes", "inventory", "version", ...},
     "summary": {"verdict", "hosts", "by_verdict": {status: n}, "findings_by_status": {status: n}},
     "hosts": {name: {"verdict", "profile", "group", "address",
                      "findings": [Finding...], "observations": {probe: <json>}}}}
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from healthcheck.model import Finding, Status, host_verdict, json_safe, worst

SCHEMA = "healthcheck.results/1"


_PLAIN = (str, int, float, bool, type(None))


def to_jsonable(obj: Any) -> Any:
    """Observations (dataclasses, tuples, enums) as plain JSON values."""
    if isinstance(obj, float):
        return json_safe(obj)  # NaN/inf from a node: a string, never a bare NaN in results.json
    if isinstance(obj, _PLAIN) and not isinstance(obj, Status):
        return obj
    if isinstance(obj, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Status):
        return obj.value
    if isinstance(obj, bytes):
        return obj.decode("utf-8", errors="replace")
    return str(obj)


@dataclass
class HostResult:
    name: str
    findings: list[Finding] = field(default_factory=list)
    observations: dict[str, Any] = field(default_factory=dict)
    profile: str | None = None
    group: str | None = None
    address: str | None = None

    @property
    def verdict(self) -> Status:
        return host_verdict(self.findings)

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict.value, "profile": self.profile, "group": self.group,
                "address": self.address, "findings": [f.to_json() for f in self.findings],
                "observations": self.observations}  # already JSON form (stages.grade_host)

    @classmethod
    def from_json(cls, name: str, obj: Mapping[str, Any]) -> HostResult:
        return cls(name=name, findings=[Finding.from_json(f) for f in obj.get("findings", [])],
                   observations=dict(obj.get("observations") or {}), profile=obj.get("profile"),
                   group=obj.get("group"), address=obj.get("address"))


@dataclass
class RunResults:
    """``extra`` keeps top-level keys added after the run (``changes``, ``trends`` from history)."""

    run: dict[str, Any]
    hosts: dict[str, HostResult]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> Status:
        verdicts = [h.verdict for h in self.hosts.values()]
        graded = [v for v in verdicts if v is not Status.SKIP]
        if not verdicts:
            return Status.ERROR
        return worst(graded) if graded else Status.SKIP

    def findings(self) -> Iterable[Finding]:
        for host in self.hosts.values():
            yield from host.findings

    def summary(self) -> dict[str, Any]:
        by_verdict = {s.value: 0 for s in Status}
        by_status = {s.value: 0 for s in Status}
        for host in self.hosts.values():
            by_verdict[host.verdict.value] += 1
            for f in host.findings:
                by_status[f.status.value] += 1
        return {"verdict": self.verdict.value, "hosts": len(self.hosts), "by_verdict": by_verdict,
                "findings_by_status": by_status}

    def to_json(self) -> dict[str, Any]:
        return {**self.extra, "schema": SCHEMA, "run": self.run, "summary": self.summary(),
                "hosts": {name: self.hosts[name].to_json() for name in sorted(self.hosts)}}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> RunResults:
        if obj.get("schema") != SCHEMA:
            raise ValueError(f"results.json has schema {obj.get('schema')!r}, expected {SCHEMA!r}")
        extra = {k: v for k, v in obj.items() if k not in ("schema", "run", "summary", "hosts")}
        return cls(run=dict(obj.get("run") or {}),
                   hosts={n: HostResult.from_json(n, h) for n, h in (obj.get("hosts") or {}).items()},
                   extra=extra)


def load_results(run_dir: Path) -> RunResults:
    return RunResults.from_json(json.loads((Path(run_dir) / "results.json").read_text()))


def write_results(run_dir: Path, results: RunResults) -> Path:
    """Write ``results.json`` atomically (temp file + rename)."""
    path = Path(run_dir) / "results.json"
    tmp = path.with_suffix(".json.tmp")
    # Compact separators keep the C encoder (indent= falls back to pure Python: minutes at 1000 hosts).
    try:
        doc = results.to_json()
        try:
            text = json.dumps(doc, separators=(",", ":"), allow_nan=False)
        except ValueError:  # a NaN that came in another way (an extension's observations): made safe here
            text = json.dumps(json_safe(doc), separators=(",", ":"), allow_nan=False)
        tmp.write_text(text + "\n")
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)  # disk full: no half-written file left behind
        raise
    return path
