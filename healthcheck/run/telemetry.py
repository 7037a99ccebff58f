"""GPU field telemetry under benchmark load: sample while a job runs, keep the series, grade them.

    outcome = sample_during(run_dir, job, hosts, transport, profile, options, lambda: launch(job))
    # raw/_telemetry/<job_id>/<host>.out|.err|.rc|.json beside raw/_jobs/<job_id>.out
    findings, observations = merge_telemetry(run_dir, hosts, profiles, findings, observations)

``sample_during`` starts one sampler exec per host of the job (``probes.dcgm_fields.sampler_script``:
``dcgmi dmon -c N -d MS`` sized to the job timeout, else the nvidia-smi loop, else a ``none``
marker), runs the job, touches the sampler's stop file and waits for it. It is on for single-node
jobs (shape ``node``: HPL, NCCL on one node) unless the run option ``telemetry`` is false. Every
series is stored raw, so ``replay_benchmarks`` re-grades it. ``evaluate_telemetry`` is pure:
the at-rest checks of ``probes.dcgm_fields_eval`` over the job window (``telemetry.*``), plus the
SM clock of each GPU against the other GPUs of its node and against the fleet. I/O lives in the
``sample_during``/``store``/``load`` functions only.
"""

from __future__ import annotations

import json
import math
import secrets
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from healthcheck.benchmarks.grade import profile_for
from healthcheck.benchmarks.plan import Job
from healthcheck.core.model import CommandResult, Finding, Host, Status
from healthcheck.core.profiles import Profile
from healthcheck.core.spec import ParseError
from healthcheck.probes.dcgm_fields import field_ids, sampler_script, stop_command, unavailable_finding
from healthcheck.probes.dcgm_fields_eval import (
    CHECKS,
    FieldCheck,
    GpuSummary,
    evaluate_summaries,
    expectation_for,
    grade_check,
    summarize,
    window_s,
)
from healthcheck.probes.dmon_parse import FieldSample, FieldTable, parse_field_samples
from healthcheck.store.jsoncodec import to_jsonable

TELEMETRY_DIR = Path("raw") / "_telemetry"
MAX_SAMPLES = 3600          # a 2 h job is sampled every 2 s rather than every 1 s
MAX_POINTS = 60             # chart points per GPU kept in results.json (the raw series stays in raw/)
SERIES_COLUMNS = ("t_s", "gpu_temp_c", "power_w", "sm_clock_mhz")
STOP_GRACE_S = 60.0         # the sampler outlives the job's own timeout by this much at most
T = TypeVar("T")


def telemetry_on(job: Job, options: Mapping[str, Any]) -> bool:
    return bool(options.get("telemetry", True)) and job.shape in tuple(options.get("telemetry_shapes") or ("node",))


def sampling_plan(job: Job, profile: Profile, options: Mapping[str, Any]) -> tuple[tuple[int, ...], int, int]:
    """(field ids, rounds, interval ms): rounds cover the job timeout plus a grace, at most MAX_SAMPLES."""
    ids = field_ids(options.get("dcgm_field_ids") or profile.setting("dcgm_fields.ids"))
    interval = int(options.get("telemetry_interval_ms") or profile.setting("dcgm_fields.interval_ms", 1000))
    span_ms = (job.timeout_s + STOP_GRACE_S) * 1000.0
    interval = max(interval, 100, math.ceil(span_ms / MAX_SAMPLES))
    return ids, math.ceil(span_ms / interval) + 1, interval


def sample_during(run_dir: Path, job: Job, hosts: Mapping[str, Host], transport: Any, profile: Profile,
                  options: Mapping[str, Any], launch: Callable[[], T]) -> T:
    """Run ``launch()`` with a sampler on each host of ``job``; store every series; return launch()'s value."""
    if not telemetry_on(job, options):
        return launch()
    ids, count, interval = sampling_plan(job, profile, options)
    nodes = [hosts.get(name, Host(name)) for name in job.hosts]
    stops = {n.name: f"/tmp/hc-telemetry-{secrets.token_hex(8)}" for n in nodes}
    timeout = job.timeout_s + 2 * STOP_GRACE_S
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        clock = time.monotonic()
        futures = {n.name: pool.submit(transport.run, n, sampler_script(ids, count, interval, stops[n.name]),
                                       timeout, f"telemetry-{job.job_id}") for n in nodes}
        window = [0.0, 0.0]
        try:
            window[0] = time.monotonic() - clock
            return launch()
        finally:
            window[1] = time.monotonic() - clock
            for n in nodes:  # a failed stop leaves the sampler to end at its own count
                transport.run(n, stop_command(stops[n.name]), 30.0, "telemetry-stop")
            for name, future in futures.items():
                meta = {"job": job.to_json(), "host": name, "field_ids": list(ids), "count": count,
                        "interval_ms": interval, "job_window_s": [round(w, 3) for w in window]}
                store_series(run_dir, job.job_id, name, future.result(), meta)


def store_series(run_dir: Path, job_id: str, host: str, result: CommandResult, meta: Mapping[str, Any]) -> Path:
    """``raw/_telemetry/<job_id>/<host>.out|.err|.rc`` plus ``<host>.json`` (job, plan, window, errors)."""
    folder = Path(run_dir) / TELEMETRY_DIR / job_id
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / host
    stem.with_suffix(".out").write_bytes(result.stdout)
    stem.with_suffix(".err").write_bytes(result.stderr)
    stem.with_suffix(".rc").write_text("" if result.rc is None else f"{result.rc}\n")
    info = {**meta, "rc": result.rc, "timed_out": result.timed_out, "transport_error": result.transport_error,
            "duration_s": round(result.duration_s, 3), "stdout_truncated": result.stdout_truncated}
    stem.with_suffix(".json").write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")
    return stem


@dataclass(frozen=True)
class TelemetrySeries:
    """One host's samples during one job; ``error`` says why there are none to grade."""

    host: str
    job: Job
    table: FieldTable | None
    error: str | None = None
    job_window_s: tuple[float, float] | None = None


def read_series(text: str, host: str, meta: Mapping[str, Any]) -> TelemetrySeries:
    """One stored sampler output and its ``.json`` -> TelemetrySeries (pure)."""
    job = Job.from_json(meta["job"])
    span = meta.get("job_window_s") or ()
    window = (float(span[0]), float(span[1])) if len(span) == 2 else None
    if meta.get("transport_error"):
        return TelemetrySeries(host, job, None, f"the sampler could not run: {meta['transport_error']}")
    try:
        table = parse_field_samples(text)
    except ParseError as exc:
        why = "timed out" if meta.get("timed_out") else f"exit code {meta.get('rc')}"
        return TelemetrySeries(host, job, None, f"sampler output unreadable ({why}): {exc}")
    return TelemetrySeries(host, job, table, None, window)


def load_series(run_dir: Path) -> list[TelemetrySeries]:
    """Every stored series of a run directory, by job then host (empty when none was sampled). A series
    is the host its file names (``<host>.json``): a ``host`` field inside it is not believed (a replayed
    bundle is untrusted input, docs/security.md)."""
    out = []
    for meta_path in sorted((Path(run_dir) / TELEMETRY_DIR).glob("*/*.json")):
        meta = json.loads(meta_path.read_text())
        out_path = meta_path.with_suffix(".out")
        text = out_path.read_bytes().decode("utf-8", errors="replace") if out_path.is_file() else ""
        out.append(read_series(text, meta_path.stem, meta))
    return out


_SAG = ("This GPU ran slower than its peers under the same load: look at its clock event reasons, power "
        "limit and temperature in this window (the telemetry chart), then reseat/replace if it repeats")


def _sag_check(name: str, key: str, reference: float) -> FieldCheck:
    return FieldCheck(name, lambda s, _w: None if s.sm_clock_median_mhz is None or reference <= 0
                      else round(s.sm_clock_median_mhz / reference, 3), (key,), "ratio", _SAG)


def _median_clock(gpus: Sequence[GpuSummary]) -> float | None:
    clocks = [g.sm_clock_median_mhz for g in gpus if g.sm_clock_median_mhz]
    return statistics.median(clocks) if clocks else None


def evaluate_series(s: TelemetrySeries, profile: Profile) -> tuple[list[Finding], tuple[GpuSummary, ...]]:
    """Findings of one host during one job, and its GPU summaries (empty when nothing was sampled)."""
    source = f"telemetry-{s.job.job_id}"
    if s.error is not None or s.table is None:
        return [Finding(host=s.host, check="telemetry.sampler", status=Status.ERROR, source=source,
                        message=f"{s.job.job_id}: {s.error}",
                        remedy="Read raw/_telemetry/<job>/<host>.err; run dcgmi dmon by hand on the node")], ()
    if s.table.unavailable is not None:
        return [unavailable_finding(s.host, "telemetry.sampler", source, s.table.unavailable)], ()
    gpus = summarize(s.table)
    if not gpus:
        return [Finding(host=s.host, check="telemetry.sampler", status=Status.SKIP, source=source,
                        message=f"{s.job.job_id}: no GPU sample during the job (it ended before the first "
                                f"round; {'; '.join(s.table.notes) or 'no rows'})")], ()
    window = window_s(s.table)
    where = f"during {s.job.job_id} ({s.table.rounds()} samples over {window:g} s, {s.table.source})"
    findings = evaluate_summaries(s.host, gpus, profile, prefix="telemetry", source=source, where=where,
                                  window=window, under_load=True)
    node = _median_clock(gpus)
    clocks = {g.gpu: g.sm_clock_median_mhz for g in gpus if g.sm_clock_median_mhz}
    if node is not None and len(clocks) >= 2:
        # each GPU against the median of the OTHER GPUs of its node: with the GPU itself in the median,
        # a 2-GPU node hides a GPU at 45 % of its peer as 62 % of the mean
        others = {gpu: statistics.median([c for o, c in clocks.items() if o != gpu]) for gpu in clocks}
        check = FieldCheck("sm_clock.node_ratio", lambda g, _w: round(g.sm_clock_median_mhz / others[g.gpu], 3)
                           if g.gpu in others and g.sm_clock_median_mhz and others[g.gpu] > 0 else None,
                           ("dcgm_fields.sm_clock_node_ratio",), "ratio", _SAG)
        findings += grade_check(s.host, check, gpus, profile, "telemetry", source,
                                f"{where}; each GPU vs the median of the node's other GPUs, node median "
                                f"{node:g} MHz", window)
    return findings, gpus


def evaluate_telemetry(series: Sequence[TelemetrySeries], profile: Profile) -> list[Finding]:
    """Every series of one profile group: per-host checks, then SM clock vs the fleet (same test)."""
    findings: list[Finding] = []
    fleet: dict[tuple[str, str], list[tuple[TelemetrySeries, tuple[GpuSummary, ...]]]] = {}
    for s in series:
        found, gpus = evaluate_series(s, profile)
        findings += found
        if gpus:
            fleet.setdefault((s.job.benchmark, s.job.test), []).append((s, gpus))
    for group in fleet.values():
        median = _median_clock([g for _, gpus in group for g in gpus])
        if median is None or len(group) < 3:
            continue  # a fleet needs at least three hosts (grading.fleet_outliers)
        check = _sag_check("sm_clock.fleet_ratio", "dcgm_fields.sm_clock_fleet_ratio", median)
        for s, gpus in group:
            findings += grade_check(s.host, check, gpus, profile, "telemetry", f"telemetry-{s.job.job_id}",
                                    f"during {s.job.job_id}; fleet median {median:g} MHz over {len(group)} "
                                    "hosts", window_s(s.table) if s.table else 0.0)
    return findings


def merge_telemetry(run_dir: Path, hosts: Sequence[Host], profiles: Mapping[str, Profile], findings: list[Finding],
                    observations: dict[str, dict[str, Any]]) -> tuple[list[Finding], dict[str, dict[str, Any]]]:
    """Findings and per-host ``telemetry`` observations of the series stored in ``run_dir``, added. Only
    series of the run's ``hosts`` count: a stored series can never add a host to the run."""
    by_name = {h.name: h for h in hosts}
    series = [s for s in load_series(run_dir) if s.host in by_name]
    groups: dict[str, tuple[Profile, list[TelemetrySeries]]] = {}
    for s in series:
        profile = profile_for(by_name.get(s.host, Host(s.host)), profiles)
        groups.setdefault(profile.name, (profile, []))[1].append(s)
    for profile, group in groups.values():
        findings = findings + evaluate_telemetry(group, profile)
        for s in group:
            view = job_view(s, profile)
            observations.setdefault(s.host, {}).setdefault("telemetry", {"jobs": []})["jobs"].append(view)
    return findings, observations


def _buckets(rows: Sequence[FieldSample], interval: float) -> list[list[float | None]]:
    """At most MAX_POINTS ``[t_s, gpu_temp_c, power_w, sm_clock_mhz]`` points: per bucket the first time,
    the highest temperature and power and the lowest SM clock, so a short dip or spike survives."""
    size = max(1, math.ceil(len(rows) / MAX_POINTS))
    points = []
    for i in range(0, len(rows), size):
        chunk = rows[i:i + size]

        def pick(q: str, fn: Callable[[list[float]], float], chunk: Sequence[FieldSample] = chunk) -> float | None:
            values = [v for r in chunk if (v := r.values.get(q)) is not None]
            return round(fn(values), 1) if values else None
        t = chunk[0].t_s if chunk[0].t_s is not None else chunk[0].sample * interval
        points.append([round(t, 2), pick("gpu_temp_c", max), pick("power_w", max), pick("sm_clock_mhz", min)])
    return points


def job_view(s: TelemetrySeries, profile: Profile) -> dict[str, Any]:
    """The JSON a report needs for one host and job: summaries, thinned series, the limits to draw."""
    view: dict[str, Any] = {"job_id": s.job.job_id, "benchmark": s.job.benchmark, "test": s.job.test,
                            "job_window_s": list(s.job_window_s) if s.job_window_s else None, "error": s.error}
    table = s.table
    if table is None or table.unavailable is not None:
        return {**view, "unavailable": table.unavailable if table else None}
    gpus = summarize(table)
    temp = expectation_for(CHECKS[0], gpus[0], profile) if gpus else None
    power = profile.expect("gpu.power_limit_w")
    series: dict[str, list[list[float | None]]] = {}
    for gpu in gpus:
        rows = [r for r in table.samples if r.entity == gpu.gpu]
        series[gpu.gpu] = _buckets(rows, table.interval_s or 1.0)
    return {**view, "source": table.source, "interval_s": table.interval_s, "rounds": table.rounds(),
            "window_s": round(window_s(table), 3), "gpus": to_jsonable(gpus),
            "limits": {"gpu_temp_c": temp.value if temp is not None and temp.op in ("lt", "le") else None,
                       "power_w": power.value if power is not None else None},
            "series_columns": list(SERIES_COLUMNS), "series": series}
