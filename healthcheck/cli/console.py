"""The console summary of a run, folded like ``summary.md``: one line per kind of problem, not per host.

    for line in summary_lines(results, run_dir, verbose=False):
        print(line)
    # verdict ERROR: 2000 hosts  ERROR 2000
    # ERROR host.reachable gpu[0001-2000] (2000): connection refused (10.0.0.1:22) (+1999 similar)

FAIL and ERROR findings are grouped by status, check, component and message (the message with
host names, addresses and numbers blanked, so "7 GPUs" and "6 GPUs" group but "connection refused"
and "authentication failed" do not), worst status first, then the widest group. ``verbose`` adds the
per-host listing (every host's first FAIL/ERROR findings).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from healthcheck.core.model import Finding, Status
from healthcheck.core.textsafe import printable
from healthcheck.core.verdicts import unchecked_hosts
from healthcheck.reports.digest import fold, short_cited
from healthcheck.store.results import RunResults

MAX_GROUPS = 25
PER_HOST = 5
_ADDRESS = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b|\[[0-9a-fA-F:]+\](?::\d+)?")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def message_kind(f: Finding) -> str:
    """The message with what differs per host blanked: the host's name, addresses, numbers."""
    text = " ".join(f.message.split()).replace(f.host, "<host>")
    return _NUMBER.sub("#", _ADDRESS.sub("<addr>", text))


def group_lines(findings: Iterable[Finding], limit: int = MAX_GROUPS) -> list[str]:
    """``STATUS check [component] nodeset (n): message`` per group, worst and widest first."""
    buckets: dict[tuple[Status, str, str, str], list[Finding]] = defaultdict(list)
    for f in findings:
        if f.status in (Status.FAIL, Status.ERROR):
            buckets[(f.status, f.check, f.component or "", message_kind(f))].append(f)
    ordered = sorted(buckets.items(), key=lambda kv: (-kv[0][0].rank, -len({f.host for f in kv[1]}), kv[0][1]))
    lines = []
    for (status, check, component, _), group in ordered[:limit]:
        hosts = sorted({f.host for f in group})
        messages = list(dict.fromkeys(" ".join(f.message.split()) for f in group))
        more = f" (+{len(messages) - 1} similar)" if len(messages) > 1 else ""
        where = f" {component}" if component and component != "node" else ""
        lines.append(f"{status.value:<5} {check}{where} {fold(hosts)} ({len(hosts)}): {short_cited(messages[0])}{more}")
    if len(ordered) > limit:
        lines.append(f"... and {len(ordered) - limit} more groups (summary.md, report.html; -v lists hosts)")
    return lines


def host_lines(results: RunResults) -> list[str]:
    """The per-host listing (``-v``): each host's first FAIL/ERROR findings."""
    lines = []
    for name, host in results.hosts.items():
        bad = [f for f in host.findings if f.status in (Status.FAIL, Status.ERROR)]
        for f in bad[:PER_HOST]:
            lines.append(f"  {name:<16} {f.status.value:<5} {f.check:<28} {' '.join(f.message.split())}")
        if len(bad) > PER_HOST:
            lines.append(f"  {name:<16} ... {len(bad) - PER_HOST} more")
    return lines


def summary_lines(results: RunResults, run_dir: Path, verbose: bool = False) -> list[str]:
    summary = results.summary()
    counts = "  ".join(f"{k} {v}" for k, v in summary["by_verdict"].items() if v)
    lines = [f"verdict {summary['verdict']}: {summary['hosts']} hosts  {counts}"]
    if not results.hosts:
        lines.append("  no host was selected: nothing was checked")
    skipped = unchecked_hosts(results)
    if skipped:
        lines.append(f"  not checked (SKIP, exit code stays non-zero): {', '.join(skipped[:10])}"
                     + (f" ... {len(skipped) - 10} more" if len(skipped) > 10 else ""))
    lines += group_lines(results.findings())
    if verbose:
        lines += host_lines(results)
    rerun = results.extra.get("rerun")
    if isinstance(rerun, dict):
        lines.append(f"rerun of {rerun.get('of')}:")
        lines += [f"  {name:<16} was {states.get('was')}, now {states.get('now') or 'not swept'}"
                  for name, states in sorted((rerun.get("hosts") or {}).items())]
    lines.append(f"run directory: {run_dir}")
    if (run_dir / "report.html").is_file():
        lines.append(f"report: {run_dir / 'report.html'}")
    return [printable(line) for line in lines]  # node output: terminal escapes and bidi overrides shown
