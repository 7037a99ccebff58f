"""Inline SVG charts for the HTML report; every label is escaped, nothing is fetched.

    line_chart([Series("gpu001", [(8, 0.1), (1 << 30, 480.0)])], band=(288.0, 480.0),
               x_log=True, x_label="message size (bytes)", y_label="busbw (GB/s)")
    heatmap(["n1", "n2"], {("n1", "n2"): 48.1}, unit="GB/s")
    bar_chart([("gpu001", 51230.0)], reference=52000.0, unit="GFLOPS")
    strip_chart({"gpu001": 470.0, "gpu002": 301.0}, outliers={"gpu002"}, unit="GB/s")

Charts return ``markupsafe.Markup`` so the template inserts them as they are; text inside goes
through ``escape`` here. Layouts are plain arithmetic on a fixed viewBox. What failed is drawn with the
class ``fail`` (the page's one FAIL red, ``--fail`` in report.css, as the badges and table marks), never
with a colour of its own; the palette of other lines has no red in it. Every chart states its units
and draws its threshold with a label.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

W, H = 640, 260          # viewBox of line, bar and strip charts
PAD_L, PAD_R, PAD_T, PAD_B = 56, 12, 10, 40
PALETTE = ("#2563eb", "#0891b2", "#7c3aed", "#0f766e", "#a16207", "#1e40af", "#6d28d9", "#475569")  # no red
LEGEND_ROW = 14


@dataclass(frozen=True)
class Series:
    label: str
    points: Sequence[tuple[float, float]]
    highlight: bool = False


def _fmt(v: float, size: bool = False) -> str:
    """Short label: ``1K``, ``128M``, ``8G`` for byte sizes; ``0.25``, ``480``, ``390,625`` otherwise."""
    if size:
        for div, suffix in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
            if abs(v) >= div:
                return f"{v / div:.3g}{suffix}"
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"


def _scale(lo: float, hi: float, a: float, b: float, log: bool = False):
    if log:
        lo, hi = math.log2(max(lo, 1e-12)), math.log2(max(hi, 1e-12))
    span = (hi - lo) or 1.0

    def f(v: float) -> float:
        v = math.log2(max(v, 1e-12)) if log else v
        return a + (v - lo) / span * (b - a)
    return f


def _svg(body: list[str], title: str, width: int = W, height: int = H, fixed: bool = False) -> Markup:
    """The SVG element; ``fixed`` charts keep their natural pixel size instead of the page width."""
    size = f' width="{width}" height="{height}"' if fixed else ""
    head = (f'<svg class="chart{" fixed" if fixed else ""}" viewBox="0 0 {width} {height}"{size} role="img" '
            f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>')
    return Markup(head + "".join(body) + "</svg>")


def _axes(x_label: str, y_label: str, y_ticks: list[tuple[float, str]]) -> list[str]:
    out = [f'<line x1="{PAD_L}" y1="{H - PAD_B}" x2="{W - PAD_R}" y2="{H - PAD_B}" class="axis"/>',
           f'<line x1="{PAD_L}" y1="{PAD_T}" x2="{PAD_L}" y2="{H - PAD_B}" class="axis"/>',
           f'<text x="{(PAD_L + W - PAD_R) / 2}" y="{H - 4}" class="lbl" text-anchor="middle">'
           f'{escape(x_label)}</text>',
           f'<text x="12" y="{(PAD_T + H - PAD_B) / 2}" class="lbl" text-anchor="middle" '
           f'transform="rotate(-90 12 {(PAD_T + H - PAD_B) / 2})">{escape(y_label)}</text>']
    for y, text in y_ticks:
        out.append(f'<line x1="{PAD_L}" y1="{y:.1f}" x2="{W - PAD_R}" y2="{y:.1f}" class="grid"/>'
                   f'<text x="{PAD_L - 4}" y="{y + 3:.1f}" class="tick" text-anchor="end">'
                   f'{escape(text)}</text>')
    return out


def _y_ticks(lo: float, hi: float, sy, n: int = 4) -> list[tuple[float, str]]:
    return [(sy(lo + (hi - lo) * i / n), _fmt(lo + (hi - lo) * i / n)) for i in range(n + 1)]


def line_chart(series: Sequence[Series], *, band: tuple[float, float] | None = None, x_log: bool = True,
               x_label: str = "", y_label: str = "", title: str = "", max_series: int = 40,
               unit: str = "") -> Markup:
    """Lines of (x, y) points with an optional expectation band (pass threshold, nominal), its two bounds
    labelled in ``unit``, and a legend naming every line (a highlighted one FAILs, in the FAIL red)."""
    series = [s for s in series if s.points][:max_series]
    xs = [x for s in series for x, _ in s.points]
    ys = [y for s in series for _, y in s.points] + (list(band) if band else [])
    if not xs:
        return Markup("")
    y_hi = max(ys) * 1.05 or 1.0
    sx = _scale(min(xs), max(xs), PAD_L, W - PAD_R, log=x_log and min(xs) > 0)
    sy = _scale(0.0, y_hi, H - PAD_B, PAD_T)
    body = _axes(x_label, y_label, _y_ticks(0.0, y_hi, sy))
    for x in sorted(set(xs))[:: max(1, len(set(xs)) // 8)]:
        body.append(f'<text x="{sx(x):.1f}" y="{H - PAD_B + 14}" class="tick" text-anchor="middle">'
                    f'{escape(_fmt(x, size=x_log))}</text>')
    if band:
        body += _band(band, sy, unit)
    for i, s in enumerate(series):
        pts = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in sorted(s.points))
        look = 'class="fail" stroke-width="2.2"' if s.highlight else \
            f'stroke="{PALETTE[i % len(PALETTE)]}" stroke-width="1.6"'
        body.append(f'<polyline points="{pts}" fill="none" {look}><title>{escape(s.label)}</title></polyline>')
    legend = _legend(series)
    return _svg(body + legend, title or y_label, W, H + LEGEND_ROW * (len(legend) // 2) + 8)


def _band(band: tuple[float, float], sy, unit: str) -> list[str]:  # type: ignore[no-untyped-def]
    """The expected band shaded, its pass threshold dashed, both bounds labelled with the unit."""
    low, high = min(band), max(band)
    top, bottom = sy(high), sy(low)
    suffix = f" {unit}" if unit else ""
    return [f'<rect x="{PAD_L}" y="{top:.1f}" width="{W - PAD_L - PAD_R}" height="{max(bottom - top, 1):.1f}" '
            f'class="band"><title>expected {escape(_fmt(low))}–{escape(_fmt(high))}{escape(suffix)}</title></rect>',
            f'<line x1="{PAD_L}" y1="{bottom:.1f}" x2="{W - PAD_R}" y2="{bottom:.1f}" class="ref"/>',
            f'<text x="{W - PAD_R - 4}" y="{bottom - 3:.1f}" class="tick ref-label" text-anchor="end">pass &#8805; '
            f'{escape(_fmt(low))}{escape(suffix)}</text>',
            f'<text x="{W - PAD_R - 4}" y="{top - 3:.1f}" class="tick ref-label" text-anchor="end">expected '
            f'{escape(_fmt(high))}{escape(suffix)}</text>']


def _legend(series: Sequence[Series]) -> list[str]:
    """One row per line under the plot: its colour (the FAIL red for a highlighted one) and its label."""
    out = []
    for i, s in enumerate(series):
        y = H + LEGEND_ROW * i + 12
        look = 'class="fail"' if s.highlight else f'stroke="{PALETTE[i % len(PALETTE)]}"'
        label = f"{s.label}: below the pass threshold" if s.highlight else s.label
        out.append(f'<line x1="{PAD_L}" y1="{y - 4}" x2="{PAD_L + 22}" y2="{y - 4}" {look} stroke-width="3"/>')
        out.append(f'<text x="{PAD_L + 28}" y="{y}" class="lbl legend{" fail-text" if s.highlight else ""}">'
                   f'{escape(label)}</text>')
    return out


def bar_chart(bars: Sequence[tuple[str, float]], *, reference: float | None = None, unit: str = "",
              title: str = "", bad: frozenset[str] | set[str] = frozenset()) -> Markup:
    """Horizontal bars, one per label, with an optional reference line (the expectation)."""
    if not bars:
        return Markup("")
    row, label_w = 16, 120
    height = PAD_T + row * len(bars) + 24
    hi = max([v for _, v in bars] + [reference or 0.0]) * 1.05 or 1.0
    sx = _scale(0.0, hi, label_w, W - PAD_R - 70)
    body = []
    for i, (label, value) in enumerate(bars):
        y = PAD_T + i * row
        cls = "bar bad" if label in bad else "bar"
        tip = f"{label}: {_fmt(value)} {unit}"
        body.append(f'<text x="{label_w - 4}" y="{y + 11}" class="tick" text-anchor="end">'
                    f'{escape(label)}</text><rect x="{label_w}" y="{y + 2}" '
                    f'width="{max(sx(value) - label_w, 1):.1f}" height="{row - 4}" class="{cls}">'
                    f'<title>{escape(tip)}</title></rect>'
                    f'<text x="{sx(value) + 4:.1f}" y="{y + 11}" class="tick">{escape(_fmt(value))}</text>')
    if reference:
        x = sx(reference)
        body.append(f'<line x1="{x:.1f}" y1="{PAD_T}" x2="{x:.1f}" y2="{height - 20}" class="ref"/>'
                    f'<text x="{x:.1f}" y="{height - 6}" class="tick" text-anchor="middle">expected '
                    f'{escape(_fmt(reference))} {escape(unit)}</text>')
    return _svg(body, title or unit, W, height)


def strip_chart(values: Mapping[str, float], *, outliers: set[str] | frozenset[str] = frozenset(),
                unit: str = "", title: str = "", reference: float | None = None) -> Markup:
    """Distribution of one value per host: a histogram with the outlier hosts marked."""
    if not values:
        return Markup("")
    lo = min([*values.values(), reference or math.inf])
    hi = max([*values.values(), reference or -math.inf])
    bins = 30
    width = (hi - lo) / bins or 1.0
    counts = [0] * bins
    bad_counts = [0] * bins
    for host, v in values.items():
        b = min(int((v - lo) / width), bins - 1)
        counts[b] += 1
        bad_counts[b] += host in outliers
    sx = _scale(lo, lo + width * bins, PAD_L, W - PAD_R)
    sy = _scale(0.0, max(counts) * 1.1, H - PAD_B, PAD_T)
    body = _axes(unit, "hosts", [(sy(c), str(int(c))) for c in _int_ticks(max(counts))])
    for b, c in enumerate(counts):
        if c:
            x0, x1 = sx(lo + b * width), sx(lo + (b + 1) * width)
            cls = "bar bad" if bad_counts[b] else "bar"
            body.append(f'<rect x="{x0 + 0.5:.1f}" y="{sy(c):.1f}" width="{max(x1 - x0 - 1, 1):.1f}" '
                        f'height="{sy(0) - sy(c):.1f}" class="{cls}"><title>{c} hosts, '
                        f'{escape(_fmt(lo + b * width))}–{escape(_fmt(lo + (b + 1) * width))} '
                        f'{escape(unit)}</title></rect>')
    for x in (lo, (lo + hi) / 2, hi):
        body.append(f'<text x="{sx(x):.1f}" y="{H - PAD_B + 14}" class="tick" text-anchor="middle">'
                    f'{escape(_fmt(x))}</text>')
    if reference is not None:
        body.append(f'<line x1="{sx(reference):.1f}" y1="{PAD_T}" x2="{sx(reference):.1f}" '
                    f'y2="{H - PAD_B}" class="ref"><title>expected {escape(_fmt(reference))}</title></line>')
    return _svg(body, title or unit)


def _int_ticks(top: int) -> list[int]:
    step = max(1, math.ceil(top / 4))
    return list(range(0, top + step, step))


def heatmap(labels: Sequence[str], cells: Mapping[tuple[str, str], float], *, unit: str = "",
            title: str = "", low: float | None = None, higher_is_better: bool = True,
            status: Mapping[tuple[str, str], str] | None = None,
            retests: Mapping[tuple[str, str], tuple[float, str]] | None = None) -> Markup:
    """Square matrix of pair values (symmetric pairs drawn both ways): a pair whose job FAILed (``status``;
    without it, a value below ``low``) in the FAIL red, WARN in amber, the others blue, darker is better.
    A retest of a pair (``retests``: value and status) is told in the same cell, not drawn as another pair."""
    if not labels or not cells:
        return Markup("")
    status, retests = status or {}, retests or {}
    cell = max(12, min(36, 480 // len(labels)))
    values = list(cells.values())
    hi, lo_v = max(values), min(values)
    label_w = 90
    size = label_w + cell * len(labels) + 4
    index = {name: i for i, name in enumerate(labels)}
    body = []
    for name, i in index.items():
        body.append(f'<text x="{label_w - 4}" y="{label_w + i * cell + cell - 3}" class="tick" '
                    f'text-anchor="end">{escape(name)}</text>'
                    f'<text x="0" y="0" class="tick" transform="translate({label_w + i * cell + cell - 3} '
                    f'{label_w - 4}) rotate(-90)">{escape(name)}</text>')
    suffix = f" {unit}" if unit else ""
    for (a, b), v in sorted(cells.items()):
        if a not in index or b not in index:
            continue
        state = status.get((a, b)) or ("FAIL" if low is not None and v < low else "")
        rel = (v - lo_v) / ((hi - lo_v) or 1.0)
        shade = 0.15 + 0.85 * (rel if higher_is_better else 1.0 - rel)
        look = {"FAIL": 'class="fail"', "ERROR": 'class="error"', "WARN": 'class="warn"'}.get(
            state, f'fill="rgba(37,99,235,{shade:.2f})"')
        tip = f"{a} ↔ {b}: {_fmt(v)}{suffix}" + (f" {state}" if state else "")
        again = retests.get((a, b)) or retests.get((b, a))
        if again is not None:
            tip += f"; retest: {_fmt(again[0])}{suffix}" + (f" {again[1]}" if again[1] else "")
        for i, j in {(index[a], index[b]), (index[b], index[a])}:
            body.append(f'<rect x="{label_w + j * cell}" y="{label_w + i * cell}" width="{cell - 1}" '
                        f'height="{cell - 1}" {look}><title>{escape(tip)}</title></rect>')
            if again is not None:  # "R": this pair was retested (the tooltip has both values)
                x, y = label_w + j * cell + cell / 2, label_w + i * cell + cell / 2 + 4
                body.append(f'<text x="{x:.1f}" y="{y:.1f}" class="tick retest-mark" text-anchor="middle">R</text>')
    return _svg(body, title or unit, size, size, fixed=True)


def sparkline(values: Sequence[float], *, label: str = "", width: int = 120, height: int = 24) -> Markup:
    """A tiny trend line (history of one metric), last point marked."""
    values = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if len(values) < 2:
        return Markup("")
    sx = _scale(0, len(values) - 1, 2, width - 4)
    sy = _scale(min(values), max(values), height - 3, 3)
    pts = " ".join(f"{sx(i):.1f},{sy(v):.1f}" for i, v in enumerate(values))
    last = f'<circle cx="{sx(len(values) - 1):.1f}" cy="{sy(values[-1]):.1f}" r="2" class="dot"/>'
    tip = f"{label}: " + ", ".join(_fmt(v) for v in values[-12:])
    return Markup(f'<svg class="spark" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
                  f'xmlns="http://www.w3.org/2000/svg"><title>{escape(tip)}</title>'
                  f'<polyline points="{pts}" fill="none" class="sparkline"/>{last}</svg>')
