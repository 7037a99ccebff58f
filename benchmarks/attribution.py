"""Blame from pair results: which node, or which link, makes pairs fail.

    results = [PairResult("j1", ("n1", "n2"), ok=False), PairResult("j2", ("n1", "n3"), ok=False),
               PairResult("j3", ("n2", "n3"), ok=True), PairResult("j4", ("n1", "n4"), ok=False, retest=True)]
    nodes, pairs = attribute(results)
    nodes["n1"].verdict      # 'bad': failed with n2 and n3, and again with known-good n4 (retest)

Rules (pure, no I/O):
- a node that fails with ``min_partners`` (2) or more different partners (not counting partners
  already suspected, worst nodes first) is a *suspect*; so is a node whose only pairs failed;
- a *known-good* node passed with at least one partner and failed only with suspects;
- a suspect is declared *bad* only after it failed a retest against a known-good partner; one that
  passes its retest is *flaky*; one that could not be retested stays *suspect* (unconfirmed);
- a failed pair between two nodes that both passed with other partners points at the *link*
  (cable, switch port or route between them), not at either node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from healthcheck.core.model import Finding, Status


@dataclass(frozen=True)
class PairResult:
    job_id: str
    hosts: tuple[str, str]
    ok: bool
    retest: bool = False
    detail: str = ""


@dataclass(frozen=True)
class NodeBlame:
    host: str
    verdict: str  # good | bad | flaky | suspect | unknown
    failed_with: tuple[str, ...]
    passed_with: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class PairBlame:
    job_id: str
    hosts: tuple[str, ...]
    blame: str  # none | node | link | unknown | included (a multi-node job that included a bad node) | rerun
    #           (the same, run again without the bad nodes: the others are graded on that run)
    blamed: tuple[str, ...]
    reason: str


def _partners(results: Iterable[PairResult]) -> dict[str, tuple[set[str], set[str]]]:
    table: dict[str, tuple[set[str], set[str]]] = {}
    for r in results:
        a, b = r.hosts
        for me, other in ((a, b), (b, a)):
            passed, failed = table.setdefault(me, (set(), set()))
            (passed if r.ok else failed).add(other)
    return table


def retest_candidates(results: Sequence[PairResult], min_partners: int = 2) -> tuple[list[str], list[str]]:
    """(suspects to retest, known-good partners) from the first-pass pair results.

    Worst nodes first: a node is a suspect when it failed with ``min_partners`` partners that are
    not themselves suspects, or when all its pairs failed; a known-good node is no suspect, passed
    with someone and failed only with suspects (every node meets the bad one sooner or later).
    """
    table = _partners(r for r in results if not r.retest)
    suspects: list[str] = []
    for host, (passed, failed) in sorted(table.items(), key=lambda kv: (-len(kv[1][1]), kv[0])):
        if len(failed - set(suspects)) >= min_partners or (failed and not passed):
            suspects.append(host)
    good = sorted(h for h, (passed, failed) in table.items()
                  if h not in suspects and passed and failed <= set(suspects))
    return sorted(suspects), good


def attribute(results: Sequence[PairResult], min_partners: int = 2) -> tuple[dict[str, NodeBlame], list[PairBlame]]:
    """Per node verdicts and per failed-pair blame, using retests to confirm suspects."""
    first = [r for r in results if not r.retest]
    suspects, good = retest_candidates(first, min_partners)
    table = _partners(first)
    good_set = set(good)
    retests_of: dict[str, list[PairResult]] = {}
    for r in results:
        if r.retest:
            for host in dict.fromkeys(r.hosts):
                if _other(r, host) in good_set:
                    retests_of.setdefault(host, []).append(r)
    nodes: dict[str, NodeBlame] = {}
    for host, (passed, failed) in sorted(table.items()):
        nodes[host] = _node_verdict(host, passed, failed, host in suspects, retests_of.get(host, []))
    pairs = [_pair_blame(r, nodes) for r in results if not r.ok]
    return nodes, pairs


def _other(result: PairResult, host: str) -> str:
    a, b = result.hosts
    return b if a == host else a


def _node_verdict(host: str, passed: set[str], failed: set[str], suspect: bool,
                  retests: list[PairResult]) -> NodeBlame:
    fw, pw = tuple(sorted(failed)), tuple(sorted(passed))
    failed_text = f"failed with {', '.join(fw)}" if fw else ""
    if not suspect:  # passed with someone and failed with fewer than min_partners: the node is fine
        reason = f"passed with {', '.join(pw)}" + (f"; {failed_text} (blamed on the partner or link)" if fw else "")
        return NodeBlame(host, "good", fw, pw, reason)
    bad_retests = [r for r in retests if not r.ok]
    if bad_retests:
        partner = _other(bad_retests[0], host)
        return NodeBlame(host, "bad", fw, pw, f"{failed_text}; the retest with known-good {partner} failed too")
    if retests:
        partner = _other(retests[0], host)
        return NodeBlame(host, "flaky", fw, pw, f"{failed_text}, but passed the retest with known-good {partner}")
    return NodeBlame(host, "suspect", fw, pw, f"{failed_text}; no known-good partner to confirm")


def _pair_blame(result: PairResult, nodes: dict[str, NodeBlame]) -> PairBlame:
    a, b = result.hosts
    verdicts = {h: nodes[h].verdict if h in nodes else "unknown" for h in result.hosts}
    for level in ("bad", "suspect"):
        blamed = tuple(h for h in result.hosts if verdicts[h] == level)
        if blamed:
            return PairBlame(result.job_id, result.hosts, "node", blamed,
                             "; ".join(f"{h} {nodes[h].reason}" for h in blamed))
    cleared = [h for h in result.hosts if h in nodes and set(nodes[h].passed_with) - {_other(result, h)}]
    if len(cleared) == 2 and "flaky" not in verdicts.values():
        return PairBlame(result.job_id, result.hosts, "link", (),
                         f"{a} and {b} both passed with other partners: the link or route between them")
    return PairBlame(result.job_id, result.hosts, "unknown", result.hosts,
                     "not enough pairs to tell the node from the link")


_NODE_REMEDY = ("This node fails with several partners and again with a known-good one: drain it and "
                "check its NICs/HCAs (ibstat, error counters, firmware), GPUs and cables")
_SUSPECT_REMEDY = ("Not proven bad yet (too few partners, or passed its retest): rerun the pairs with a "
                   "known-good partner (healthcheck bench --plan acceptance) before taking the node out")
_LINK_REMEDY = ("Both nodes pass with other partners: check the cables, switch ports and routing between "
                "these two nodes (ibdiagnet, port counters on the path)")


def attribution_findings(base: str, nodes: dict[str, NodeBlame], pairs: Sequence[PairBlame],
                         component: str = "node") -> list[Finding]:
    """Per node (``<base>.node``) and per link (``<base>.link``) findings from an attribution."""
    status = {"good": Status.PASS, "bad": Status.FAIL, "flaky": Status.WARN, "suspect": Status.WARN,
              "unknown": Status.WARN}
    out = [Finding(host=h, check=f"{base}.node", status=status[n.verdict], component=component,
                   value=len(n.failed_with), expected="0 failing partners", unit="partners",
                   message=f"{h}: {n.verdict}: {n.reason}", source="attribution",
                   remedy=None if n.verdict == "good" else _NODE_REMEDY if n.verdict == "bad"
                   else _SUSPECT_REMEDY) for h, n in sorted(nodes.items())]
    for pair in pairs:
        if pair.blame == "link":
            out += [Finding(host=h, check=f"{base}.link", status=Status.WARN, component=f"link {'-'.join(pair.hosts)}",
                            message=f"link {'-'.join(pair.hosts)}: {pair.reason}", source=pair.job_id,
                            remedy=_LINK_REMEDY) for h in pair.hosts]
    return out


# Checks a link blame never softens: wrong results, aborted or hung jobs stay FAIL/ERROR on both nodes.
KEEP_ON_LINK = (".data", ".run", ".job", ".ranks", ".residual")


def included_blame(job_id: str, hosts: Sequence[str], nodes: Mapping[str, NodeBlame],
                   rerun: str | None = None) -> PairBlame | None:
    """Blame for a multi-node (cluster) job that included nodes the pair attribution found bad;
    ``rerun`` names the run of the same job without them, which grades the other nodes."""
    bad = tuple(h for h in hosts if h in nodes and nodes[h].verdict == "bad")
    if not bad:
        return None
    return PairBlame(job_id, tuple(hosts), "rerun" if rerun else "included", bad,
                     rerun or "; ".join(f"{h} {nodes[h].reason}" for h in bad))


def apply_blame(findings: Sequence[Finding], pairs: Sequence[PairBlame]) -> list[Finding]:
    """Re-state a failed pair's findings on a host the attribution cleared (PASS) or for a link (WARN).

    For a link, only performance findings become WARN; data corruption (``.data``), aborted runs
    and hung jobs keep their status (with the link named in the message). A cluster job that
    included a bad node is inconclusive for the other nodes: their performance findings become WARN,
    or SKIP once the job was run again without the bad node (that run grades them).
    """
    by_job = {p.job_id: p for p in pairs}
    out = []
    for f in findings:
        pair = by_job.get(f.source or "")
        if pair is None or f.status not in (Status.FAIL, Status.ERROR, Status.WARN):
            out.append(f)
        elif pair.blame == "node" and f.host not in pair.blamed:
            out.append(replace(f, status=Status.PASS, remedy=None,
                               message=f"{f.message} [attributed to {', '.join(pair.blamed)}: {pair.reason}]"))
        elif pair.blame == "link":
            status = f.status if f.check.endswith(KEEP_ON_LINK) else Status.WARN
            out.append(replace(f, status=status, message=f"{f.message} [attributed to the link: {pair.reason}]"))
        elif pair.blame == "included" and f.host not in pair.blamed:
            status = f.status if f.check.endswith(KEEP_ON_LINK) else Status.WARN
            out.append(replace(f, status=status, message=f"{f.message} [inconclusive for {f.host}: the job included "
                                                         f"{', '.join(pair.blamed)}, bad in the pair tests]"))
        elif pair.blame == "rerun" and f.host not in pair.blamed:
            out.append(replace(f, status=Status.SKIP, remedy=None,
                               message=f"{f.message} [not graded for {f.host}: the job included "
                                       f"{', '.join(pair.blamed)}, bad in the pair tests; graded on its rerun "
                                       f"{pair.reason}]"))
        else:
            out.append(f)
    return out
