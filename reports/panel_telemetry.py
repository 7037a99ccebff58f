"""Report panels for GPU field telemetry: per-job time series under load, per-GPU summary at rest.

    panels.host_panels({"telemetry": {"jobs": [...]}, "dcgm_fields": {...}})
    # -> [Panel("telemetry under load (1 job)", ...), Panel("DCGM fields at rest (8 GPUs)", ...)]

``telemetry`` observations come from ``run.telemetry.job_view`` (thinned series
``[t_s, gpu_temp_c, power_w, sm_clock_mhz]`` per GPU, ``limits``, ``gpus`` summaries);
``dcgm_fields`` from ``probes.dcgm_fields.FieldsObservation``. Each chart is a small inline SVG, one
line per GPU, the limit drawn as a dashed line and GPUs that throttled in the report's FAIL red (the
class ``fail``, as every chart); every label is escaped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from markupsafe import Markup, escape

from healthcheck.reports.charts import PALETTE
from healthcheck.reports.metrics import number as _num
from healthcheck.reports.panels import Panel, Table, _records, panel

TABLE = "panels/table.html.j2"
W, H, PAD_L, PAD_B, PAD_T = 260, 96, 34, 14, 6
HW_REASONS = ("hw_slowdown", "hw_thermal", "hw_power_brake")



def _throttled(gpu: Mapping[str, Any]) -> bool:
    throttle = gpu.get("throttle_s") if isinstance(gpu.get("throttle_s"), Mapping) else {}
    return any((_num(throttle.get(r)) or 0) > 0 for r in HW_REASONS)


def mini_chart(lines: Mapping[str, Sequence[tuple[float, float]]], *, limit: float | None, unit: str,
               title: str, bad: frozenset[str] = frozenset()) -> Markup:
    """One small time-series chart: a polyline per GPU, ``limit`` as a dashed red line."""
    points = [p for pts in lines.values() for p in pts]
    if not points:
        return Markup("")
    xs = [x for x, _ in points]
    ys = [y for _, y in points] + ([limit] if limit is not None else [])
    x0, x1 = min(xs), max(xs) or 1.0
    y0, y1 = min(0.0, min(ys)), max(ys) * 1.08 or 1.0

    def sx(x: float) -> float:
        return PAD_L + (x - x0) / ((x1 - x0) or 1.0) * (W - PAD_L - 4)

    def sy(y: float) -> float:
        return H - PAD_B - (y - y0) / ((y1 - y0) or 1.0) * (H - PAD_B - PAD_T)

    body = [f'<line x1="{PAD_L}" y1="{H - PAD_B}" x2="{W - 4}" y2="{H - PAD_B}" class="axis"/>',
            f'<text x="{PAD_L - 3}" y="{PAD_T + 8}" class="tick" text-anchor="end">{y1:.0f}</text>',
            f'<text x="{PAD_L - 3}" y="{H - PAD_B}" class="tick" text-anchor="end">{y0:.0f}</text>',
            f'<text x="{W - 4}" y="{H - 2}" class="tick" text-anchor="end">{x1:.0f} s</text>',
            f'<text x="{PAD_L}" y="{H - 2}" class="tick">{escape(unit)}</text>']
    if limit is not None:
        body.append(f'<line x1="{PAD_L}" y1="{sy(limit):.1f}" x2="{W - 4}" y2="{sy(limit):.1f}" class="fail" '
                    f'stroke-dasharray="4 3"><title>limit {limit:g} {escape(unit)}</title></line>'
                    f'<text x="{W - 6}" y="{sy(limit) - 2:.1f}" class="tick fail-text" text-anchor="end">'
                    f'limit {limit:g} {escape(unit)}</text>')
    for i, (gpu, pts) in enumerate(sorted(lines.items())):
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        look = 'class="fail" stroke-width="2.0"' if gpu in bad else \
            f'stroke="{PALETTE[i % len(PALETTE)]}" stroke-width="1.1"'
        body.append(f'<polyline points="{path}" fill="none" {look}><title>{escape(gpu)}</title></polyline>')
    return Markup(f'<svg class="chart fixed" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
                  f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>{"".join(body)}</svg>')


def _lines(series: Mapping[str, Any], column: int) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {}
    for gpu, points in series.items():
        pts = [(float(p[0]), float(p[column])) for p in points or ()
               if isinstance(p, list | tuple) and len(p) > column and _num(p[0]) is not None
               and _num(p[column]) is not None]
        if pts:
            out[str(gpu)] = pts
    return out


def _job_row(job: Mapping[str, Any]) -> tuple[list[Any], bool]:
    gpus = _records(job, "gpus")
    bad = frozenset(str(g.get("gpu")) for g in gpus if _throttled(g))
    name = str(job.get("job_id", "?"))
    if job.get("error") or job.get("unavailable") or not isinstance(job.get("series"), Mapping):
        return [name, str(job.get("error") or job.get("unavailable") or "no samples"), "", ""], bool(job.get("error"))
    limits = job.get("limits") if isinstance(job.get("limits"), Mapping) else {}
    series = job["series"]
    charts = [mini_chart(_lines(series, 1), limit=_num(limits.get("gpu_temp_c")), unit="°C",
                         title=f"{name}: GPU temperature", bad=bad),
              mini_chart(_lines(series, 2), limit=_num(limits.get("power_w")), unit="W",
                         title=f"{name}: power", bad=bad),
              mini_chart(_lines(series, 3), limit=None, unit="MHz", title=f"{name}: SM clock", bad=bad)]
    label = f"{name} ({job.get('rounds', '?')} samples, {job.get('source', '?')})"
    if bad:
        label += f": HW throttling on {', '.join(sorted(bad))}"
    return [label, *charts], bool(bad)


@panel("telemetry")
def telemetry_panel(obs: Any) -> Panel | None:
    jobs = _records(obs, "jobs")
    if not jobs:
        return None
    rows, classes = [], []
    for job in jobs:
        row, flagged = _job_row(job)
        rows.append(row)
        classes.append(["bad" if flagged else "", "", "", ""])
    table = Table(columns=["job", "GPU temperature (°C)", "power (W)", "SM clock (MHz)"], rows=rows,
                  classes=classes)
    return Panel(f"telemetry under load ({len(jobs)} job{'s' if len(jobs) != 1 else ''})", TABLE, table,
                 note="one line per GPU; dashed red: the limit; red lines: GPUs with HW slowdown/thermal/power brake")


def _reasons(gpu: Mapping[str, Any]) -> str:
    throttle = gpu.get("throttle_s") if isinstance(gpu.get("throttle_s"), Mapping) else {}
    return ", ".join(f"{k} {v:g} s" for k, v in sorted(throttle.items()) if (_num(v) or 0) > 0)


@panel("dcgm_fields")
def dcgm_fields_panel(obs: Any) -> Panel | None:
    gpus = _records(obs, "gpus")
    if not gpus:
        note = str(obs.get("unavailable") or "") if isinstance(obs, Mapping) else ""
        return Panel("DCGM fields at rest", "panels/note.html.j2", None, note=note) if note else None
    rows, classes = [], []
    for g in gpus:
        latest = g.get("latest") if isinstance(g.get("latest"), Mapping) else {}
        peak = g.get("peak") if isinstance(g.get("peak"), Mapping) else {}
        flags = [k.replace("row_remap_", "remap ") for k in ("row_remap_pending", "row_remap_failure") if peak.get(k)]
        xid = latest.get("xid_last")
        rows.append([g.get("gpu"), g.get("gpu_temp_max_c"), g.get("memory_temp_max_c"), g.get("power_max_w"),
                     g.get("sm_clock_median_mhz"), _reasons(g), "" if not xid else int(xid), " ".join(flags)])
        classes.append(["", "", "", "", "", "bad" if _throttled(g) else "", "bad" if xid else "",
                        "bad" if flags else ""])
    table = Table(columns=["GPU", "temp max (°C)", "HBM temp max (°C)", "power max (W)", "SM clock (MHz)",
                           "clock events", "last XID", "row remap"], rows=rows, classes=classes)
    source = obs.get("source", "") if isinstance(obs, Mapping) else ""
    return Panel(f"DCGM fields at rest ({len(gpus)} GPUs)", TABLE, table,
                 note=f"{obs.get('rounds', '?')} samples, {source}" if isinstance(obs, Mapping) else "")
