"""The isolation story for the reports: what was blamed and why, and the tree of jobs that shows it.

    views = isolation_views(digest)        # one per isolation in results.json "isolation"
    views[0].blamed[0].subject             # "gpu0107"
    views[0].roots[0].children[0].label    # "round 2 split: gpu0107 with known-good gpu0109: FAIL 114 GB/s"

Input: results.json's top-level ``isolation`` list (``benchmarks/isolate_report.story``), read as
untrusted (a hand-edited or damaged file gives fewer rows, never an exception). The tree starts at
each failed job that follows up nothing (a screen group, a fabric group); below it, the jobs that
followed it up, rail jobs of one host pair folded into one line ("7 of 8 rails pass"). Passing roots
are counted per round and purpose, not listed: a 1,000-node screen is a hundred groups.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from healthcheck.reports.digest import RunDigest

MAX_ROOTS = 60
MAX_EVIDENCE = 6


@dataclass(frozen=True)
class BlameRow:
    kind: str
    subject: str
    hosts: str
    reason: str
    evidence: tuple[str, ...]
    more: int


@dataclass
class TreeNode:
    label: str
    ok: bool
    job_ids: tuple[str, ...]
    blamed_on: tuple[str, ...] = ()
    left: tuple[str, ...] = ()
    children: list[TreeNode] = field(default_factory=list)


@dataclass
class IsolationView:
    title: str
    summary: str
    stopped: str
    blamed: list[BlameRow]
    suspects: list[BlameRow]
    rounds: list[tuple[int, str]]          # (round, "12 screen (2 failed), 16 split (1 failed)")
    roots: list[TreeNode]
    roots_more: int


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _items(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _blame(raw: Mapping[str, Any]) -> BlameRow:
    listed = raw.get("evidence")
    evidence = [e for e in listed if isinstance(e, str)] if isinstance(listed, list) else []
    return BlameRow(_text(raw.get("kind")), _text(raw.get("subject")), _text(raw.get("hosts")),
                    _text(raw.get("reason")), tuple(evidence[:MAX_EVIDENCE]), max(0, len(evidence) - MAX_EVIDENCE))


def _busbw(value: Any) -> str:
    return f" {value:.4g} GB/s" if isinstance(value, int | float) and not isinstance(value, bool) else ""


def _label(rows: Sequence[Mapping[str, Any]]) -> str:
    first = rows[0]
    subject = _text(first.get("subject"))
    what = f"round {first.get('round')} {_text(first.get('purpose'))}: {subject} ({_text(first.get('hosts'))})"
    if first.get("purpose") in ("split", "confirm", "relink", "pairup"):  # the subject names both hosts
        what = f"round {first.get('round')} {_text(first.get('purpose'))}: {subject}"
    if len(rows) == 1:
        rail = f" on {_text(first.get('rail'))}" if first.get("rail") and " on " not in subject else ""
        return f"{what}{rail}: {'pass' if first.get('ok') else 'FAIL'}{_busbw(first.get('busbw_gbps'))}"
    failed = [r for r in rows if not r.get("ok")]
    detail = "; ".join(f"{_text(r.get('rail'))}{_busbw(r.get('busbw_gbps'))}" for r in failed[:8])
    return (f"{what}: {len(rows) - len(failed)} of {len(rows)} rails pass"
            + (f"; FAIL on {detail}" if failed else ""))


def _node(rows: Sequence[Mapping[str, Any]], children_of: Mapping[str, list[list[Mapping[str, Any]]]],
          depth: int = 0) -> TreeNode:
    blamed = sorted({b for r in rows for b in (r.get("blamed_on") or ()) if isinstance(b, str)})
    left = sorted({x for r in rows if isinstance(r.get("left"), list) for x in r["left"] if isinstance(x, str)})
    node = TreeNode(_label(rows), all(r.get("ok") for r in rows), tuple(_text(r.get("job_id")) for r in rows),
                    tuple(blamed), tuple(left) if not blamed else ())
    if depth < 8:
        for key in dict.fromkeys(_text(r.get("key")) for r in rows):
            node.children += [_node(group, children_of, depth + 1) for group in children_of.get(key, ())]
    return node


def _grouped(rows: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """Rows of one parent, the rail jobs of one host set and purpose together, in run order."""
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for r in rows:
        key = (r.get("round"), r.get("purpose"), r.get("hosts")) if r.get("rail") else (id(r),)
        groups.setdefault(key, []).append(r)
    return list(groups.values())


def _view(story: Mapping[str, Any]) -> IsolationView:
    tree = _items(story.get("tree"))
    by_parent: dict[str, list[Mapping[str, Any]]] = {}
    for r in tree:
        by_parent.setdefault(_text(r.get("parent")), []).append(r)
    children_of = {k: _grouped(v) for k, v in by_parent.items() if k}
    roots = [g for g in _grouped(by_parent.get("", [])) if not all(r.get("ok") for r in g)]
    per_round: dict[int, Counter[str]] = {}
    failed: dict[int, Counter[str]] = {}
    for r in tree:
        n = r.get("round") if isinstance(r.get("round"), int) else 0
        per_round.setdefault(n, Counter())[_text(r.get("purpose"))] += 1
        if not r.get("ok"):
            failed.setdefault(n, Counter())[_text(r.get("purpose"))] += 1
    rounds = [(n, ", ".join(f"{c} {p}" + (f" ({failed[n][p]} failed)" if failed.get(n, {}).get(p) else "")
                            for p, c in counts.items())) for n, counts in sorted(per_round.items())]
    rails = story.get("rails") if isinstance(story.get("rails"), list) else []
    summary = (f"{story.get('hosts')} hosts in {story.get('cells') or 'no known'} leaves, {len(rails)} rails: "
               f"{story.get('rounds')} rounds, {story.get('jobs')} jobs (budget {story.get('budget')}), "
               f"{story.get('cleared')} hosts cleared")
    return IsolationView(title=f"{_text(story.get('benchmark'))} {_text(story.get('test'))} on profile "
                               f"{_text(story.get('profile'))}",
                         summary=summary, stopped=_text(story.get("stopped")),
                         blamed=[_blame(b) for b in _items(story.get("blamed"))],
                         suspects=[_blame(b) for b in _items(story.get("suspects"))], rounds=rounds,
                         roots=[_node(g, children_of) for g in roots[:MAX_ROOTS]],
                         roots_more=max(0, len(roots) - MAX_ROOTS))


def isolation_views(digest: RunDigest) -> list[IsolationView]:
    """One view per isolation of the run (empty when it ran none)."""
    return digest.memo("isolation_views", lambda: [_view(s) for s in _items(digest.document.get("isolation"))])


def tree_lines(node: TreeNode, depth: int = 0) -> list[tuple[int, TreeNode]]:
    """The tree flattened depth first, for text reports."""
    out = [(depth, node)]
    for child in node.children:
        out += tree_lines(child, depth + 1)
    return out
