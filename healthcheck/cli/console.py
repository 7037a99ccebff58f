"""The console summary of a run, folded like ``summary.md``: one line per kind of problem, not per host.

    for line in summary_lines(results, run_dir, verbose=False):
        print(line)
    # verdict ERROR: 2000 hosts  ERROR 2000
    # ERROR host.reachable gpu[0001-2000] (2000): connection refused (10.0.0.1:22) (+1999 similar)
    # WARN  system.hostname gpu[0001-0008] (8): node reports hostname 'vm', inventory calls it 'gpu0001' (+7 similar)

FAIL and ERROR findings, then WARN ones, are grouped by status, check and message, the message
with what differs per host or per part blanked (host names, addresses, numbers, host-key
fingerprints, PCI bus ids, GUIDs, UUIDs, the finding's component), so "7 GPUs" and "6 GPUs" group,
2,000 unknown host keys are one line and eight GPUs of the wrong model are one line (``gpu[0-7]``),
but "connection refused" and "authentication failed" do not. Worst status first, then the widest
group; each host's own message stays in summary.md, report.html and ``-v``. ``verbose`` adds the
per-host listing (every host's first FAIL/ERROR findings).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path

from healthcheck.core.model import Finding, Status
from healthcheck.core.textsafe import printable
from healthcheck.core.verdicts import unchecked_hosts
from healthcheck.reports.digest import fold, fold_brief, short_cited
from healthcheck.store.results import RunResults

MAX_GROUPS = 25
MAX_WARN_GROUPS = 10
PER_HOST = 5
_ADDRESS = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b|\[[0-9a-fA-F:.]+\](?::\d+)?")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9]")  # a word that may be a host's name
# Details a message carries per host or per part, blanked before grouping (after the host's name).
_DETAILS = (
    (re.compile(r"\bSHA256:[A-Za-z0-9+/]{43}=?|\bMD5(?::[0-9a-f]{2}){16}"), "<fingerprint>"),  # host keys
    (re.compile(r"\b[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\b"), "<uuid>"),
    (re.compile(r"\b(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\b"), "<pci>"),  # bus ids
    (re.compile(r"\b0x[0-9a-fA-F]+\b|\b(?:[0-9a-fA-F]{4}:){3}[0-9a-fA-F]{4}\b"), "<guid>"),
    (_ADDRESS, "<addr>"),
    (_NUMBER, "#"),
)


def message_kind(f: Finding, hosts: Collection[str] = ()) -> str:
    """The message with what differs per host or per part blanked: the host's name (and any of ``hosts``
    it names, as in a list of the hosts that differ), the component, fingerprints, bus ids, GUIDs, UUIDs,
    addresses, numbers."""
    text = " ".join(f.message.split())
    if f.component and f.component != "node" and len(f.component) > 1:  # first: a pair's names its hosts
        text = text.replace(f.component, "<part>")
    text = text.replace(f.host, "<host>")
    if hosts:
        text = _NAME.sub(lambda m: "<host>" if m.group() in hosts else m.group(), text)
    for pattern, blank in _DETAILS:
        text = pattern.sub(blank, text)
    return text


def fold_parts(components: Sequence[str]) -> str:
    """Components as one text: ``gpu[0-7]``, ``mlx5_[4,9]/1``; ``gpu3 link 5 (+1 more)`` when they do not fold."""
    parts = sorted(set(components))
    if len(parts) == 1:
        return parts[0]
    if not any(" " in p for p in parts):
        return fold(parts)
    return f"{parts[0]} (+{len(parts) - 1} more)"


def group_lines(findings: Iterable[Finding], limit: int = MAX_GROUPS, warn_limit: int = MAX_WARN_GROUPS) -> list[str]:
    """``STATUS check [components] nodeset (n): message``: FAIL and ERROR groups, worst and widest first,
    then WARN groups (their reasons), each with its own limit."""
    findings = list(findings)
    hosts = frozenset(f.host for f in findings)
    buckets: dict[tuple[Status, str, str], list[Finding]] = defaultdict(list)
    for f in findings:
        if f.status in (Status.FAIL, Status.ERROR, Status.WARN):
            buckets[(f.status, f.check, message_kind(f, hosts))].append(f)
    ordered = sorted(buckets.items(), key=lambda kv: (-kv[0][0].rank, -len({f.host for f in kv[1]}), kv[0][1]))
    bad = [(key, group) for key, group in ordered if key[0] is not Status.WARN]
    warn = [(key, group) for key, group in ordered if key[0] is Status.WARN]
    lines = [_group_line(status, check, group) for (status, check, _), group in bad[:limit]]
    lines += [_group_line(status, check, group) for (status, check, _), group in warn[:warn_limit]]
    hidden = max(0, len(bad) - limit) + max(0, len(warn) - warn_limit)
    if hidden:
        lines.append(f"... and {hidden} more groups (summary.md, report.html; -v lists hosts)")
    return lines


def _group_line(status: Status, check: str, group: list[Finding]) -> str:
    hosts = sorted({f.host for f in group})
    messages = list(dict.fromkeys(" ".join(f.message.split()) for f in group))
    more = f" (+{len(messages) - 1} similar)" if len(messages) > 1 else ""
    parts = [f.component for f in group if f.component and f.component != "node"]
    where = f" {fold_parts(parts)}" if parts else ""
    return f"{status.value:<5} {check}{where} {fold_brief(hosts)} ({len(hosts)}): {short_cited(messages[0])}{more}"


def folded_hosts(rows: Iterable[tuple[str, str]]) -> list[tuple[str, str, int]]:
    """``(what, host)`` rows as ``(what, nodeset, count)``, one per distinct ``what`` in first-seen order:
    "was FAIL, now FAIL" for 2,000 hosts is one line."""
    hosts: dict[str, list[str]] = {}
    for what, host in rows:
        hosts.setdefault(what, []).append(host)
    return [(what, fold_brief(names), len(set(names))) for what, names in hosts.items()]


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


def rerun_lines(rerun: dict) -> list[str]:
    """``rerun of RUN:`` and one ``was FAIL, now PASS: nodeset (n)`` line per change."""
    rows = [(f"was {states.get('was')}, now {states.get('now') or 'not swept'}", name)
            for name, states in sorted((rerun.get("hosts") or {}).items()) if isinstance(states, dict)]
    return [f"rerun of {rerun.get('of')}:"] + [f"  {what}: {nodes} ({n})" for what, nodes, n in folded_hosts(rows)]


def summary_lines(results: RunResults, run_dir: Path, verbose: bool = False) -> list[str]:
    summary = results.summary()
    counts = "  ".join(f"{k} {v}" for k, v in summary["by_verdict"].items() if v)
    lines = [f"verdict {summary['verdict']}: {summary['hosts']} hosts  {counts}"]
    if not results.hosts:
        lines.append("  no host was selected: nothing was checked")
    skipped = unchecked_hosts(results)
    if skipped:
        lines.append(f"  not checked (SKIP, exit code stays non-zero): {fold_brief(skipped)} ({len(skipped)})")
    lines += group_lines(results.findings())
    if verbose:
        lines += host_lines(results)
    rerun = results.extra.get("rerun")
    if isinstance(rerun, dict):
        lines += rerun_lines(rerun)
    lines.append(f"run directory: {run_dir}")
    if (run_dir / "report.html").is_file():
        lines.append(f"report: {run_dir / 'report.html'}")
    return [printable(line) for line in lines]  # node output: terminal escapes and bidi overrides shown
