"""Pure history analysis: key measurements, regressions vs baseline and fleet, counter growth, changes.

    measurements = extract_measurements(results)          # from results.json findings + observations
    findings = regression_findings(measurements, baselines, drop_fraction=0.10)
    findings += growth_findings(measurements, previous_values)
    changes = diff_verdicts(previous_states, host_states(results), previous_run="20261121T031500Z")

The key measurements, keyed by (metric id, component), e.g. ``("gpu.temp_c", "gpu3")``:

- bus bandwidth: the value of ``nccl.<collective>.<shape>.busbw`` findings (GB/s; a drop is bad);
- HPL: the value of ``hpl.*`` findings in GFLOPS (a drop is bad);
- temperatures: ``gpu.temp_c`` and ``gpu.memory_temp_c`` per GPU from the gpu probe's
  observations (a rise is bad; findings fold passing GPUs, observations keep every one);
- error counters: per GPU from the gpu probe's observations, aggregate ECC (SRAM/DRAM,
  correctable/uncorrectable), retired pages (SBE/DBE), remapped rows and PCIe replays. Their
  growth since the node's previous run is reported, not the running total. InfiniBand and
  NVLink counters are left to their probes, which grade growth themselves (``ib.counter_growth.*``,
  ``nvlink.errors.*.growth``) from the previous run the sweep passes them.

No I/O here: ``healthcheck.ops.history`` stores and retrieves the numbers.

Check ids produced (all WARN, category ``history``, source ``history``):
  ``history.regression.baseline``  a key metric worse than this node's own baseline (median of its
                                   last K passing runs) by more than the drop fraction
  ``history.regression.fleet``     a performance metric (busbw, GFLOPS) below the fleet median of the
                                   same metric in this run by more than the drop fraction
  ``history.counter.growth``       an error counter grew since the node's previous run
"""

from __future__ import annotations

import fnmatch
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from healthcheck.core.model import Finding, Status
from healthcheck.store.results import RunResults

FAILING = (Status.FAIL, Status.ERROR)
SOURCE = "history"


@dataclass(frozen=True)
class MetricRule:
    """Key measurements taken from finding values. ``direction``: ``higher`` or ``lower`` is better."""

    name: str
    checks: tuple[str, ...]
    direction: str
    units: tuple[str, ...] = ()

    def matches(self, check: str, unit: str | None) -> bool:
        if self.units and (unit or "").strip().lower() not in {u.lower() for u in self.units}:
            return False
        return any(fnmatch.fnmatchcase(check, g) for g in self.checks)


@dataclass(frozen=True)
class ObservedField:
    """Key measurements taken from a probe's observations: ``probe``'s list ``items``, one per
    component named ``component`` (formatted with the item), the dotted ``path`` in each item."""

    name: str
    metric_id: str
    direction: str              # higher, lower, or counter
    unit: str
    path: str
    probe: str = "gpu"
    items: str = "gpus"
    component: str = "gpu{index}"


FINDING_METRICS: tuple[MetricRule, ...] = (
    MetricRule("busbw", ("nccl.*.busbw",), "higher", ("GB/s",)),
    # hpl.node.gflops / hpl.<shape>.gflops_per_node; not hpl.node.fleet (the same number again)
    MetricRule("hpl", ("hpl.*.gflops", "hpl.*.gflops_per_node"), "higher", ("GFLOPS", "GFLOP/s", "Gflops", "GFlop/s")),
)

# Markers ``benchmarks.attribution.apply_blame`` appends to a finding re-stated for a partner node:
# the measured value is the other node's (or the link's), not a key measurement of this node.
NOT_THIS_NODE = ("[attributed to ", "[inconclusive for ", "[not graded for ")

_ECC = [(f"ecc_aggregate.{mem}_{kind}", f"gpu.ecc.aggregate.{mem}_{kind}")
        for mem in ("sram", "dram") for kind in ("correctable", "uncorrectable")]
OBSERVED_METRICS: tuple[ObservedField, ...] = (
    ObservedField("temperature", "gpu.temp_c", "lower", "C", "temp_c"),
    ObservedField("temperature", "gpu.memory_temp_c", "lower", "C", "memory_temp_c"),
    *(ObservedField("errors", metric_id, "counter", "count", path) for path, metric_id in _ECC),
    ObservedField("errors", "gpu.retired_pages.sbe", "counter", "pages", "retired_sbe"),
    ObservedField("errors", "gpu.retired_pages.dbe", "counter", "pages", "retired_dbe"),
    ObservedField("errors", "gpu.row_remap.correctable", "counter", "rows", "remap.correctable"),
    ObservedField("errors", "gpu.row_remap.uncorrectable", "counter", "rows", "remap.uncorrectable"),
    ObservedField("errors", "gpu.pcie.replays", "counter", "count", "pcie_replays"),
)
# Counters whose growth the probe grades itself against the previous run, with a profile threshold
# (gpu.pcie.replays.growth): recorded for trends, but no second history.counter.growth finding.
PROBE_GRADED_GROWTH = frozenset({"gpu.pcie.replays"})


@dataclass(frozen=True)
class Measurement:
    host: str
    metric: str          # family: busbw, hpl, temperature, errors
    direction: str
    check: str           # metric id: the finding's check id, or an ObservedField.metric_id
    component: str
    value: float
    unit: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.check, self.component)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def extract_measurements(results: RunResults, rules: Sequence[MetricRule] = FINDING_METRICS,
                         fields: Sequence[ObservedField] = OBSERVED_METRICS) -> list[Measurement]:
    """Every key measurement of the run: numeric finding values matching ``rules``, then the
    observed ``fields``. A finding whose value is text (a folded range like ``"30-45"``) is skipped,
    and so is one the pair attribution re-stated for a partner (``NOT_THIS_NODE``)."""
    out = []
    for host in sorted(results.hosts):
        hr = results.hosts[host]
        for f in hr.findings:
            value = _number(f.value)
            if any(mark in f.message for mark in NOT_THIS_NODE):
                continue  # a pair/cluster number the attribution pinned on another node or a link
            rule = next((r for r in rules if r.matches(f.check, f.unit)), None) if value is not None else None
            if rule is not None and value is not None:
                out.append(Measurement(host, rule.name, rule.direction, f.check, f.component or "node",
                                       value, f.unit))
        out.extend(_observed(host, hr.observations, fields))
    return out


def _observed(host: str, observations: Mapping[str, Any],
              fields: Sequence[ObservedField]) -> list[Measurement]:
    out = []
    for spec in fields:
        items = (observations.get(spec.probe) or {}) if isinstance(observations, Mapping) else {}
        for item in (items.get(spec.items) or []) if isinstance(items, Mapping) else []:
            value: Any = item
            for part in spec.path.split("."):
                value = value.get(part) if isinstance(value, Mapping) else None
            number = _number(value)
            if number is not None and isinstance(item, Mapping):
                try:
                    component = spec.component.format(**item)
                except (KeyError, IndexError, ValueError):
                    continue
                out.append(Measurement(host, spec.name, spec.direction, spec.metric_id, component, number,
                                       spec.unit))
    return out


def worse_by(direction: str, value: float, reference: float) -> float:
    """How much worse ``value`` is than ``reference``, as a fraction (0 when not worse)."""
    if reference == 0:
        return 0.0
    change = reference - value if direction == "higher" else value - reference
    return max(0.0, change / abs(reference))


def _bound(direction: str, reference: float, fraction: float) -> str:
    if direction == "higher":
        return f">= {reference * (1 - fraction):.4g}"
    return f"<= {reference * (1 + fraction):.4g}"


def _where(m: Measurement) -> str:
    return m.check if m.component in ("", "node") else f"{m.check} {m.component}"


def regression_findings(measurements: Iterable[Measurement],
                        baselines: Mapping[tuple[str, str, str], tuple[float, int]],
                        drop_fraction: float, *, fleet_min_hosts: int = 3) -> list[Finding]:
    """WARN findings for measurements worse than the node's baseline or the fleet by > ``drop_fraction``.

    ``baselines`` maps (host, check, component) to (median, number of runs it was taken over).
    Counters are not compared here (see ``growth_findings``).
    """
    ms = [m for m in measurements if m.direction in ("higher", "lower")]
    by_key: dict[tuple[str, str], dict[str, float]] = {}
    for m in ms:
        by_key.setdefault(m.key, {})[m.host] = m.value
    out = []
    for m in ms:
        base = baselines.get((m.host, *m.key))
        if base and (drop := worse_by(m.direction, m.value, base[0])) > drop_fraction:
            out.append(_regression(m, "history.regression.baseline", base[0], drop, drop_fraction,
                                   f"this node's baseline {base[0]:g}{_u(m)} (median of its last "
                                   f"{base[1]} passing runs)", _BASELINE_REMEDY))
        peers = by_key[m.key]
        # Fleet comparison only for performance: temperatures depend on rack position and airflow.
        if m.direction == "higher" and len(peers) >= fleet_min_hosts:
            median = statistics.median(peers.values())
            if (drop := worse_by(m.direction, m.value, median)) > drop_fraction:
                out.append(_regression(m, "history.regression.fleet", median, drop, drop_fraction,
                                       f"the fleet median {median:g}{_u(m)} ({len(peers)} hosts in this run)",
                                       _FLEET_REMEDY))
    return out


_BASELINE_REMEDY = ("Compare with the node's trend; rerun the benchmark; if it persists, inspect the node "
                    "(clocks, thermals, links) before it fails outright")
_FLEET_REMEDY = ("Compare this node with its peers (same profile); look for a slow link, a throttled GPU "
                 "or a different firmware")


def _u(m: Measurement) -> str:
    return f" {m.unit}" if m.unit else ""


def _regression(m: Measurement, check: str, reference: float, drop: float, fraction: float,
                against: str, remedy: str) -> Finding:
    return Finding(host=m.host, check=check, component=m.component, status=Status.WARN, value=m.value,
                   expected=f"{_bound(m.direction, reference, fraction)}{_u(m)}", unit=m.unit,
                   message=f"{_where(m)}: {m.value:g}{_u(m)} is {drop:.0%} worse than {against}",
                   remedy=remedy, source=SOURCE)


def growth_findings(measurements: Iterable[Measurement],
                    previous: Mapping[tuple[str, str, str], tuple[float, str]]) -> list[Finding]:
    """WARN for each error counter that grew since the node's previous run, reporting the growth."""
    out = []
    for m in measurements:
        if m.direction != "counter" or m.check in PROBE_GRADED_GROWTH:
            continue
        before, previous_run = previous.get((m.host, *m.key), (None, ""))
        if before is None or m.value <= before:
            continue  # no earlier value, no growth, or a reset (reboot, driver reload)
        grown = m.value - before
        out.append(Finding(
            host=m.host, check="history.counter.growth", component=m.component, status=Status.WARN,
            value=grown, expected=f"no growth since run {previous_run}", unit=m.unit or "count",
            message=(f"{_where(m)} grew by {grown:g} since run {previous_run} "
                     f"(was {before:g}, now {m.value:g})"),
            remedy="A counter still growing means an active fault: read the component's other findings "
                   "and the kernel log (Xid); if it keeps growing, schedule the part for repair",
            source=SOURCE))
    return out


@dataclass(frozen=True)
class HostState:
    """A host's verdict in one run and its failing (FAIL/ERROR) check ids."""

    verdict: Status
    failing: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        return self.verdict in FAILING


def host_states(results: RunResults) -> dict[str, HostState]:
    return {name: HostState(h.verdict, tuple(sorted({f.check for f in h.findings
                                                    if f.status in FAILING and not f.observe})))
            for name, h in results.hosts.items()}


def diff_verdicts(previous: Mapping[str, HostState] | None, current: Mapping[str, HostState],
                  previous_run: str | None = None,
                  streaks: Mapping[str, int] | None = None) -> dict[str, object]:
    """"What changed since the last run": the ``changes`` object of results.json.

    ``streaks`` maps a still-failing host to how many consecutive runs (this one included) it failed.
    """
    previous = previous or {}
    streaks = streaks or {}
    new, recovered, still = [], [], []
    for host in sorted(current):
        now, was = current[host], previous.get(host)
        if now.failed and (was is None or not was.failed):
            new.append({"host": host, "verdict": now.verdict.value,
                        "was": was.verdict.value if was else None, "checks": list(now.failing)})
        elif was is not None and was.failed and not now.failed:
            recovered.append({"host": host, "verdict": now.verdict.value, "was": was.verdict.value,
                              "checks": list(was.failing)})
        elif was is not None and was.failed and now.failed:
            still.append({"host": host, "verdict": now.verdict.value, "was": was.verdict.value,
                          "checks": list(now.failing),
                          "new_checks": sorted(set(now.failing) - set(was.failing)),
                          "runs": streaks.get(host, 2)})
    return {"previous_run": previous_run, "new_failures": new, "recovered": recovered,
            "still_failing": still,
            "new_hosts": sorted(set(current) - set(previous)) if previous_run else [],
            "missing_hosts": sorted(set(previous) - set(current))}


_AGGREGATE = {"higher": min, "lower": max, "counter": sum}


def trend_points(measurements: Iterable[Measurement]) -> dict[str, dict[str, tuple[float, str | None, str]]]:
    """One number per host and check for trend lines: the worst component (lowest busbw, hottest
    GPU) or, for counters, the total over components. host -> check -> (value, unit, metric)."""
    groups: dict[tuple[str, str], list[Measurement]] = {}
    for m in measurements:
        groups.setdefault((m.host, m.check), []).append(m)
    out: dict[str, dict[str, tuple[float, str | None, str]]] = {}
    for (host, check), ms in sorted(groups.items()):
        value = _AGGREGATE[ms[0].direction](m.value for m in ms)
        out.setdefault(host, {})[check] = (float(value), ms[0].unit, ms[0].metric)
    return out
