"""Every finding of a run indexed in one pass, for all report formats: per-host tallies, findings by check,
the ones that are not PASS.

    index = index_findings(results.hosts.values())
    index.tallies["gpu001"].worst["gpu.row_remap.pending"]   # (Status.FAIL, 2): two GPUs in the worst status
    index.by_check["nccl.all_reduce.node.busbw"]             # every host's finding of that check, in run order
    index.not_passing                                        # WARN, ERROR, FAIL, SKIP findings, in run order

At 10,000 hosts a run has about 260,000 findings; the formats used to walk all of them once or more
each (the host table, metrics, groups, benchmark bands, the bandwidth table). ``RunDigest.index``
builds this once and they read it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from operator import attrgetter

from healthcheck.core.model import Finding, Status
from healthcheck.store.results import STATUS_VALUES, HostResult

BAD = (Status.FAIL, Status.ERROR, Status.WARN)  # statuses listed in the "what is wrong" views
# ``Status.rank`` and ``Status.value`` are properties: a dict lookup is cheaper, per finding
STATUS_RANK = {s: s.rank for s in Status}
_VALUE = {s: s.value for s in Status}
_STATUS, _CHECK = attrgetter("status"), attrgetter("check")


@dataclass(frozen=True)
class HostTally:
    """One pass over a host's findings that every format shares: findings per status, each check's worst
    status with how many of the check's findings have it, and the first finding of the worst status in
    ``BAD`` (the host table's "worst finding")."""

    counts: dict[str, int]                  # status value -> findings, every status present
    worst: dict[str, tuple[Status, int]]    # check -> (worst status, findings of the check in that status)
    first_bad: Finding | None


def tally(findings: Iterable[Finding]) -> HostTally:
    findings = findings if isinstance(findings, list) else list(findings)
    counts = dict.fromkeys(STATUS_VALUES, 0)
    if list(map(_STATUS, findings)).count(Status.PASS) == len(findings):  # most hosts: C-level counts
        counts[_VALUE[Status.PASS]] = len(findings)
        return HostTally(counts, {check: (Status.PASS, n) for check, n in Counter(map(_CHECK, findings)).items()},
                         None)
    worst: dict[str, tuple[Status, int]] = {}
    first_bad, bad_rank = None, -1
    for f in findings:
        status, rank = f.status, STATUS_RANK[f.status]
        counts[_VALUE[status]] += 1
        seen = worst.get(f.check)
        if seen is None or rank > STATUS_RANK[seen[0]]:
            worst[f.check] = (status, 1)
        elif status is seen[0]:
            worst[f.check] = (status, seen[1] + 1)
        if rank > bad_rank and status in BAD:
            first_bad, bad_rank = f, rank
    return HostTally(counts, worst, first_bad)


@dataclass(frozen=True)
class FindingIndex:
    """Every finding of the run indexed once (one pass over the hosts), for the formats' group-bys.
    Lists keep the run's order (hosts, then each host's findings); treat them as read-only."""

    tallies: dict[str, HostTally]               # host -> its tally
    by_check: dict[str, list[Finding]]          # check -> its findings, PASS included
    not_passing: list[Finding]                  # every finding that is not PASS


def index_findings(hosts: Iterable[HostResult]) -> FindingIndex:
    """The index of ``hosts``' findings. Hosts without a bad finding that tally alike share one ``counts``
    and one ``worst`` (most of a fleet passes the same checks the same way: a copy per host would be
    most of the reports' memory on a large run)."""
    tallies: dict[str, HostTally] = {}
    by_check: defaultdict[str, list[Finding]] = defaultdict(list)
    not_passing: list[Finding] = []
    alike: dict[tuple, HostTally] = {}  # a tally's counts and worst -> the first host's tally with them
    for host in hosts:
        t = tally(host.findings)
        if t.first_bad is None:
            key = (*t.counts.values(), *t.worst.items())
            shared = alike.setdefault(key, t)
            t = shared if shared is t else HostTally(shared.counts, shared.worst, None)
        tallies[host.name] = t
        for f in host.findings:
            by_check[f.check].append(f)
        if t.counts["PASS"] != len(host.findings):
            not_passing.extend(f for f in host.findings if f.status is not Status.PASS)
    return FindingIndex(tallies, dict(by_check), not_passing)
