"""``report.html``: one self-contained page (inline CSS, JS and SVG; no external assets).

    html = render_html(load_digest(run_dir))

jinja2 autoescaping is on for everything, node output reaches the page only as escaped text, the
host index travels as HTML-safe JSON read by ``textContent``-only JS, and a Content-Security-Policy
allows exactly the one inline script (by hash) and no network at all. Per-host detail sections
are rendered for the hosts that need attention (all hosts on small runs); on larger runs all but the
first ``DETAIL_LIVE`` travel as JSON data (``detail_data``) the script turns into the same elements
when a host's link is followed (as markup, hundreds of sections made a page slow to open);
a section with charts stays markup in an inert ``<template>``. The host table covers every host and
is filtered and paginated in the browser, so 10,000 hosts stay responsive.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup, escape

from healthcheck.core.model import Status
from healthcheck.core.textsafe import has_unsafe, printable
from healthcheck.reports import ReporterSpec, register
from healthcheck.reports.attention import attention
from healthcheck.reports.bench_charts import bench_context
from healthcheck.reports.charts import sparkline
from healthcheck.reports.detail_data import cite_parts, detail_data, pct, shared_strings
from healthcheck.reports.digest import BAD, RunDigest, fold, margin, split_source
from healthcheck.reports.domains import domain_views
from healthcheck.reports.fabric_views import fabric_context
from healthcheck.reports.field_views import field_context
from healthcheck.reports.findings_index import STATUS_RANK
from healthcheck.reports.fleet import version_rows
from healthcheck.reports.host_panels import host_panels
from healthcheck.reports.isolation_views import isolation_views
from healthcheck.store.jsoncodec import dumps
from healthcheck.store.results import HostResult, RunResults

DETAIL_ALL_UP_TO = 64      # runs this small get a detail section for every host
DETAIL_MAX = 300           # at most this many hosts get a detail section (worst first)
DETAIL_LIVE = 20           # on larger runs, the first detail sections in the page; the rest are data (detail_data)
GROUPS_MAX = 400           # grouped findings listed in the page
SIMILAR_MAX = 50           # per group, the other distinct messages listed with their host
STATUS_ORDER = [s.value for s in sorted(Status, key=lambda s: -s.rank)]
CATEGORY_NAMES = {"gpu": "GPU", "nvlink": "NVLink", "ib": "InfiniBand", "infiniband": "InfiniBand",
                  "ecc": "ECC", "xid": "Xid", "topo": "Topology", "topology": "Topology", "dcgm": "DCGM",
                  "nccl": "NCCL", "hpl": "HPL", "imb": "IMB", "osu": "OSU", "fabric": "NVSwitch fabric",
                  "imex": "IMEX", "nvl": "NVLink domain",
                  "pcie": "PCIe", "thermal": "Thermal", "system": "System", "fleet": "Fleet",
                  "run": "Run", "host": "Host", "bench": "Benchmark"}


def visible(value: Any) -> Any:
    """Strings (in lists and dicts too) with terminal escapes and bidi overrides from node output
    replaced by their visible escapes (``\\u202e``): a host or process name is shown as sent."""
    if isinstance(value, Markup):
        return Markup(printable(str(value)))  # the escapes added are plain ASCII: still safe markup
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, list | tuple):
        return [visible(v) for v in value]
    if isinstance(value, dict):
        return {visible(k): visible(v) for k, v in value.items()}
    return value


# What a JSON encoder (orjson, as json) writes for the control characters ``printable`` escapes (all but tab and
# newline): a text without these and without ``has_unsafe`` characters has no string that ``visible`` would change.
_JSON_CONTROL = re.compile(r"\\[bfr]|\\u00[01]")


def script_json(value: Any) -> Markup:
    """JSON safe inside ``<script type=application/json>``: ``<``, ``>``, ``&`` never appear raw;
    control and bidi characters arrive in the page as visible escapes."""
    text = dumps(value).decode("utf-8")  # orjson (jsoncodec), faster than the standard library's encoder
    if has_unsafe(text) or _JSON_CONTROL.search(text):  # some string needs ``visible``: encode it again
        text = dumps(visible(value)).decode("utf-8")
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                    ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return Markup(text)


@functools.cache
def environment() -> Environment:
    env = Environment(loader=PackageLoader("healthcheck.reports", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                      finalize=_cell)
    env.filters.update(duration=duration_text, pct=pct, category_name=category_name,
                       cited=cited_message, table_rows=table_rows)
    env.globals.update(sparkline=sparkline, fold=fold)
    return env


@functools.cache
def inline_script() -> tuple[Markup, Markup]:
    """The report's JS and its CSP hash (the template file is static, so compute once)."""
    source = environment().loader.get_source(environment(), "report.js")[0]  # type: ignore[union-attr]
    digest = base64.b64encode(hashlib.sha256(source.encode("utf-8")).digest()).decode()
    return Markup(source), Markup(f"'sha256-{digest}'")


def cited_message(message: Any) -> Markup:
    """A finding message with its long source citation shortened (the full one in the tooltip).

    Messages cite the profile's ``source:`` text, which can run to several hundred characters
    for combined expectations; in the tables it would drown the measurement. The text stays
    escaped: ``Markup.format`` escapes every argument.
    """
    parts = cite_parts(message)
    if parts is None:
        return Markup("{}").format(message or "")
    return Markup('{} <span class="cite" title="{}">(source: {})</span>').format(*parts)


def table_rows(table: Any) -> Markup:
    """The ``<tr>`` lines of a panel table, each cell escaped as ``{{ v }}`` would be (``visible``, then
    autoescape), built in one pass with plain string operations: 300 detailed hosts have about 100,000
    cells, too many for a Jinja loop or ``Markup.format``. A table repeats few texts (a topology matrix's
    NV18 and PIX): each distinct string and class is escaped once per table."""
    shown: dict[str, str] = {}
    opened: dict[str, str] = {"": "<td>"}
    out = []
    for i, row in enumerate(table.rows):
        classes = table.classes[i] if table.classes else ()
        cells = []
        for j, value in enumerate(row):
            css = classes[j] if j < len(classes) else ""
            tag = opened.get(css) if type(css) is str else None
            if tag is None:
                tag = f'<td class="{escape(_cell(css))}">' if css else "<td>"
                if type(css) is str:
                    opened[css] = tag
            if type(value) is str:
                text = shown.get(value)
                if text is None:
                    text = shown[value] = str(escape(printable(value)))
            else:
                text = str(escape(_cell(value)))
            cells.append(f"{tag}{text}</td>")
        out.append("    <tr>" + "".join(cells) + "</tr>\n")
    return Markup("".join(out))


def _cell(value: Any) -> Any:
    return visible(value) if isinstance(value, str) else value  # the environment's ``finalize``


def duration_text(seconds: Any) -> str:
    if not isinstance(seconds, int | float):
        return "?"
    minutes, secs = divmod(round(float(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else (f"{minutes} min {secs} s" if minutes else f"{secs} s")


def category_name(category: str) -> str:
    return CATEGORY_NAMES.get(category, category.replace("_", " ").capitalize())


def host_index(digest: RunDigest, detailed: set[str]) -> dict[str, Any]:
    """Compact host table for the browser: interned checks; each host's worst status per check as an index
    into ``shapes`` (hosts with the same checks in the same states share one: most of a fleet passes alike)."""
    checks: dict[str, int] = {}
    profiles: dict[str, int] = {}
    shapes: dict[tuple, int] = {}
    encoded: list[list[list[int]]] = []
    position = {s: STATUS_ORDER.index(s.value) for s in Status}
    rows = []
    tallies = digest.tallies
    for host in digest.hosts:
        t = tallies[host.name]
        key = tuple(t.worst.items())
        shape = shapes.get(key)
        if shape is None:
            ordered = sorted(t.worst.items(), key=lambda cs: (-STATUS_RANK[cs[1][0]], cs[0]))
            shape = shapes[key] = len(encoded)
            encoded.append([[checks.setdefault(c, len(checks)), position[s]] for c, (s, _) in ordered])
        rows.append([host.name, position[digest.verdicts[host.name]],
                     profiles.setdefault(host.profile or "", len(profiles)), host.group or "",
                     [t.counts[s] for s in STATUS_ORDER], shape,
                     split_source(t.first_bad.message)[0][:200] if t.first_bad else "",
                     int(host.name in detailed)])
    return {"statuses": STATUS_ORDER, "checks": list(checks), "shapes": encoded, "profiles": list(profiles),
            "hosts": rows}


def by_category(digest: RunDigest) -> list[dict[str, Any]]:
    """Failing/erroring/warning groups per category, worst category first, with its hosts folded."""
    cats: dict[str, list] = defaultdict(list)
    for g in digest.groups[:GROUPS_MAX]:
        cats[g.category].append(g)
    out = []
    for cat, groups in cats.items():
        hosts = {h for g in groups for h in g.hosts}
        worst = max(groups, key=lambda g: g.status.rank).status
        out.append({"name": cat, "status": worst, "hosts": len(hosts), "nodeset": fold(hosts),
                    "groups": groups})
    return sorted(out, key=lambda c: (-c["status"].rank, -c["hosts"], c["name"]))


def trend_views(trends: Any) -> list[dict[str, Any]]:
    """Sparklines of one host's ``trends`` entry: metric -> {unit, values: [[time, value], ...]}."""
    out = []
    for metric, series in sorted(trends.items()) if isinstance(trends, Mapping) else ():
        raw = series.get("values", []) if isinstance(series, Mapping) else series
        values = [p[-1] if isinstance(p, list | tuple) and p else p for p in raw or []]
        values = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        if values:
            unit = series.get("unit") if isinstance(series, Mapping) else None
            label = (series.get("metric") if isinstance(series, Mapping) else None) or metric
            out.append({"metric": label, "check": metric, "unit": unit or "", "last": values[-1],
                        "chart": sparkline(values, label=metric)})
    return out


def host_detail(digest: RunDigest, host: HostResult, passing_rows: bool = True) -> dict[str, Any]:
    """One host's section: findings by status, panels, trends, raw excerpts of what failed. Without
    ``passing_rows`` (large runs) the passing findings are counted per check instead of listed: 300
    detailed hosts x ~110 passing rows would make the page too heavy to open."""
    findings = sorted(host.findings, key=lambda f: (-f.status.rank, f.check, f.component))
    sources = {f.source for f in findings if f.source and f.status in BAD}
    raw = [(s, text) for s in sorted(sources) if (text := digest.raw_excerpt(host.name, s)) is not None]
    passing = [f for f in findings if f.status is Status.PASS]
    return {"host": host, "bad": [(f, margin(f)) for f in findings if f.status in BAD],
            "skipped": [(f, margin(f)) for f in findings if f.status is Status.SKIP],
            "good": [(f, margin(f)) for f in passing] if passing_rows else [],
            "good_count": len(passing), "good_summary": sorted(Counter(f.check for f in passing).items()),
            "panels": host_panels(digest.observations(host)), "raw": raw,
            "trends": trend_views((digest.document.get("trends") or {}).get(host.name))}


def detailed(hosts: Sequence[HostResult], verdicts: Mapping[str, Status]) -> list[HostResult]:
    """The hosts given a detail section: every host of a run of at most ``DETAIL_ALL_UP_TO``, else the
    not-passing ones; in ``hosts``' order (worst first), at most ``DETAIL_MAX``."""
    small = len(hosts) <= DETAIL_ALL_UP_TO
    return [h for h in hosts if small or verdicts[h.name] in BAD][:DETAIL_MAX]


def excerpted_outputs(results: RunResults) -> dict[str, list[str]]:
    """Host -> the command ids whose raw excerpt the page shows (the sources of its detailed hosts'
    not-passing findings): what a merged run keeps of the node bundles to re-render without them."""
    verdicts = {name: host.verdict for name, host in results.hosts.items()}
    hosts = sorted(results.hosts.values(), key=lambda h: (-verdicts[h.name].rank, h.name))
    out = {}
    for host in detailed(hosts, verdicts):
        sources = sorted({f.source for f in host.findings if f.source and f.status in BAD})
        if sources:
            out[host.name] = sources
    return out


def render_context(digest: RunDigest) -> dict[str, Any]:
    hosts = digest.hosts
    small = len(hosts) <= DETAIL_ALL_UP_TO
    verdicts = digest.verdicts
    chosen = detailed(hosts, verdicts)
    script, script_hash = inline_script()
    live = len(chosen) if small else DETAIL_LIVE
    details, as_data = [], {}
    for i, host in enumerate(chosen):
        x = host_detail(digest, host, passing_rows=small)
        if i >= live:  # travels as data when it can; then the page needs only its name (its panels go now)
            data = detail_data(x, verdicts[host.name].value)
            x = {"host": host, "data": True} if data is not None else {**x, "data": False}
            if data is not None:
                as_data[printable(host.name)] = data  # the key is the name as the page shows it (``visible``)
        details.append(x)
    return {"d": digest, "summary": digest.summary(), "by_verdict": digest.hosts_by_verdict(),
            "statuses": [Status(s) for s in STATUS_ORDER], "categories": by_category(digest),
            "groups_total": len(digest.groups), "groups_max": GROUPS_MAX, "similar_max": SIMILAR_MAX,
            "profiles": sorted({h.profile or "(none)" for h in hosts}),
            "details": details, "details_live": live,
            "details_data": script_json(shared_strings(as_data)) if as_data else "",
            "details_skipped": sum(1 for h in hosts if verdicts[h.name] in BAD) - len(chosen)
            if not small else 0,
            "index": script_json(host_index(digest, {h.name for h in chosen})),
            "versions": version_rows(hosts), "bench": bench_context(digest), "domains": domain_views(digest),
            "isolation": isolation_views(digest),
            "fabric": fabric_context(digest, {h.name for h in chosen}),
            "attention": attention(digest, {h.name for h in chosen}),
            "changes": digest.document.get("changes"), "detailed": {h.name for h in chosen},
            "script": script, "script_hash": script_hash, "field": field_context(digest),
            "manifest": manifest_text(digest.manifest) if digest.manifest else ""}


MANIFEST_HOSTS = 50  # past this many hosts the page's manifest names the count; manifest.json lists them all


def manifest_text(manifest: Mapping[str, Any]) -> str:
    """``manifest.json`` as the page shows it (indented JSON); a long host list is left to the file itself
    (at fleet scale it was much of the page, and the host table lists them already)."""
    hosts = manifest.get("hosts")
    if isinstance(hosts, list) and len(hosts) > MANIFEST_HOSTS:
        manifest = {**manifest, "hosts": f"{len(hosts)} hosts: listed in manifest.json"}
    return json.dumps(manifest, indent=1, ensure_ascii=False, default=str)


def render_html(digest: RunDigest) -> bytes:
    template = environment().get_template("report.html.j2")
    return template.render(**render_context(digest)).encode("utf-8")


REPORTER = register(ReporterSpec(name="html", filename="report.html", render=render_html))
