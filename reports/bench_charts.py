"""The charts of the report's "Bandwidth vs expectation" section, from the benchmark views.

    bench = bench_context(digest)
    bench["curves"][0]["chart"]      # busbw vs message size, one line per node (identical ones share one)
    bench["heatmaps"][0]["legend"]   # what the colours mean, with the unit and the expectation

Every chart says what it measures and in which unit, draws the expectation with its value, and shows
what FAILed in the report's one FAIL red. Nodes whose curves are identical are one legend entry (a
folded nodeset), so three healthy nodes do not hide as one unnamed line. A pair retested against a
known-good partner stays one cell of the heatmap (marked R, both values in its tooltip) and is listed
as a retest, never as another pair.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from healthcheck.core.model import Status
from healthcheck.reports.bench_views import UNITS, Curve, PairValue, bench_views, busbw_check, pair_check
from healthcheck.reports.charts import Series, bar_chart, heatmap, line_chart, strip_chart
from healthcheck.reports.digest import RunDigest, fold

HEATMAP_MAX_NODES = 96
HPL_BARS_MAX = 60          # slowest nodes drawn
WORST_LISTED = 20


def pair_threshold(views: Any, metric: str) -> float | None:
    """The pass threshold of a pair heatmap's metric (a lower bound: busbw, bandwidth), None for an upper one."""
    check = pair_check(metric)
    band = views.band(check) if check else None
    return band[0] if band else None


def _blamed_by_pairs(digest: RunDigest) -> dict[str, list[str]]:
    """Nodes the pair attribution found bad (``<benchmark>.<test>.pairs.node`` FAIL), per benchmark."""
    out: dict[str, set[str]] = {}
    for check, found in digest.index.by_check.items():
        if check.endswith(".pairs.node"):
            for f in found:
                if f.status is Status.FAIL:
                    out.setdefault(check.split(".", 1)[0], set()).add(f.host)
    return {bench: sorted(hosts) for bench, hosts in out.items()}


def _series(items: Sequence[Curve], low: float | None) -> list[Series]:
    """One line per distinct curve, labelled with the folded nodes that measured it."""
    same: dict[tuple[tuple[float, float], ...], list[Curve]] = defaultdict(list)
    for c in items:
        same[tuple(c.points)].append(c)
    out = []
    for points, curves in same.items():
        names = [c.label for c in curves]
        label = fold(names) + (f" ({len(names)} nodes, identical)" if len(names) > 1 else "")
        out.append(Series(label, points, highlight=low is not None and curves[0].peak_gbps < low))
    return sorted(out, key=lambda s: (not s.highlight, s.label))


def _curves(digest: RunDigest, views: Any) -> list[dict[str, Any]]:
    curves = []
    for test in sorted(set(views.curves) | set(views.peaks)):
        band = views.band(busbw_check(test))
        low = band[0] if band else None
        items = views.curves.get(test, [])
        peaks = views.peaks.get(test, {})
        top = max([*peaks.values(), *(c.peak_gbps for c in items)], default=0.0)
        chart_band = (band[0], band[1] or top) if band else None
        curves.append({"test": test, "hosts": len(peaks), "drawn": len(items),
                       "chart": line_chart(_series(items, low), band=chart_band, x_label="message size (bytes)",
                                           y_label="busbw (GB/s)", unit="GB/s", title=f"{test} busbw vs size"),
                       "distribution": _distribution(peaks, low)})
    return curves


def _heatmap(metric: str, pairs: Sequence[PairValue], views: Any, blamed: list[str]) -> dict[str, Any]:
    first = [p for p in pairs if not p.retest]
    retests = [p for p in pairs if p.retest]
    nodes = sorted({p.a for p in pairs} | {p.b for p in pairs})
    lower_better = metric.endswith("_us")
    unit = UNITS.get(metric.split()[-1], "")
    chart = heatmap(nodes, {(p.a, p.b): p.value for p in first}, unit=unit, low=pair_threshold(views, metric),
                    higher_is_better=not lower_better, status={(p.a, p.b): p.status for p in first},
                    retests={(p.a, p.b): (p.value, p.status) for p in retests}) \
        if len(nodes) <= HEATMAP_MAX_NODES else ""
    worst = sorted(pairs, key=lambda p: p.value, reverse=lower_better)[:WORST_LISTED]
    check = pair_check(metric)
    source, _, name = metric.rpartition(" ")
    return {"metric": metric, "title": f"{source}: {name.rsplit('_', 1)[0]} ({unit})" if unit else metric,
            "unit": unit, "nodes": len(nodes), "pairs": len(first), "retests": len(retests), "chart": chart,
            "worst": worst, "lower_better": lower_better, "expected": views.expected.get(check or "", ""),
            "check": check, "blamed": blamed}


def bench_context(digest: RunDigest) -> dict[str, Any]:
    views = bench_views(digest)
    blamed = _blamed_by_pairs(digest)
    heatmaps = [_heatmap(metric, pairs, views, blamed.get(metric.split()[0], []))
                for metric, pairs in views.pair_metrics().items()]
    hpl_band = views.band("hpl.node.gflops")
    hpl_ref = hpl_band[0] if hpl_band else None
    hpl_bars = sorted(views.hpl.items(), key=lambda kv: kv[1])[:HPL_BARS_MAX]
    return {"empty": views.empty, "curves": _curves(digest, views), "heatmaps": heatmaps, "hpl_nodes": len(views.hpl),
            "hpl": bar_chart(hpl_bars, reference=hpl_ref, unit="GFLOPS", title="HPL GFLOPS per node",
                             bad={h for h, v in hpl_bars if hpl_ref and v < hpl_ref}) if hpl_bars else ""}


def _distribution(peaks: Mapping[str, float], low: float | None) -> dict[str, Any]:
    from healthcheck.core.grading import fleet_outliers

    outliers = set(fleet_outliers(peaks)) | {h for h, v in peaks.items() if low is not None and v < low}
    return {"chart": strip_chart(peaks, outliers=outliers, unit="peak busbw (GB/s)", reference=low),
            "outliers": fold(outliers), "count": len(outliers)}
