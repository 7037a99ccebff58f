"""Inline SVG charts for the HTML report; every label is escaped, nothing is fetched.

    line_chart([Series("gpu001", [(8, 0.1), (1 << 30, 480.0)])], band=(288.0, 480.0),
               x_log=True, x_label="message size (bytes)", y_label="busbw (GB/s)")
    heatmap(["n1", "n2"], {("n1", "n2"): 48.1}, unit="GB/s")
    bar_chart([("gpu001", 51230.0)], reference=52000.0, unit="GFLOPS")
    strip_chart({"gpu001": 470.0, "gpu002": 301.0}, outliers={"gpu002"}, unit="GB/s")

Charts return ``markupsafe.Markup`` so the template inserts them as they are; text inside goes
through ``escape`` here. Layouts are plain arithmetic on a fixed viewBox.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

W, H = 640, 260          # viewBox of line, bar and strip charts
PAD_L, PAD_R, PAD_T, PAD_B = 56, 12, 10, 40
PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4d7c0f", "#be185d")


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
               x_label: str = "", y_label: str = "", title: str = "", max_series: int = 40) -> Markup:
    """Lines of (x, y) points with an optional horizontal expectation band (low, high)."""
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
        top, bottom = sy(max(band)), sy(min(band))
        body.append(f'<rect x="{PAD_L}" y="{top:.1f}" width="{W - PAD_L - PAD_R}" '
                    f'height="{max(bottom - top, 1):.1f}" class="band"><title>expected '
                    f'{escape(_fmt(min(band)))}–{escape(_fmt(max(band)))}</title></rect>')
    for i, s in enumerate(series):
        pts = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in sorted(s.points))
        color = "#dc2626" if s.highlight else PALETTE[i % len(PALETTE)]
        width = 2.2 if s.highlight else 1.3
        body.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="{width}">'
                    f'<title>{escape(s.label)}</title></polyline>')
    return _svg(body, title or y_label)


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
            title: str = "", low: float | None = None, higher_is_better: bool = True) -> Markup:
    """Square matrix of pair values (symmetric pairs drawn both ways); darker is better, red below ``low``."""
    if not labels or not cells:
        return Markup("")
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
    for (a, b), v in sorted(cells.items()):
        if a not in index or b not in index:
            continue
        rel = (v - lo_v) / ((hi - lo_v) or 1.0)
        shade = 0.15 + 0.85 * (rel if higher_is_better else 1.0 - rel)
        fill = "#dc2626" if low is not None and v < low else f"rgba(37,99,235,{shade:.2f})"
        for i, j in {(index[a], index[b]), (index[b], index[a])}:
            body.append(f'<rect x="{label_w + j * cell}" y="{label_w + i * cell}" width="{cell - 1}" '
                        f'height="{cell - 1}" fill="{fill}"><title>{escape(a)} ↔ {escape(b)}: '
                        f'{escape(_fmt(v))} {escape(unit)}</title></rect>')
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
