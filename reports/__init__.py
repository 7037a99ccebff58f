"""Report writers: every output format of a finished run, from the same results.

    from healthcheck import reports
    reports.write_all(Path("runs/20261122T031500Z"))
    # -> [.../report.html, .../junit.xml, .../metrics.prom, .../summary.md]

Each format is one module that registers a ``ReporterSpec`` (name -> render function and file
name). ``write_all`` loads the run once (or takes the results a run has in memory) and writes every
registered format.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from healthcheck.core.suggest import did_you_mean
from healthcheck.reports.digest import RunDigest, digest_of, load_digest
from healthcheck.reports.fabric_views import FABRIC_HEAT
from healthcheck.store.results import RunResults


class ReporterError(KeyError):
    """Duplicate or unknown reporter name."""


@dataclass(frozen=True)
class ReporterSpec:
    """One output format: ``render`` turns the run's digest into the file's bytes.

    Implements ``healthcheck.core.spec.Reporter``: ``write(run_dir)`` loads the run and writes one file.
    """

    name: str
    filename: str
    render: Callable[[RunDigest], bytes]

    def write(self, run_dir: Path) -> Path:
        return self.write_digest(load_digest(Path(run_dir)))

    def write_digest(self, digest: RunDigest) -> Path:
        path = digest.run_dir / self.filename
        tmp = path.with_name(path.name + ".tmp")
        try:
            tmp.write_bytes(self.render(digest))
            tmp.replace(path)
        except BaseException:  # a full disk leaves no half-written temporary file behind
            tmp.unlink(missing_ok=True)
            raise
        return path


_REPORTERS: dict[str, ReporterSpec] = {}

# Built-in formats, in the order they are written.
BUILTIN = tuple(f"healthcheck.reports.{name}" for name in ("html", "junit", "prometheus", "markdown"))


def register(spec: ReporterSpec) -> ReporterSpec:
    if spec.name in _REPORTERS:
        raise ReporterError(f"reporter {spec.name!r} registered twice")
    _REPORTERS[spec.name] = spec
    return spec


def all_reporters() -> list[ReporterSpec]:
    """Every reporter: the built-ins in ``BUILTIN`` order, then any registered by plugins."""
    for module in BUILTIN:
        importlib.import_module(module)
    rank = {module: i for i, module in enumerate(BUILTIN)}
    return sorted(_REPORTERS.values(), key=lambda s: rank.get(s.render.__module__, len(rank)))


def get(name: str) -> ReporterSpec:
    for spec in all_reporters():
        if spec.name == name:
            return spec
    raise ReporterError(f"unknown reporter {name!r}{did_you_mean(name, _REPORTERS)}; "
                        f"known: {', '.join(sorted(_REPORTERS))}")


def fleet_views() -> tuple[Any, ...]:
    """What the reports show over the whole fleet, worked out in the run's fleet stage (``run.post``) as a
    fleet check's table is: each has ``name``, the probes it ``reads`` and what it keeps of them (``keep``, as
    ``core.spec.FleetCheck``), and ``table(observations, hosts, profiles)``, a results.json section."""
    return (FABRIC_HEAT,)


def write_all(run_dir: Path, names: list[str] | None = None, results: RunResults | None = None,
              options: Mapping[str, Any] | None = None) -> list[Path]:
    """Write every registered format (or only ``names``) into ``run_dir``; returns the files.
    ``results``: the run as the pipeline holds it, so nothing is read back from disk; ``options``:
    report options (``metrics_detail``: per-GPU, per-link and per-check series in metrics.prom;
    ``junit_full``: a junit.xml testcase for every finding, PASS included)."""
    digest = load_digest(Path(run_dir)) if results is None else digest_of(Path(run_dir), results)
    digest.options = dict(options or {})
    specs = all_reporters() if names is None else [get(n) for n in names]
    return [spec.write_digest(digest) for spec in specs]
