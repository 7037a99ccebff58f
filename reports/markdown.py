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

from healthcheck.reports import ReporterSpec, register
from healthcheck.reports.digest import RunDigest, fold, short_cited

from healthcheck.model import Status

MAX_GROUPS = 25
MAX_TEXT = 300


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
    return ("\n".join(lines) + "\n").encode("utf-8")


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
