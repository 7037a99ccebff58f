"""The report's fabric counters section: the fleet's worst ports by rate, and counters before/after each job.

    fabric = fabric_context(digest, detailed={"node07"})
    fabric["heat"][0]   # {"host": "node07", "href": "#h-node07", "port": "mlx5_1 ens2f0np0", "source": "ethtool",
                        #  "counter": "tx_prio3_pause", "per_hour": 3416815.9, "total": 41001791,
                        #  "median_per_hour": 147.3, "times_median": 23191.0}
    fabric["jobs"][0]   # {"job_id": "nccl-...-pair-node06-node07", "window_s": 95.0, "rows": [{"host": "node07",
                        #  "port": ..., "counter": ..., "before": ..., "after": ..., "during": ..., "per_gb": ...,
                        #  "status": "WARN"}, ...], "hosts": 2, "unlisted": 0}

The heat list reads the rates probe's counters of every host (fault and congestion counters, traffic volume
left out, as the host's "fabric counters" panel) over the node's uptime, worst first, with the fleet median
of the same counter for scale. A run works it out in its fleet stage (``FabricHeat``, a fleet view of
``reports.fleet_views``) into results.json ``fabric_heat``; a report of a run without that section works it
out here from the observation store. The job tables read the ``fabric_jobs`` observation the run layer adds per host
(``healthcheck/run/fabric_jobs.py``): only the counters that moved during the job, each with the status of its
finding. Node text (ports, counters) stays text: the templates escape and ``visible`` it.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from healthcheck.reports.builtin_panels import FABRIC_FAMILIES, TABLE, is_traffic
from healthcheck.reports.digest import RunDigest
from healthcheck.reports.panels import MAX_ROWS, Panel, Table, panel

HEAT_MAX = 20        # ports listed in the fleet heat list
JOB_ROWS_MAX = 40    # moved counters listed per job
FABRIC_PROBES = ("rates", "fabric_jobs")  # the observations the views read: counters since boot, per job


def fabric_context(digest: RunDigest, detailed: Collection[str] = ()) -> dict[str, Any]:
    """The heat list and the per-job tables (both empty when the run read no fabric counters). The heat
    list is results.json's ``fabric_heat`` where the run's fleet stage wrote it (``FabricHeat``), else it is
    worked out here from the observation store."""
    def compute() -> dict[str, Any]:
        table = stored_heat(digest.results.extra.get(FABRIC_HEAT.name))
        stored = _stored_fabric(digest)
        probes = ("fabric_jobs",) if table is not None else FABRIC_PROBES
        rates: list[tuple[str, Any]] = []
        jobs: dict[str, dict[str, Any]] = {}
        for host, obs in digest.iter_observations(probes, stored=[p for p in stored if p in probes]):
            if table is None:
                rates.append((host.name, obs.get("rates")))
            _add_jobs(jobs, host.name, obs.get("fabric_jobs"))
        return {**(table if table is not None else heat_table(rates)), "jobs": _job_views(digest, jobs)}
    out = dict(digest.memo("fabric_context", compute))
    link = {name: f"#h-{name}" if name in detailed else f"#host={name}" for name in _names(out)}
    out["heat"] = [{**r, "href": link[r["host"]]} for r in out["heat"]]
    out["jobs"] = [{**j, "rows": [{**r, "href": link[r["host"]]} for r in j["rows"]]} for j in out["jobs"]]
    return out


def heat_table(rates: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """The heat list of (host, ``rates`` observation) pairs: the ``HEAT_MAX`` worst (port, counter) rates,
    each with the fleet median of its counter, how many there were and how many hosts had an uptime."""
    heat: list[dict[str, Any]] = []
    values: dict[tuple[str, str], list[float]] = {}
    timed = 0
    for host, observation in rates:
        rows = _host_rates(host, observation, values)
        timed += rows is not None
        heat += rows or []
    medians = {key: statistics.median(v) for key, v in values.items()}
    heat.sort(key=lambda r: (-r["per_hour"], r["host"], r["port"], r["counter"]))
    for row in heat[:HEAT_MAX]:
        median = medians[(row["source"], row["counter"])]
        row["median_per_hour"] = round(median, 1)
        row["times_median"] = round(row["per_hour"] / median, 1) if median > 0 else None
    return {"heat": heat[:HEAT_MAX], "heat_total": len(heat), "timed_hosts": timed}


_HEAT_ROW = {"host": str, "port": str, "source": str, "counter": str, "per_hour": (int, float), "total": int,
             "median_per_hour": (int, float), "times_median": (int, float, type(None))}


def stored_heat(section: Any) -> dict[str, Any] | None:
    """results.json's ``fabric_heat`` as the report shows it; None when absent or not of its shape (a run
    written before it, or edited): then the heat list is worked out from the store."""
    if not isinstance(section, Mapping) or not isinstance(section.get("heat"), list):
        return None
    counts = section.get("heat_total"), section.get("timed_hosts")
    if not all(type(n) is int and n >= 0 for n in counts):
        return None
    rows = section["heat"][:HEAT_MAX]
    if not all(isinstance(r, Mapping) and all(isinstance(r.get(k), t) and not isinstance(r.get(k), bool)
                                              for k, t in _HEAT_ROW.items()) for r in rows):
        return None
    return {"heat": [{k: r[k] for k in _HEAT_ROW} for r in rows], "heat_total": counts[0], "timed_hosts": counts[1]}


@dataclass(frozen=True)
class FabricHeat:
    """results.json ``fabric_heat``: the heat list over every host, worked out in the run's fleet stage
    (``run.post``) from what it keeps of each host's ``rates`` (``keep``: the uptime and the fault and
    congestion counters), so no report reads the fleet's counters back from the observation store."""

    name: str = "fabric_heat"
    reads: tuple[str, ...] = ("rates",)

    def keep(self, probe: str, observation: Any) -> Any:
        """Of a host's ``rates``: its uptime and the counters of the families the heat list ranks (the
        families' own objects, not copies: what ``fleet.fabric_counters`` keeps is the same objects, sent
        and held once)."""
        if not isinstance(observation, Mapping) or not isinstance(observation.get("counters"), Mapping):
            return None
        counters = observation["counters"]
        return {"uptime_s": observation.get("uptime_s"),
                "counters": {family: counters[family] for family in FABRIC_FAMILIES if family in counters}}

    def table(self, observations: Mapping[str, Mapping[str, Any]], hosts: Mapping[str, Any],
              profiles: Mapping[str, Any]) -> dict[str, Any]:
        return {self.name: heat_table((name, obs.get("rates")) for name, obs in observations.items())}


FABRIC_HEAT = FabricHeat()


def _stored_fabric(digest: RunDigest) -> tuple[str, ...]:
    """The fabric probes the run can have stored: ``rates`` when it graded them (or does not say what it
    graded), ``fabric_jobs`` when a host ran benchmark jobs; () reads nothing from the store."""
    ran = digest.run.get("probes")
    rates = not isinstance(ran, list) or "rates" in ran
    jobs = any("benchmarks" in host.observations for host in digest.results.hosts.values())
    return tuple(p for p, stored in zip(FABRIC_PROBES, (rates, jobs), strict=True) if stored)


def _names(context: Mapping[str, Any]) -> set[str]:
    return {r["host"] for r in context["heat"]} | {r["host"] for j in context["jobs"] for r in j["rows"]}


def _host_rates(host: str, rates: Any, values: dict[tuple[str, str], list[float]]) -> list[dict[str, Any]] | None:
    """The host's non-zero fault/congestion counters per hour since boot (every port's rate, zero or not, joins
    ``values`` for the fleet median); None without counters or an uptime."""
    if not isinstance(rates, Mapping) or not isinstance(rates.get("counters"), Mapping):
        return None
    uptime = rates.get("uptime_s")
    if isinstance(uptime, bool) or not isinstance(uptime, int | float) or uptime <= 0:
        return None
    hours, out = uptime / 3600, []
    for family, label in FABRIC_FAMILIES.items():
        ports = rates["counters"].get(family)
        for port, counters in ports.items() if isinstance(ports, Mapping) else ():
            for name, value in counters.items() if isinstance(counters, Mapping) else ():
                if type(value) is not int or value < 0 or is_traffic(name):
                    continue
                values.setdefault((label, name), []).append(value / hours)
                if value > 0:
                    out.append({"host": host, "port": str(port), "source": label, "counter": str(name),
                                "per_hour": round(value / hours, 1), "total": value})
    return out


def _add_jobs(jobs: dict[str, dict[str, Any]], host: str, observed: Any) -> None:
    """One host's ``fabric_jobs`` entries merged into ``jobs`` by job id (malformed entries and rows skipped:
    before, after and growth must be integers)."""
    entries = observed.get("jobs") if isinstance(observed, Mapping) else None
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, Mapping) or not isinstance(entry.get("job_id"), str):
            continue
        job = jobs.setdefault(entry["job_id"], {"job_id": entry["job_id"], "check": str(entry.get("check") or ""),
                                                "window_s": entry.get("window_s"), "rows": [], "hosts": 0})
        job["hosts"] += 1
        for row in entry.get("rows") if isinstance(entry.get("rows"), list) else ():
            if isinstance(row, list) and len(row) == 7 and all(type(v) is int for v in row[3:6]):
                port, family, counter, before, after, during, per_gb = row
                per_gb = per_gb if isinstance(per_gb, int | float) and not isinstance(per_gb, bool) else None
                job["rows"].append({"host": host, "port": str(port), "family": str(family), "counter": str(counter),
                                    "before": before, "after": after, "during": during, "per_gb": per_gb})


def _job_views(digest: RunDigest, jobs: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Jobs in id order, each with its moved counters worst first (per GB, then growth) and their status."""
    out = []
    for _, job in sorted(jobs.items()):
        rows = job["rows"]
        for row in rows:
            row["status"] = _status(digest, job, row)
        rows.sort(key=lambda r: (-(r["per_gb"] if isinstance(r["per_gb"], int | float) else -1.0),
                                 -(r["during"] if isinstance(r["during"], int) else 0), r["host"], r["port"]))
        out.append({**job, "rows": rows[:JOB_ROWS_MAX], "unlisted": max(0, len(rows) - JOB_ROWS_MAX)})
    return out


def _status(digest: RunDigest, job: Mapping[str, Any], row: Mapping[str, Any]) -> str:
    """The status of the finding on this counter during this job, or "" when it was not graded apart."""
    check = f"{job['check']}.fabric.{row['family']}.{row['counter']}"
    for f in digest.index.by_check.get(check, ()):
        if f.host == row["host"] and f.component == row["port"] and f"during job {job['job_id']} " in f.message:
            return f.status.value
    return ""


@panel("fabric_jobs")
def fabric_jobs_panel(obs: Any) -> Panel | None:
    """The host's counters that moved during each of its benchmark jobs (the ``fabric_jobs`` observation)."""
    jobs: dict[str, dict[str, Any]] = {}
    _add_jobs(jobs, "", obs)
    rows = [[job_id, r["port"], f"{r['family']}.{r['counter']}", r["before"], r["after"], r["during"],
             "" if not isinstance(r["per_gb"], int | float) else f"{r['per_gb']:,.2f}"]
            for job_id, job in sorted(jobs.items()) for r in job["rows"]]
    if not rows:
        return None
    table = Table(columns=["job (raw/_fabric/)", "port", "counter", "before", "after", "during the job",
                           "per GB moved"], rows=rows[:MAX_ROWS])
    return Panel(f"fabric counters during benchmark jobs ({len(rows)} moved)", TABLE, table,
                 note=f"{len(jobs)} jobs" + (f"; {len(rows) - MAX_ROWS} more in results.json" if len(rows) > MAX_ROWS
                                             else ""))
