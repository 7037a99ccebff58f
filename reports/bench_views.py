"""Benchmark views for the HTML report: busbw curves, pair heatmaps, HPL per node, IMB per pair.

    views = bench_views(digest)
    views.curves        # {"all_reduce_perf": [Curve(host, [(size_bytes, busbw_gbps), ...])]}
    views.pairs         # [PairValue("gpu001", "gpu002", "busbw_gbps", 48.1, "nccl")]
    views.hpl           # {"gpu001": 51230.0}

Benchmark observations are read by field name wherever they sit (per-host observations of the
``nccl``/``hpl``/``imb``/``osu`` probes, or a top-level ``benchmarks`` key), so these views follow
the parsers' dataclasses without importing them. Unknown shapes simply give empty views.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from reports.digest import RunDigest, expected_band

SIZE_KEYS = ("size_bytes", "msg_size_bytes", "bytes", "size")
BUSBW_KEYS = ("busbw_gbps", "oop_busbw_gbps", "ip_busbw_gbps")  # a row's busbw: the best of these
PAIR_KEYS = (("host_a", "host_b"), ("a", "b"), ("src", "dst"), ("node_a", "node_b"), ("left", "right"))
PAIR_VALUE_KEYS = ("busbw_gbps", "avg_busbw_gbps", "bandwidth_gbps", "bw_gbps", "min_bandwidth_gbps",
                   "mbytes_per_s", "latency_us", "t_avg_us", "max_latency_us")
HPL_KEYS = ("gflops", "gflops_total", "rmax_gflops", "gflops_per_node")
TEST_KEYS = ("test", "collective", "binary", "name", "benchmark")
BENCH_PROBES = ("nccl", "hpl", "imb", "osu", "bench")


@dataclass(frozen=True)
class Curve:
    host: str
    test: str
    points: tuple[tuple[float, float], ...]

    @property
    def peak_gbps(self) -> float:
        return max(y for _, y in self.points)


@dataclass(frozen=True)
class PairValue:
    a: str
    b: str
    metric: str
    value: float
    source: str
    size_bytes: float | None = None


@dataclass
class BenchViews:
    curves: dict[str, list[Curve]] = field(default_factory=dict)
    pairs: list[PairValue] = field(default_factory=list)
    hpl: dict[str, float] = field(default_factory=dict)
    bands: dict[str, tuple[float, float | None]] = field(default_factory=dict)  # probe -> (low, high)

    @property
    def empty(self) -> bool:
        return not (self.curves or self.pairs or self.hpl)

    def pair_metrics(self) -> dict[str, list[PairValue]]:
        out: dict[str, list[PairValue]] = defaultdict(list)
        for p in self.pairs:
            out[f"{p.source} {p.metric}"].append(p)
        return dict(sorted(out.items()))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _first(rec: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[str, float] | None:
    for key in keys:
        value = _number(rec.get(key))
        if value is not None:
            return key, value
    return None


def busbw(rec: Mapping[str, Any]) -> float | None:
    """A nccl-tests row's bus bandwidth: the best of out-of-place and in-place."""
    values = [v for k in BUSBW_KEYS if (v := _number(rec.get(k))) is not None]
    return max(values) if values else None


def walk(obs: Any, context: Mapping[str, Any] | None = None, depth: int = 0
         ) -> Iterator[tuple[Mapping[str, Any], list[Mapping[str, Any]]]]:
    """Every list of records inside ``obs`` with the mapping that holds it (depth-limited)."""
    if depth > 4:
        return
    if isinstance(obs, Mapping):
        for value in obs.values():
            yield from walk(value, obs, depth + 1)
    elif isinstance(obs, list):
        records = [r for r in obs if isinstance(r, Mapping)]
        if records:
            yield (context or {}), records
            for rec in records:
                yield from walk(rec, rec, depth + 1)


def _test_name(context: Mapping[str, Any], probe: str) -> str:
    return next((str(context[k]) for k in TEST_KEYS if isinstance(context.get(k), str)), probe)


def _pair(rec: Mapping[str, Any]) -> tuple[str, str] | None:
    for ka, kb in PAIR_KEYS:
        if isinstance(rec.get(ka), str) and isinstance(rec.get(kb), str):
            return rec[ka], rec[kb]
    for key in ("pair", "hosts", "nodes"):
        value = rec.get(key)
        if isinstance(value, list | tuple) and len(value) == 2 and all(isinstance(v, str) for v in value):
            return value[0], value[1]
    return None


def _collect(views: BenchViews, host: str | None, probe: str, obs: Any, seen: set) -> None:
    for context, records in walk(obs):
        curve = [(s[1], b) for r in records
                 if (s := _first(r, SIZE_KEYS)) and (b := busbw(r)) is not None]
        if len(curve) >= 2 and host is not None and not any(_pair(r) for r in records):
            test = _test_name(context, probe)
            key = (host, test, tuple(curve))
            if key not in seen:
                seen.add(key)
                views.curves.setdefault(test, []).append(Curve(host, test, tuple(sorted(curve))))
            continue
        for rec in records:
            pair, value = _pair(rec), _first(rec, PAIR_VALUE_KEYS)
            if pair and value:
                size = _first(rec, SIZE_KEYS)
                key = (frozenset(pair), value[0], size and size[1], probe)
                if key not in seen:
                    seen.add(key)
                    views.pairs.append(PairValue(pair[0], pair[1], value[0], value[1], probe,
                                                 size[1] if size else None))
    if host is not None and probe.startswith("hpl"):
        values = [v[1] for _, recs in walk({"r": [obs]}) for r in recs if (v := _first(r, HPL_KEYS))]
        if values:
            views.hpl[host] = max(values)


def _jobs(views: BenchViews, jobs: list, seen: set) -> None:
    """Top-level ``benchmarks`` job records: one host -> per-node views, two hosts -> a pair."""
    for job in jobs:
        if not isinstance(job, Mapping):
            continue
        hosts = [h for h in job.get("hosts") or [] if isinstance(h, str)]
        name = str(job.get("benchmark") or job.get("test") or "bench")
        result = job.get("result", job)
        if len(hosts) == 1:
            _collect(views, hosts[0], name, result, seen)
        elif len(hosts) == 2 and (value := _number(job.get("metric"))) is not None:
            views.pairs.append(PairValue(hosts[0], hosts[1], str(job.get("unit") or "metric"), value, name))
        elif len(hosts) == 2:
            _collect(views, None, name, {"pairs": [{**result, "pair": hosts}]}, seen)


def bench_views(digest: RunDigest) -> BenchViews:
    """Benchmark views of a run (empty when no benchmark ran)."""
    views = BenchViews()
    seen: set = set()
    for host in digest.results.hosts.values():
        for probe, obs in host.observations.items():
            if probe.startswith(BENCH_PROBES):
                _collect(views, host.name, probe, obs, seen)
    extra = digest.document.get("benchmarks")
    if isinstance(extra, list):
        _jobs(views, extra, seen)
    elif isinstance(extra, Mapping):
        for probe, obs in extra.items():
            _collect(views, None, str(probe), obs, seen)
    for f in digest.results.findings():
        if f.category.startswith(BENCH_PROBES) and ("busbw" in f.check or "gflops" in f.check):
            band = expected_band(f.expected)
            if band is not None:
                views.bands.setdefault(f.category + (".gflops" if "gflops" in f.check else ""), band)
    return views
