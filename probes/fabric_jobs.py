"""Fabric counters around a benchmark job: per port deltas, normalised by the bytes the port moved.

    SNAPSHOT                                # the node command: ib-sysfs dump, then ethtool -S of RoCE netdevs
    deltas = port_deltas(parse_snapshot(before_text), parse_snapshot(after_text))
    moved_rows(before, after, deltas)       # [[port, family, counter, before, after, grown, per_gb], ...]
    grade_job_deltas("nccl.all_reduce", "job-id", {"node07": deltas, ...}, 95.0, profile)
    # -> Finding(host="node07", check="nccl.all_reduce.fabric.eth.tx_prio3_pause", component="mlx5_1 ens2f0np0",
    #            status=WARN, message="... 41,000,000 pause frames during the job, 9,111 per GB moved, 23x the
    #            median ...")

Counters with a profile rate (``rate.<family>.<counter>``: link_downed, symbol_error, rnr_nak_retry_err,
...) are graded as a rate over the job's duration. Counters without a public threshold (pause frames,
CNPs, ECN marks, out-of-sequence, discards: ``fabric_counters.fleet_graded``) are compared per GB the
port moved (IB: ``port_xmit_data`` + ``port_rcv_data``, 4-byte words; RoCE: ``rx_bytes_phy`` +
``tx_bytes_phy``) across every port of the job: above ``fabric_outlier_factor`` times the job's median,
with at least ``fabric_outlier_min_count`` events, is WARN. A counter that went backwards is left out.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.grading import grade_value
from healthcheck.core.model import Finding, Status
from healthcheck.core.profiles import Profile
from healthcheck.core.spec import ParseError
from healthcheck.probes.ethtool_parse import parse_ethtool_stats
from healthcheck.probes.fabric_counters import fleet_graded, info
from healthcheck.probes.ib_parse import parse_ib_sysfs
from healthcheck.probes.infiniband import IB_SYSFS
from healthcheck.probes.rates import ETHTOOL_STATS

SNAPSHOT = f"{IB_SYSFS}; {ETHTOOL_STATS}"
_IB_END = "# ib-sysfs end"
MIN_PORTS = 3  # ports of a job compared with each other
Snapshot = dict[str, dict[str, dict[str, int]]]  # family -> port -> counter -> value


def parse_snapshot(text: str) -> Snapshot:
    """The ``ib`` and ``ib_hw`` counters of every port and the ``eth`` counters of every RoCE netdev."""
    ib_text, marker, rest = text.partition(_IB_END)
    ports = [p for d in parse_ib_sysfs(ib_text + marker) for p in d.ports] if marker or "# ib-sysfs: no " in \
        ib_text else None
    if ports is None:
        raise ParseError("fabric snapshot has no complete ib-sysfs dump", text[-200:])
    eth = parse_ethtool_stats(rest) if rest.strip() else None
    out: Snapshot = {"ib": {p.name: dict(p.counters) for p in ports if p.counters},
                     "ib_hw": {p.name: dict(p.hw_counters) for p in ports if p.hw_counters}}
    if eth:
        out["eth"] = eth
    return out


@dataclass(frozen=True)
class PortDelta:
    family: str
    port: str
    counters: Mapping[str, int]   # counter -> growth during the job (counters that went backwards left out)
    bytes_moved: int | None       # bytes through the port during the job, when the source counts them


def port_deltas(before: Snapshot, after: Snapshot) -> list[PortDelta]:
    out = []
    for family, ports in sorted(after.items()):
        for port, values in sorted(ports.items()):
            old = (before.get(family) or {}).get(port)
            if old is None:
                continue
            grown = {k: v - old[k] for k, v in values.items() if k in old and v >= old[k]}
            out.append(PortDelta(family, port, grown, None))
    moved = {d.port: _bytes(d) for d in out if d.family in ("ib", "eth")}
    return [PortDelta(d.family, d.port, d.counters, moved.get(d.port)) for d in out]


def moved_rows(before: Snapshot, after: Snapshot, deltas: Sequence[PortDelta]) -> list[list[Any]]:
    """``[port, family, counter, before, after, grown, per_gb]`` of each documented fault or congestion counter
    (``fabric_counters.CATALOG``) that grew during the job; per_gb is None where the port's bytes are not
    counted. Traffic volume counters are left out (they move in every job)."""
    rows: list[list[Any]] = []
    for d in deltas:
        for counter, grown in sorted(d.counters.items()):
            if grown > 0 and info(d.family, counter) is not None:
                per_gb = round(grown / (d.bytes_moved / 1e9), 3) if d.bytes_moved else None
                rows.append([d.port, d.family, counter, before[d.family][d.port][counter],
                             after[d.family][d.port][counter], grown, per_gb])
    return rows


def _bytes(delta: PortDelta) -> int | None:
    keys = ("port_xmit_data", "port_rcv_data") if delta.family == "ib" else ("rx_bytes_phy", "tx_bytes_phy")
    if not all(k in delta.counters for k in keys):
        return None
    total = sum(delta.counters[k] for k in keys)
    return total * 4 if delta.family == "ib" else total  # IBA data counters count 4-byte words


def grade_job_deltas(base: str, job_id: str, by_host: Mapping[str, list[PortDelta]], duration_s: float,
                     profile: Profile) -> list[Finding]:
    """Rates during the job against the profile, per-GB outliers across the job's ports, one PASS per host."""
    out: list[Finding] = []
    hours = max(duration_s, 1.0) / 3600
    for host, deltas in sorted(by_host.items()):
        for d in deltas:
            for counter, grown in sorted(d.counters.items()):
                exp = profile.expect(f"rate.{d.family}.{counter}")
                if exp is None or not grown:
                    continue
                grade = grade_value(f"rate.{d.family}.{counter}", exp, round(grown / hours, 3), remedy="",
                                    profile=profile)
                if grade.status is not Status.PASS:
                    out.append(_finding(base, job_id, host, d, counter, grown, grade.status, duration_s,
                                        f"{grown / hours:,.1f}/h over the job, expected {exp.op} {exp.value}/h "
                                        f"(source: {exp.source})"))
    out += _outliers(base, job_id, by_host, duration_s)
    flagged = {f.host for f in out}
    for host, deltas in sorted(by_host.items()):
        if host not in flagged and deltas:
            out.append(Finding(host=host, check=f"{base}.fabric", component=job_id, status=Status.PASS,
                               value=len(deltas), source="fabric-snapshot",
                               message=f"{len(deltas)} port counter sets during job {job_id} ({duration_s:.0f} s): "
                                       f"no error rate over the profile's, no port above "
                                       f"{DEFAULTS.fabric_outlier_factor:g}x the job's median per GB"))
    return out


def _outliers(base: str, job_id: str, by_host: Mapping[str, list[PortDelta]], duration_s: float) -> list[Finding]:
    values: dict[tuple[str, str], dict[tuple[str, str], tuple[float, PortDelta]]] = {}
    for host, deltas in by_host.items():
        for d in deltas:
            if not d.bytes_moved:
                continue
            for counter, grown in d.counters.items():
                if fleet_graded(d.family, counter):
                    per_gb = grown / (d.bytes_moved / 1e9)
                    values.setdefault((d.family, counter), {})[(host, d.port)] = (per_gb, d)
    out = []
    for (_, counter), per_port in sorted(values.items()):
        if len(per_port) < MIN_PORTS:
            continue
        median = statistics.median(v for v, _ in per_port.values())
        for (host, _), (per_gb, d) in sorted(per_port.items(), key=lambda kv: kv[0]):
            grown = d.counters[counter]
            if per_gb > DEFAULTS.fabric_outlier_factor * median and grown >= DEFAULTS.fabric_outlier_min_count:
                times = f"{per_gb / median:,.0f}x the job's median {median:,.2f} per GB" if median > 0 else \
                    "where the job's median is 0"
                out.append(_finding(base, job_id, host, d, counter, grown, Status.WARN, duration_s,
                                    f"{per_gb:,.1f} per GB moved ({d.bytes_moved / 1e9:,.1f} GB), {times} over "
                                    f"{len(per_port)} ports"))
    return out


def _finding(base: str, job_id: str, host: str, d: PortDelta, counter: str, grown: int, status: Status,
             duration_s: float, why: str) -> Finding:
    entry = info(d.family, counter)
    unit = entry.unit if entry else "events"
    return Finding(host=host, check=f"{base}.fabric.{d.family}.{counter}", component=d.port, status=status,
                   value=grown, unit=unit, source="fabric-snapshot",
                   message=f"{d.port}: {grown:,} {counter} ({unit}) during job {job_id} ({duration_s:.0f} s): {why}"
                           + (f": {entry.meaning}" if entry else ""),
                   remedy=entry.remedy if entry else None)
