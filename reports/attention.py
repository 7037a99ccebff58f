"""The top of the report: which nodes FAIL, ERROR or WARN, as folded nodesets, each listed node linked
to its details with the checks that put it there.

    attention(digest, detailed={"h100-node03"})
    # [{"status": "FAIL", "count": 1, "nodeset": "h100-node03", "href": "#status=FAIL", "unlisted": 0,
    #   "hosts": [{"name": "h100-node03", "href": "#h-h100-node03", "checks": ["gpu.clock_events", ...],
    #              "more": 21}]}]

A reader signing an acceptance report sees the bad nodes first, before any chart. Past ``HOSTS_LINKED``
nodes a status shows its nodeset and points at the host table filtered on it.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from healthcheck.core.model import Status
from healthcheck.reports.digest import RunDigest, fold

HOSTS_LINKED = 12    # nodes of one status listed by name, each linked to its details
CHECKS_NAMED = 4     # checks named per listed node (the rest counted)
NAMED = (Status.FAIL, Status.ERROR, Status.WARN)


def attention(digest: RunDigest, detailed: Collection[str]) -> list[dict[str, Any]]:
    """FAIL, ERROR and WARN nodes, worst first: the folded nodeset, the first nodes with their checks in
    that status, each linked to its detail section (``#h-NAME``, or the host table when it has none)."""
    by_verdict = digest.hosts_by_verdict()
    out = []
    for status in NAMED:
        names = by_verdict[status]
        if not names:
            continue
        hosts = []
        for name in names[:HOSTS_LINKED]:
            checks = sorted(c for c, (s, _) in digest.tallies[name].worst.items() if s is status)
            hosts.append({"name": name, "href": f"#h-{name}" if name in detailed else f"#host={name}",
                          "checks": checks[:CHECKS_NAMED], "more": max(0, len(checks) - CHECKS_NAMED)})
        out.append({"status": status.value, "count": len(names), "nodeset": fold(names),
                    "href": f"#status={status.value}", "hosts": hosts, "unlisted": len(names) - len(hosts)})
    return out
