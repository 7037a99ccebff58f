"""Benchmark views for the reports: busbw curves, pair values, HPL per node, expectation bands.

    views = bench_views(digest)
    views.curves["all_reduce_perf"]     # [Curve("gpu001", ..., ((8, 0.1), ..., (8 << 30, 476.5)))]
    views.peaks["all_reduce_perf"]      # {"gpu001": 476.5, ...} every node job, for the distribution
    views.pairs                         # [PairValue("gpu001", "gpu002", "busbw_gbps", 48.1, "nccl ...", "PASS")]
    views.hpl                           # {"gpu001": 51230.0}

Input: the job summaries the benchmark stage stores in each host's observations
(``observations["benchmarks"][<benchmark>] = [{"job_id", "test", "shape", "hosts", "rail",
"metric", "status", "result"}]``, see ``benchmarks/grade.py``); a job shared by two hosts is
counted once. ``metric`` is the tool's headline number (nccl busbw GB/s, HPL GFLOPS, IMB PingPong
GB/s). Curves and IMB latency need the parsed rows: taken from ``result`` when the run kept it,
otherwise parsed again from ``raw/_jobs/<job_id>.out`` with the benchmark's own parser, and only
for the jobs drawn (the worst ``MAX_CURVES``) so 10,000 nodes stay cheap.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from healthcheck.reports.digest import RunDigest, expected_band

MAX_CURVES = 40
PAIR_SHAPES = ("pair", "rail")


@dataclass(frozen=True)
class Job:
    job_id: str
    benchmark: str
    test: str
    shape: str
    hosts: tuple[str, ...]
    metric: float | None
    status: str = ""
    rail: str | None = None
    series: Mapping[str, Any] = field(default_factory=dict)  # what the job record keeps for the charts
    retest_of: str | None = None


@dataclass(frozen=True)
class Curve:
    label: str
    test: str
    points: tuple[tuple[float, float], ...]
    peak_gbps: float


@dataclass(frozen=True)
class PairValue:
    """One pair job's value of one metric; ``status`` the job's own grade (before attribution), ``retest``
    whether the job retested a suspect against a known-good partner."""

    a: str
    b: str
    metric: str
    value: float
    source: str
    status: str = ""
    retest: bool = False


@dataclass
class BenchViews:
    curves: dict[str, list[Curve]] = field(default_factory=dict)
    peaks: dict[str, dict[str, float]] = field(default_factory=dict)
    pairs: list[PairValue] = field(default_factory=list)
    hpl: dict[str, float] = field(default_factory=dict)
    bands: dict[str, tuple[float, float | None]] = field(default_factory=dict)  # check id -> band
    expected: dict[str, str] = field(default_factory=dict)  # check id -> the expectation as findings state it

    @property
    def empty(self) -> bool:
        return not (self.curves or self.peaks or self.pairs or self.hpl)

    def pair_metrics(self) -> dict[str, list[PairValue]]:
        out: dict[str, list[PairValue]] = defaultdict(list)
        for p in self.pairs:
            out[f"{p.source} {p.metric}"].append(p)
        return dict(sorted(out.items()))

    def band(self, check: str) -> tuple[float, float | None] | None:
        return self.bands.get(check)


# The check a pair metric is graded under, by (benchmark, metric): benchmarks/nccl.py, imb.py, osu.py.
_PAIR_CHECKS = {("nccl", "busbw_gbps"): "nccl.{coll}.{shape}.busbw",
                ("imb", "bandwidth_gbps"): "imb.pingpong.bandwidth", ("imb", "latency_us"): "imb.pingpong.latency",
                ("osu", "latency_us"): "osu.latency.latency", ("osu", "bandwidth_gbps"): "osu.bw.bandwidth"}
UNITS = {"busbw_gbps": "GB/s", "bandwidth_gbps": "GB/s", "latency_us": "µs", "gflops": "GFLOPS"}


def pair_check(metric_key: str) -> str | None:
    """The check id behind a ``pair_metrics`` key (``"nccl all_reduce_perf busbw_gbps"``,
    ``"imb IMB-MPI1 latency_us"``, ``"nccl all_reduce_perf rail mlx5_0 busbw_gbps"``), None when unknown."""
    parts = metric_key.split()
    if len(parts) < 3:
        return None
    template = _PAIR_CHECKS.get((parts[0], parts[-1]))
    coll = re.sub(r"_perf(_mpi)?$", "", parts[1])
    return template.format(coll=coll, shape="rail" if "rail" in parts[2:-1] else "pair") if template else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def jobs(digest: RunDigest) -> list[Job]:
    """Every benchmark job of the run, once, from the hosts' ``benchmarks`` observations."""
    seen: dict[str, Job] = {}
    for host in digest.results.hosts.values():
        by_bench = host.observations.get("benchmarks")
        for bench, summaries in (by_bench.items() if isinstance(by_bench, Mapping) else ()):
            for s in summaries if isinstance(summaries, list) else ():
                if isinstance(s, Mapping) and s.get("job_id") and s["job_id"] not in seen:
                    seen[s["job_id"]] = Job(
                        job_id=str(s["job_id"]), benchmark=str(bench), test=str(s.get("test") or bench),
                        shape=str(s.get("shape") or ""), hosts=tuple(str(h) for h in s.get("hosts") or ()),
                        metric=_number(s.get("metric")), status=str(s.get("status") or ""),
                        rail=s.get("rail"),
                        series=s["series"] if isinstance(s.get("series"), Mapping) else {},
                        retest_of=s.get("retest_of") if isinstance(s.get("retest_of"), str) else None)
    return list(seen.values())


def _points(raw: Any) -> tuple[tuple[float, float], ...]:
    """(size_bytes, busbw_gbps) pairs of a job record's ``busbw`` series; anything malformed is left out."""
    pairs = [(_number(p[0]), _number(p[1])) for p in raw if isinstance(p, list | tuple) and len(p) == 2] \
        if isinstance(raw, list) else []
    return tuple(sorted((x, y) for x, y in pairs if x is not None and y is not None))


def busbw_check(test: str, shape: str = "node") -> str:
    """The check id benchmarks/nccl.py grades busbw under: ``nccl.all_reduce.node.busbw``."""
    return f"nccl.{re.sub(r'_perf(_mpi)?$', '', test)}.{shape}.busbw"


def _pair_metric(job: Job) -> str:
    if job.benchmark == "osu" and "latency" in job.test:
        return "latency_us"
    return {"nccl": "busbw_gbps", "imb": "bandwidth_gbps", "hpl": "gflops"}.get(job.benchmark, "bandwidth_gbps")


def _curves(digest: RunDigest, views: BenchViews, node_jobs: Iterable[Job]) -> None:
    by_test: dict[str, list[Job]] = defaultdict(list)
    for job in node_jobs:
        by_test[job.test].append(job)
        if job.metric is not None:
            views.peaks.setdefault(job.test, {})[job.hosts[0]] = job.metric
    for test, items in by_test.items():
        drawn = sorted(items, key=lambda j: (j.metric is None, j.metric or 0.0))[:MAX_CURVES]
        for job in drawn:
            points = _points(job.series.get("busbw"))
            if len(points) >= 2:
                views.curves.setdefault(test, []).append(
                    Curve(job.hosts[0], test, points, job.metric or max(y for _, y in points)))


def bench_views(digest: RunDigest) -> BenchViews:
    """Benchmark views of a run (empty when no benchmark ran), computed once per digest."""
    return digest.memo("bench_views", lambda: _bench_views(digest))


def _bench_views(digest: RunDigest) -> BenchViews:
    views = BenchViews()
    all_jobs = [j for j in jobs(digest) if j.hosts]
    _curves(digest, views, (j for j in all_jobs if j.benchmark == "nccl" and j.shape == "node"))
    for job in all_jobs:
        if job.benchmark == "hpl" and job.shape == "node" and job.metric is not None:
            views.hpl[job.hosts[0]] = job.metric
        if job.shape in PAIR_SHAPES and len(job.hosts) == 2:
            source = f"{job.benchmark} {job.test}" + (f" rail {job.rail}" if job.rail else "")
            retest = job.retest_of is not None
            if job.metric is not None:
                views.pairs.append(PairValue(*job.hosts, _pair_metric(job), job.metric, source, job.status, retest))
            if (lat := _number(job.series.get("latency_us"))) is not None:
                views.pairs.append(PairValue(*job.hosts, "latency_us", lat, source, job.status, retest))
    for check, found in digest.index.by_check.items():
        if check.split(".", 1)[0] in ("nccl", "hpl", "imb", "osu"):  # the first finding with a band, per check
            band = next((b for f in found if f.expected is not None and (b := expected_band(f.expected))), None)
            if band is not None:
                views.bands[check] = band
            stated = next((f.expected for f in found if isinstance(f.expected, str) and f.expected), None)
            if stated is not None:
                views.expected[check] = stated
    return views
