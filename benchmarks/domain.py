"""What the benchmarks share about the hosts of a job: which inventory host a node-printed name is, and whether a
job spans exactly one NVLink domain (a GB200/GB300 NVL72 rack), so that it is graded against the domain's
expectations rather than the cluster's.

    host_of("r07t03.example", job, ctx)       # "r07t03" (name, address, short name or vars.hostname)
    one_domain(job, ctx)    # DomainScope(True, "18 trays x 4 GPUs = the 72 GPUs of one NVLink domain")

A job is one NVLink domain when its profile says what a domain is (``domain.trays`` and ``domain.gpus``), the job
runs on exactly that many hosts and ranks, and its hosts agree on the domain they belong to: the inventory var
``nvlink_domain`` where any host sets it, else the inventory group. Benchmarks cannot see the probes' cluster UUIDs
(the ``nvl.domain`` fleet check grades those); the inventory says which trays form a rack.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from healthcheck.benchmarks import BenchContext
from healthcheck.core.model import Host


def host_of(printed: str | None, job: Any, ctx: BenchContext) -> str | None:
    """The inventory host a node-printed name refers to (name, address, short name or ``vars.hostname``)."""
    if not printed:
        return None
    for name in job.hosts:
        host = ctx.hosts.get(name)
        known = {name, name.split(".")[0]}
        if host is not None:
            known |= {str(host.address or ""), str(host.vars.get("hostname", ""))}
        if printed in known or printed.split(".")[0] in known:
            return name
    return None


@dataclass(frozen=True)
class DomainScope:
    """Whether a job spans one NVLink domain, and why (or why not) in words."""

    one_domain: bool
    reason: str


def _expected_int(ctx: BenchContext, key: str) -> int | None:
    exp = ctx.profile.expect(key)
    value = exp.value if exp is not None else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def domain_label(host: Host | None) -> str | None:
    """The NVLink domain the inventory puts a host in: ``vars.nvlink_domain``, else its group."""
    if host is None:
        return None
    label = host.vars.get("nvlink_domain")
    return str(label) if label not in (None, "") else host.group


def one_domain(job: Any, ctx: BenchContext) -> DomainScope:
    """Is ``job`` (a multi-node job) exactly one NVLink domain of its profile? See the module docstring."""
    trays, gpus = _expected_int(ctx, "domain.trays"), _expected_int(ctx, "domain.gpus")
    if trays is None or gpus is None:
        return DomainScope(False, f"profile {ctx.profile.name} has no domain.trays/domain.gpus")
    hosts: Sequence[str] = job.hosts
    if len(hosts) != trays or job.ranks != gpus:
        return DomainScope(False, f"{len(hosts)} hosts x {job.ranks} ranks is not one NVLink domain "
                                  f"({trays} trays, {gpus} GPUs)")
    labels = {domain_label(ctx.hosts.get(h)) for h in hosts}
    if len(labels) > 1:
        named = ", ".join(sorted(str(label) for label in labels))
        return DomainScope(False, f"hosts in {len(labels)} inventory domains ({named[:120]})")
    return DomainScope(True, f"{trays} trays x {gpus // trays} GPUs = the {gpus} GPUs of one NVLink domain")
