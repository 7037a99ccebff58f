"""``metrics.prom`` for the node_exporter textfile collector (Prometheus text format 0.0.4).

    healthcheck_host_verdict{host="gpu001",verdict="FAIL"} 1.0
    healthcheck_host_findings{host="gpu001",status="PASS"} 112.0
    healthcheck_check_status{check="gpu.count",host="gpu001",status="FAIL"} 1.0
    healthcheck_gpu_temperature_celsius{gpu="3",host="gpu001"} 41.0      # --metrics-detail

A textfile collector serves every series on every scrape, so the default is bounded per host: the
verdict, findings per status, the checks that are not PASS (``check_status``), the GPU count and the
benchmark results: about 8 series for a passing host, 80,000 at 10,000 hosts. The option
``metrics_detail`` (``--metrics-detail``) adds a ``check_status`` series for every check and the
per-GPU, per-link and per-port gauges from the observations (about 180 series per host), read host by
host from the observation store.

Names carry their unit (``_celsius``, ``_bytes_per_second``, ``_total``); values from
observations come from small extractors registered by probe name in ``reports.metrics``.
Families and samples are sorted, so the same run always gives the same file; it passes
``promtool check metrics``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.utils import floatToGoString

import healthcheck.reports.observation_metrics  # noqa: F401  (registers the built-in extractors)
from healthcheck.core.model import Status
from healthcheck.reports import ReporterSpec, register
from healthcheck.reports.bench_views import bench_views
from healthcheck.reports.digest import RunDigest
from healthcheck.reports.metrics import METRICS, Sample, extracted_probes, number, observation_samples


def run_samples(digest: RunDigest, detail: bool = False) -> Iterable[Sample]:
    """Run-level, per-host and per-check samples (no observation needed).

    A host's verdict and a check's status are one sample each, labelled with the status. A check's
    status is its worst over components and the value counts the components in that status (3 GPUs
    with a pending remap give ``{status="FAIL"} 3``); the verdict's value is always 1. Without
    ``detail`` only checks that are not PASS (or SKIP) get a ``check_status`` series.
    """
    run = digest.run
    if isinstance(run.get("duration_s"), int | float):
        yield Sample("healthcheck_run_duration_seconds", {}, float(run["duration_s"]))
    yield Sample("healthcheck_run_info", {"run_id": str(run.get("id", digest.run_dir.name)),
                                          "version": str(run.get("version", "")),
                                          "mode": str(run.get("mode", ""))}, 1.0)
    by_verdict = digest.hosts_by_verdict()
    for status in Status:
        yield Sample("healthcheck_hosts", {"verdict": status.value}, float(len(by_verdict[status])))
    quiet = () if detail else (Status.PASS, Status.SKIP)
    tallies = digest.tallies
    for host in digest.results.hosts.values():
        verdict = digest.verdicts[host.name].value
        t = tallies[host.name]
        yield Sample("healthcheck_host_verdict", {"host": host.name, "verdict": verdict}, 1.0)
        for status, n in (t.counts if host.stored is None else host.counts()).items():
            yield Sample("healthcheck_host_findings", {"host": host.name, "status": status}, float(n))
        for check, (status, n) in t.worst.items():
            if status not in quiet:
                yield Sample("healthcheck_check_status", {"host": host.name, "check": check, "status": status.value},
                             float(n))
        gpus = host.observations.get("gpu")
        if isinstance(gpus, dict) and not detail:  # the key gauge; with detail the gpu extractor gives it
            count_value = number(gpus.get("count"))
            if count_value is not None:
                yield Sample("healthcheck_gpus", {"host": host.name}, count_value)


def bench_samples(digest: RunDigest) -> Iterable[Sample]:
    """Per-node busbw and HPL, pair bandwidth and latency, in base units."""
    views = bench_views(digest)
    for test, peaks in views.peaks.items():
        for host, gbps in peaks.items():
            yield Sample("healthcheck_nccl_busbw_bytes_per_second", {"host": host, "test": test}, gbps * 1e9)
    for host, gflops in views.hpl.items():
        yield Sample("healthcheck_hpl_flops", {"host": host}, gflops * 1e9)
    for p in views.pairs:
        labels = {"host_a": p.a, "host_b": p.b, "benchmark": p.source}
        if p.metric.endswith("_us"):
            yield Sample("healthcheck_pair_latency_seconds", labels, p.value / 1e6)
        elif p.metric.endswith("_gbps"):
            yield Sample("healthcheck_pair_bandwidth_bytes_per_second", labels, p.value * 1e9)


def families(samples: Iterable[Sample]) -> list[Metric]:
    """Sorted metric families from samples; duplicate label sets keep the last value."""
    by_name: dict[str, dict[tuple, float]] = defaultdict(dict)
    for s in samples:
        by_name[s.name][tuple(sorted(s.labels.items()))] = s.value
    out: list[Metric] = []
    for name in sorted(by_name):
        kind, doc = METRICS[name]
        rows = sorted(by_name[name].items())
        keys = sorted({k for labels, _ in rows for k, _ in labels})
        if kind == "counter":
            family: Metric = CounterMetricFamily(name.removesuffix("_total"), doc, labels=keys)
        else:
            family = GaugeMetricFamily(name, doc, labels=keys)
        for labels, value in rows:
            values = dict(labels)
            family.add_metric([values.get(k, "") for k in keys], value)
        out.append(family)
    return out


class _Collector:
    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self.metrics


def _label_value(value: str) -> str:
    if "\\" not in value and "\n" not in value and '"' not in value:  # nearly every value: nothing to escape
        return value
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def exposition(samples: Iterable[Sample]) -> bytes:
    """Text format 0.0.4, byte for byte what ``generate_latest`` writes for ``families(samples)``, written
    directly: prometheus_client's per-sample validation and escaping took most of the time at 10,000 hosts."""
    by_name: dict[str, dict[tuple, float]] = defaultdict(dict)
    for s in samples:
        by_name[s.name][tuple(sorted(s.labels.items()))] = s.value
    out: list[str] = []
    numbers: dict[float, str] = {}  # the same few values (1, 0, counts) recur on every host
    for name in sorted(by_name):
        kind, doc = METRICS[name]
        rows = by_name[name]
        keys = sorted({k for labels in rows for k, _ in labels})
        help_text = doc.replace("\\", "\\\\").replace("\n", "\\n")
        out.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")
        for labels in sorted(rows):
            value = rows[labels]
            number = numbers.get(value) if value else None  # 0.0 == -0.0, printed differently: never cached
            if number is None:
                number = floatToGoString(value)
                if value and value == value:  # NaN: never equal to itself, never found again
                    numbers[value] = number
            if not keys:
                out.append(f"{name} {number}\n")
                continue
            if len(labels) == len(keys):  # every label present: ``labels`` is already in ``keys`` order
                text = ",".join(f'{k}="{_label_value(v)}"' for k, v in labels)
            else:
                values = dict(labels)
                text = ",".join(f'{k}="{_label_value(values.get(k, ""))}"' for k in keys)
            out.append(f"{name}{{{text}}} {number}\n")
    return "".join(out).encode("utf-8")


def render_prometheus(digest: RunDigest) -> bytes:
    detail = bool(digest.options.get("metrics_detail"))
    samples = list(run_samples(digest, detail)) + list(bench_samples(digest))
    if detail:
        for host, observations in digest.iter_observations(extracted_probes()):
            samples.extend(observation_samples(host.name, observations))
    return exposition(samples)


REPORTER = register(ReporterSpec(name="prometheus", filename="metrics.prom", render=render_prometheus))
