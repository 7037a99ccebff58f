"""A host's detail section as plain JSON data, which report.js turns into the same elements on demand.

    data = detail_data(host_detail(digest, host), verdict)   # None: keep it as markup
    # {"verdict": "FAIL", "head": "profile · group", "bad": [[...8 cells...]], "panels": [...], ...}

On large runs most detailed hosts are not shown until their link is followed; as markup (even in an
inert ``<template>``) hundreds of them made a page the browser was slow to parse. As data they
are a fraction of the size and of the rendering CPU, and the page's script builds one host's section
with ``createElement``/``textContent`` when it is asked for: node text is never parsed as HTML.

Every string here is the text the Jinja macro (``macros.html.j2`` ``host_detail``) would show: the
same values, numbers as ``str`` gives them, the citation split as ``cited_message`` splits it. The
environment's ``finalize`` (``visible``: control and bidi characters as visible escapes) is left to
``html.script_json``, which applies it to every string of the data when any needs it: the same
result, as ``printable`` is idempotent and ``str`` of a non-string (``repr`` of a container) never
holds such a character. A section holding markup that text cannot carry (trend sparklines,
telemetry charts, a plugin's own panel template) returns None and stays markup.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from markupsafe import Markup

from healthcheck.core.model import Finding
from healthcheck.reports.digest import split_source
from healthcheck.reports.panels import Panel

CITE_SHOWN = 48  # characters of a message's "(source: ...)" clause shown inline
PANEL_KINDS = {"panels/table.html.j2": "table", "panels/matrix.html.j2": "matrix", "panels/note.html.j2": "note"}


class NotText(Exception):
    """A value only markup can show (an SVG chart): the section stays a ``<template>``."""


def text(value: Any) -> str:
    """What ``{{ value }}`` shows, before ``visible`` (see the module docstring)."""
    if type(value) is str:
        return value
    if isinstance(value, Markup):
        raise NotText(type(value).__name__)
    return str(value)


def pct(value: float | None) -> str:
    """A margin as the page shows it (also the ``pct`` filter of the templates): ``+12.5%``."""
    return "" if value is None else f"{value * 100:+.1f}%"


def cite_parts(message: Any) -> tuple[str, str, str] | None:
    """(text, full source, shortened source) of a message whose ``(source: ...)`` clause is too long to
    show inline, or None (``html.cited_message`` shows it whole)."""
    rest, source = split_source(str(message or ""))
    if len(source) <= CITE_SHOWN:
        return None
    return rest, source, source[:CITE_SHOWN].rsplit(" ", 1)[0] + " …"


def cited(message: Any) -> list[str]:
    """``[message]``, or ``[text, full source, shortened source]`` when the citation is cut (``cite_parts``)."""
    parts = cite_parts(message)
    return [str(message or "")] if parts is None else list(parts)


def finding_row(f: Finding, mg: float | None) -> list[Any]:
    """One ``finding_rows`` row: status, check, component, measured, expected, margin, negative,
    message (``cited``), remedy, source."""
    measured = "" if f.value is None else text(f.value) + (f" {text(f.unit)}" if f.unit else "")
    return [f.status.value, text(f.check), text(f.component), measured,
            "" if f.expected is None else text(f.expected), pct(mg), int(mg is not None and mg < 0),
            cited(f.message), text(f.remedy) if f.remedy else "", text(f.source or "")]


def panel_data(p: Panel) -> dict[str, Any]:
    """A panel as ``{kind, title, note, open, columns, rows, classes}`` (``panels/*.html.j2``)."""
    kind = PANEL_KINDS.get(p.template)
    if kind is None:
        raise NotText(p.template)
    out: dict[str, Any] = {"kind": kind, "title": text(p.title), "note": text(p.note) if p.note else "",
                           "open": int(p.attention)}
    if kind != "note":
        table = p.view
        out["columns"] = [text(c) for c in table.columns]
        out["rows"] = [[v if type(v) is str else text(v) for v in row] for row in table.rows]  # most cells are str
        if table.classes:
            out["classes"] = [[text(c) for c in row] for row in table.classes]
    return out


def pre_text(value: str) -> str:
    """``<pre>`` text as the HTML parser leaves it: one newline right after the tag is dropped."""
    return value[1:] if value.startswith("\n") else value


def detail_data(x: dict[str, Any], verdict: str) -> dict[str, Any] | None:
    """``html.host_detail``'s section as data (see the module docstring), or None to keep it as markup."""
    if x["trends"]:
        return None
    host = x["host"]
    head = [text(host.profile) if host.profile else "no profile"]
    head += [text(v) for v in (host.group, host.address) if v]
    try:
        out: dict[str, Any] = {"verdict": verdict, "head": " · ".join(head),
                               "panels": [panel_data(p) for p in x["panels"]]}
    except NotText:
        return None
    for key in ("bad", "skipped", "good"):
        if x[key]:
            out[key] = [finding_row(f, mg) for f, mg in x[key]]
    out["good_count"] = x["good_count"]
    if x["good_summary"]:
        out["good_summary"] = [[text(check), n] for check, n in x["good_summary"]]
    if x["raw"]:
        out["raw"] = [[text(source), pre_text(body)] for source, body in x["raw"]]
    return out


def shared_strings(details: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``{"strings": [...], "hosts": details}`` with every panel cell and class text that occurs more than once
    replaced by its index in ``strings`` (panel cells are all strings, so a number there is such an index):
    hosts of one kind repeat their topology matrices, GPU models and port states, which made up half the data."""
    cells = [row for x in details.values() for p in x["panels"]
             for row in (*p.get("rows", ()), *p.get("classes", ()))]
    counts = Counter(v for row in cells for v in row)
    index: dict[str, int] = {}
    for text, n in counts.items():
        if n > 1 and len(text) > 1:
            index[text] = len(index)
    for row in cells:
        row[:] = [index.get(v, v) for v in row]
    return {"strings": list(index), "hosts": details}
