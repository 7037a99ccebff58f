"""``summary.md``: a short Markdown summary to paste into a ticket or a chat.

    ## healthcheck FAIL: 3 of 128 hosts failing or in error
    | verdict | hosts | nodes |
    | FAIL | 3 | `gpu[001-003]` |
    - **FAIL** `gpu.count` node on `gpu[001-003]` (3): 7 GPUs visible ... → Reseat ...

Node text is made inert: code spans lose their backticks, prose has Markdown and HTML
characters escaped, pipes are escaped for tables and lines are cut, so output pasted from a
node can neither break the table nor inject markup.
"""

from __future__ import annotations

import re

from healthcheck.core.model import Status
from healthcheck.reports import ReporterSpec, register
from healthcheck.reports.digest import RunDigest, expected_band, fold, short_cited
from healthcheck.reports.domains import domain_views
from healthcheck.reports.fabric_views import fabric_context
from healthcheck.reports.field_views import field_context
from healthcheck.reports.isolation_views import isolation_views, tree_lines

MAX_GROUPS = 25
MAX_TEXT = 300
MAX_BANDWIDTH_ROWS = 40
MAX_FABRIC_ROWS = 10
# the benchmark results graded as a fraction of the profile's expectation (benchmarks/bands.py)
BANDWIDTH_CHECKS = re.compile(r"^(nccl\.\w+\.(node|pair|rail|cluster|group|group_rail)\.busbw|hpl\.node\.gflops"
                              r"|imb\.pingpong\.bandwidth)$")
_BAND_LABEL = re.compile(r"\((excellent|acceptable|degraded|broken);")


def md_text(value: object, limit: int = MAX_TEXT) -> str:
    """One line of node-supplied prose, safe inside Markdown tables."""
    text = " ".join(str(value).split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    for ch in "\\`|*_[]<>#":
        text = text.replace(ch, "\\" + ch)
    return text


def md_code(value: object, limit: int = MAX_TEXT) -> str:
    """A code span (check ids, nodesets): backticks dropped, pipes escaped for tables."""
    text = " ".join(str(value).split()).replace("`", "'").replace("|", "\\|")
    return f"`{text[:limit]}`" if text else ""


def render_markdown(digest: RunDigest) -> bytes:
    run, summary = digest.run, digest.summary()
    by_verdict = digest.hosts_by_verdict()
    bad = sum(len(by_verdict[s]) for s in (Status.FAIL, Status.ERROR))
    run_id = md_code(run.get("id") or digest.run_dir.name)
    names = md_code(", ".join(profiles(digest)) or "-")
    lines = [f"## healthcheck {digest.verdict.value}: {bad} of {summary['hosts']} hosts failing or in error",
             "",
             f"Run {run_id}, started {md_text(run.get('started', '?'))}, took "
             f"{md_text(run.get('duration_s', '?'))} s, profiles: {names}.",
             "", "| verdict | hosts | nodes |", "|---|---:|---|"]
    for status in sorted(Status, key=lambda s: -s.rank):
        names = by_verdict[status]
        if names:
            lines.append(f"| {status.value} | {len(names)} | {md_code(fold(names), 2000)} |")
    lines += rerun_lines(digest.document.get("rerun"))
    lines += domain_lines(digest)
    lines += bandwidth_lines(digest)
    lines += isolation_lines(digest)
    lines += fabric_lines(digest)
    groups = digest.groups
    if groups:
        lines += ["", "### Findings (grouped across hosts)", ""]
    for g in groups[:MAX_GROUPS]:
        remedy = f" → {md_text(g.remedy)}" if g.remedy else ""
        more = f" (+{len(g.messages) - 1} similar)" if len(g.messages) > 1 else ""
        lines.append(f"- **{g.status.value}** {md_code(g.check)} {md_text(g.component)} on "
                     f"{md_code(g.nodeset, 2000)} ({len(g.hosts)}): {md_text(short_cited(g.message))}{more}{remedy}")
    if len(groups) > MAX_GROUPS:
        lines.append(f"- … and {len(groups) - MAX_GROUPS} more groups: see report.html")
    offenders = field_context(digest)["offenders"]
    if offenders:
        lines += ["", "### Repeat offenders (RMA candidates)", ""]
        lines += [f"- {md_code(o.get('host', ''))} {md_text(o.get('component', ''))} {md_code(o.get('check', ''))}: "
                  f"failing on {md_text(o.get('failures', '?'))} of the last {md_text(o.get('runs', '?'))} runs"
                  for o in offenders[:MAX_GROUPS]]
    return ("\n".join(lines) + "\n").encode("utf-8")


def isolation_lines(digest: RunDigest) -> list[str]:
    """"Isolation": what each isolation blamed and why, its suspects, and the follow-ups of its failed jobs."""
    lines: list[str] = []
    for iso in isolation_views(digest):
        lines += ["", f"### Isolation: {md_text(iso.title)}", "", md_text(iso.summary)
                  + (f". Stopped early: {md_text(iso.stopped)}" if iso.stopped else ""), ""]
        lines += [f"- **blamed** {md_text(b.kind)} {md_code(b.subject)} ({md_code(b.hosts, 500)}): {md_text(b.reason)}"
                  for b in iso.blamed[:MAX_GROUPS]] or ["- nothing blamed"]
        lines += [f"- **suspect** {md_text(b.kind)} {md_code(b.subject)}: {md_text(b.reason)}"
                  for b in iso.suspects[:MAX_GROUPS]]
        tree = [line for root in iso.roots[:MAX_GROUPS] for line in tree_lines(root)]
        if tree:
            lines += ["", "Failed jobs and their follow-ups:", ""]
            lines += [f"{'  ' * depth}- {md_text(node.label)}"
                      + (f" → blamed on {md_text(', '.join(node.blamed_on))}" if node.blamed_on else
                         " → not reproduced" if not node.ok and not node.left else "") for depth, node in tree]
    return lines


def bandwidth_lines(digest: RunDigest) -> list[str]:
    """"Bandwidth vs expectation": busbw per node, pair and cluster job, HPL per node, IMB per pair, with
    the band; one row per job (a pair's finding on both hosts is one row), worst first."""
    rows: dict[tuple[str, str, str], list] = {}
    # Check by check (the digest's index): rows tie in the sort below only within one check, where the
    # findings keep the run's order, so the table is the same as from one loop over every finding.
    found = (f for check, fs in digest.index.by_check.items() if BANDWIDTH_CHECKS.match(check) for f in fs)
    for f in found:
        if isinstance(f.value, bool) or not isinstance(f.value, int | float):
            continue
        row = rows.setdefault((f.check, f.component or "", f.source or ""), [f, [], f.status.rank])
        row[1].append(f.host)
        row[2] = min(row[2], f.status.rank)
        if f.status.rank > row[0].status.rank:  # the attributed node's finding, not its cleared partner's
            row[0] = f
    if not rows:
        return []
    lines = ["", "### Bandwidth vs expectation", "", "| status | band | check | job | nodes | measured | of nominal |",
             "|---|---|---|---|---|---:|---:|"]
    ordered = sorted(rows.values(), key=lambda r: (-r[0].status.rank, r[0].check, r[0].component or ""))
    for f, hosts, best in ordered[:MAX_BANDWIDTH_ROWS]:
        band = expected_band(f.expected)
        nominal = band[1] if band else None
        share = f"{float(f.value) / nominal:.0%}" if nominal else "-"
        label = m[1] if (m := _BAND_LABEL.search(f.message or "")) else "-"
        blamed = f" (blamed: {md_code(f.host)})" if f.status.rank > best else ""
        measured = f"{float(f.value):g} {md_text(f.unit or '')}"
        lines.append(f"| {f.status.value} | {label} | {md_code(f.check)} | {md_text(f.component)}{blamed} | "
                     f"{md_code(fold(sorted(set(hosts))), 500)} | {measured} | {share} |")
    if len(ordered) > MAX_BANDWIDTH_ROWS:
        lines.append(f"\n… and {len(ordered) - MAX_BANDWIDTH_ROWS} more jobs: see report.html")
    return lines


def domain_lines(digest: RunDigest) -> list[str]:
    """"NVLink domains": one row per domain (cluster UUID), worst first, the bad trays named."""
    views = domain_views(digest)
    if not views:
        return []
    lines = ["", "### NVLink domains", "",
             "| verdict | domain | profile | trays | GPUs | bad trays | racks | cliques |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {md_text(d.verdict)} | {md_code(d.cluster_uuid)} | {md_code(d.profile)} | {md_text(d.trays)} | "
              f"{md_text(d.gpus)} | {md_text(d.bad, 1000)} | {md_text(d.racks)} | {md_text(d.cliques)} |"
              for d in views[:MAX_GROUPS]]
    if len(views) > MAX_GROUPS:
        lines.append(f"\n… and {len(views) - MAX_GROUPS} more domains: see results.json")
    return lines


def fabric_lines(digest: RunDigest) -> list[str]:
    """"Fabric counters": the worst ports by rate since boot, and per benchmark job its worst moved counter."""
    fabric = fabric_context(digest)
    lines = []
    if fabric["heat"]:
        lines += ["", "### Fabric counters: worst ports by rate", "",
                  "| host | port | counter | per hour since boot | × fleet median |", "|---|---|---|---:|---:|"]
        for r in fabric["heat"][:MAX_FABRIC_ROWS]:
            times = f"{r['times_median']:,.0f}×" if r["times_median"] is not None else "-"
            lines.append(f"| {md_code(r['host'])} | {md_text(r['port'])} | {md_code(r['counter'])} | "
                         f"{r['per_hour']:,.1f} | {times} |")
    moved = [j for j in fabric["jobs"] if j["rows"]]
    if moved:
        lines += ["", "### Fabric counters during the benchmark jobs", ""]
    for j in moved:
        r, count = j["rows"][0], len(j["rows"]) + j["unlisted"]
        per_gb = f", {r['per_gb']:,.2f} per GB moved" if isinstance(r["per_gb"], int | float) else ""
        status = f" ({r['status']})" if r["status"] else ""
        lines.append(f"- {md_code(j['job_id'])}: {count} counter{'s' if count != 1 else ''} moved; worst "
                     f"{md_code(r['host'])} {md_text(r['port'])} {md_code(r['family'] + '.' + r['counter'])}: "
                     f"{r['during']:,} during the job{per_gb}{status}")
    return lines


def rerun_lines(rerun: object) -> list[str]:
    """``run --rerun-failed``: one line per host, "was FAIL, now PASS"."""
    if not isinstance(rerun, dict) or not isinstance(rerun.get("hosts"), dict):
        return []
    lines = ["", f"### Rerun of {md_code(rerun.get('of', '?'))}", ""]
    for name, states in sorted(rerun["hosts"].items()):
        states = states if isinstance(states, dict) else {}
        now = states.get("now") or "not swept"
        lines.append(f"- {md_code(name)}: was {md_text(states.get('was'))}, now {md_text(now)}")
    return lines


def profiles(digest: RunDigest) -> list[str]:
    return sorted({h.profile for h in digest.results.hosts.values() if h.profile})


REPORTER = register(ReporterSpec(name="markdown", filename="summary.md", render=render_markdown))
