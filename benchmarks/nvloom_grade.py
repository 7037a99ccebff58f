"""Grading of one nvloom job (``benchmarks/nvloom.py`` parses it): which trays ran, what aborted, and per GPU
the bandwidth of the quick test and of the gpu-to-rack sampling.

    evaluate_nvloom(job, result, ctx)
    # nvloom.ranks                    per tray: its 4 ranks ran (FAIL on a tray with none: missing from the run)
    # nvloom.domain.gpus              per rack (rackGuid = chassis serial): GPUs measured, against domain.gpus
    # nvloom.bisect_device_to_device_write_sm          per GPU against nvloom.unidir_gbps (bands)
    # nvloom.bisect_device_to_device_write_sm.domain   per GPU against the median of the domain's GPUs
    # nvloom.<testcase>.path          a copy that measured nothing (N/A)

A slow GPU pair shows twice in the quick test (each GPU copies to the other, half a domain away) and in every
sample of the gpu-to-rack row of the slow GPU; the domain comparison finds it without any profile value
(``perf.sibling_ratio``, else the project default in ``benchmarks/perfgrade.py``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from healthcheck.benchmarks import BenchContext
from healthcheck.benchmarks.domain import host_of
from healthcheck.benchmarks.perfgrade import DEFAULT_SIBLINGS, SIBLING_KEY, Reading, profile_findings
from healthcheck.core.grading import GradingError, finding_from_expectation, grade, short_source
from healthcheck.core.model import Finding, Status

REMEDY = {
    "copy": "A slow or dead NVLink path of this GPU across the domain: check its fabric findings (fabric.health."
            "bandwidth, nvlink.links), the NVLink switch tray and cable cartridge of its slot (NMX), then reset the "
            "GPU or drain the tray; rerun nvloom's gpu-to-rack suite (-s gpu-to-rack) to confirm",
    "ranks": "A tray of the job printed no rank: check that it is in the IMEX domain (nvidia-imex-ctl -N), that "
             "mpirun reached it (hostfile, slots = GPUs per tray) and that its GPUs are visible",
    "run": "nvloom stopped: the CUDA error names the tray and GPU; a failed multi-node memory import points at "
           "IMEX (imex findings) or the fabric (fabric.state), an unknown testcase at the nvloom_cli version",
}
_KEYS = {"bidir": "nvloom.bidir_gbps", "unidir": "nvloom.unidir_gbps"}


def evaluate_nvloom(job: Any, result: Any, ctx: BenchContext) -> list[Finding]:
    ranks = {p.rank: (host_of(p.host, job, ctx), p) for p in result.processes}
    out = _error_findings(job, result, ctx) + _rank_findings(job, result, ranks) + _domain_findings(job, result, ctx,
                                                                                                   ranks)
    for test in result.testcases:
        out += _testcase_findings(job, test, ranks, ctx, aborted=bool(result.errors))
    return out


def _error_findings(job: Any, result: Any, ctx: BenchContext) -> list[Finding]:
    if not result.errors:
        return []
    blamed: dict[str, list[str]] = {}
    for error in result.errors:
        host = host_of(error.host, job, ctx)
        where = f" (GPU {error.device})" if error.device is not None and error.device >= 0 else ""
        for h in [host] if host else job.hosts:
            blamed.setdefault(h, []).append(error.text + where)
    named = {h for e in result.errors if (h := host_of(e.host, job, ctx))}
    out = [Finding(host=h, check="nvloom.run", status=Status.FAIL if h in named else Status.ERROR,
                   component=job.component, value=texts[0][:200], remedy=REMEDY["run"], source=job.job_id,
                   message=f"{job.prefix}nvloom aborted{' on ' + h if h in named else ''}: {'; '.join(texts[:2])}")
           for h, texts in blamed.items()]
    if named:
        out += [Finding(host=h, check="nvloom.run", status=Status.ERROR, component=job.component, source=job.job_id,
                        message=f"{job.prefix}not measured: nvloom aborted on {', '.join(sorted(named))}")
                for h in job.hosts if h not in blamed]
    return out


def _rank_findings(job: Any, result: Any, ranks: dict[int, tuple[str | None, Any]]) -> list[Finding]:
    if not result.processes:
        return [] if result.errors else [
            Finding(host=h, check="nvloom.ranks", status=Status.ERROR, component=job.component, source=job.job_id,
                    remedy=REMEDY["ranks"], message=f"{job.prefix}no 'Process' line: nvloom printed no rank")
            for h in job.hosts]
    per_host: dict[str, list[int]] = {h: [] for h in job.hosts}
    for host, process in ranks.values():
        if host is not None:
            per_host[host].append(process.device)
    expected = job.ranks_per_host
    out = []
    for host, devices in per_host.items():
        status = Status.PASS if len(devices) == expected else Status.FAIL
        what = (f"no nvloom rank ran on {host}: the tray is missing from the run ({len(ranks)} of {job.ranks} "
                f"ranks printed)" if not devices else f"{len(devices)} ranks on {host} (GPUs "
                f"{', '.join(map(str, sorted(devices)))}), expected {expected}")
        out.append(Finding(host=host, check="nvloom.ranks", status=status, component=job.component,
                           value=len(devices), expected=f"== {expected}", unit="ranks", source=job.job_id,
                           remedy=REMEDY["ranks"] if status is not Status.PASS else None,
                           message=f"{job.prefix}{what}"))
    return out


def _domain_findings(job: Any, result: Any, ctx: BenchContext,
                     ranks: dict[int, tuple[str | None, Any]]) -> list[Finding]:
    """GPUs measured per rack (nvloom's rackGuid is the chassis serial) against the profile's ``domain.gpus``."""
    exp = ctx.profile.expect("domain.gpus")
    if exp is None or not result.processes:
        return []
    racks: dict[str, list[str | None]] = {}
    for host, process in ranks.values():
        racks.setdefault(process.rack, []).append(host)
    out = []
    for rack, hosts in sorted(racks.items()):
        for h in sorted({h for h in hosts if h is not None}):
            finding = finding_from_expectation(h, "nvloom.domain.gpus", exp, len(hosts), source=job.job_id,
                                               remedy=REMEDY["ranks"], component=f"rack {rack}", profile=ctx.profile)
            out.append(finding)
    return out


def _testcase_findings(job: Any, test: Any, ranks: dict[int, tuple[str | None, Any]], ctx: BenchContext,
                       aborted: bool) -> list[Finding]:
    check = f"nvloom.{test.name}"
    if test.waived:
        return [Finding(host=h, check=check, status=Status.SKIP, source=job.job_id, component=job.component,
                        message=f"{test.name} waived by nvloom (not supported here, e.g. no EGM or a single rank)")
                for h in job.hosts]
    if test.matrix is None or not test.matrix.rows:
        why = "nvloom aborted before its result" if aborted else "no result matrix (killed during the testcase?)"
        return [Finding(host=h, check=check, status=Status.ERROR, source=job.job_id, component=job.component,
                        remedy=REMEDY["run"], message=f"{test.name}: {why}") for h in job.hosts]
    kind = "bisect" if test.name.startswith("bisect_") else "gpu_to_rack" if test.name.startswith("gpu_to_rack_") \
        else None
    if kind is None:
        return [Finding(host=h, check=check, status=Status.SKIP, source=job.job_id, component=job.component,
                        message=f"{test.name}: measured, not graded (only the bisect quick test and gpu-to-rack "
                                "are graded per GPU)") for h in job.hosts]
    readings, missing = _readings(kind, test, ranks)
    key = _KEYS["bidir" if "_bidir_" in test.name else "unidir"]
    out = _missing_findings(job, check, key, missing, ctx)
    for host in job.hosts:
        mine = [r for h, r in readings if h == host]
        if mine:
            out += profile_findings(host, check, key, mine, ctx.profile, source=job.job_id, remedy=REMEDY["copy"],
                                    what=test.name, unit="GB/s")
    return out + _domain_median_findings(job, f"{check}.domain", test.name, readings, ctx)


def _readings(kind: str, test: Any, ranks: dict[int, tuple[str | None, Any]]) -> tuple[
        list[tuple[str, Reading]], list[tuple[str, str]]]:
    """(host, reading) per measured cell whose rank maps to a host of the job, and (host, component) per N/A."""
    readings, missing = [], []
    columns = test.matrix.columns
    for label, values in test.matrix.rows:
        src, _, dst = label.partition("->")
        if not src.isdigit() or (kind == "bisect" and not dst.isdigit()):
            continue
        host, process = ranks.get(int(src), (None, None))
        if host is None:
            continue
        for column, value in zip(columns, values, strict=True):
            component = f"gpu{process.device}" + (f"->rack {column}" if kind == "gpu_to_rack" and len(columns) > 1
                                                  else "")
            if value is None:
                missing.append((host, component))
                continue
            readings.append((host, Reading(component, value, _peer(kind, dst, column, ranks, int(src)))))
    return readings, missing


def _peer(kind: str, dst: str, column: str, ranks: dict[int, tuple[str | None, Any]], src: int) -> str:
    if kind == "gpu_to_rack":
        return f"(rank {src}, median of its samples in rack {column})"
    peer_host, peer = ranks.get(int(dst), (None, None))
    where = f" on {peer_host} gpu{peer.device}" if peer_host is not None and peer is not None else ""
    return f"(rank {src} -> rank {dst}{where})"


def _missing_findings(job: Any, check: str, key: str, missing: Sequence[tuple[str, str]],
                      ctx: BenchContext) -> list[Finding]:
    expected = ctx.profile.expect(key) is not None
    return [Finding(host=h, check=f"{check}.path", component=c, source=job.job_id, value="N/A",
                    status=Status.FAIL if expected else Status.SKIP, remedy=REMEDY["copy"] if expected else None,
                    expected=f"a measured copy ({key} in profile {ctx.profile.name})" if expected else None,
                    message=f"{c}: nvloom printed N/A (the copy measured no bandwidth)"
                            + ("" if expected else f"; no expectation {key} in profile {ctx.profile.name}"))
            for h, c in missing]


def _domain_median_findings(job: Any, check: str, name: str, readings: Sequence[tuple[str, Reading]],
                            ctx: BenchContext) -> list[Finding]:
    """Each GPU's bandwidth against the median of the other GPUs of the job: the non-passing ones, else one PASS
    per tray."""
    if len(readings) < 2:
        return []
    exp = ctx.profile.expect(SIBLING_KEY) or DEFAULT_SIBLINGS
    values = [r.value for _, r in readings]
    bad: dict[str, list[Finding]] = {}
    for i, (host, r) in enumerate(readings):
        median = statistics.median(values[:i] + values[i + 1:])
        ratio = r.value / median if median > 0 else 1.0
        try:
            status = grade(exp, round(ratio, 3))
        except (GradingError, TypeError, ValueError) as exc:
            return [Finding(host=h, check=check, status=Status.ERROR, source=job.job_id,
                            message=f"cannot grade {check} against {exp.key}: {exc}") for h in job.hosts]
        if status is not Status.PASS:
            bad.setdefault(host, []).append(Finding(
                host=host, check=check, component=r.component, status=status, value=round(ratio, 3), unit="ratio",
                expected=f">= {exp.value}" + (f" (WARN below {exp.warn})" if exp.warn is not None else ""),
                remedy=REMEDY["copy"], source=job.job_id,
                message=f"{r.component} {r.label}: {name} {r.value:.1f} GB/s = {ratio:.0%} of the median of the "
                        f"domain's other {len(values) - 1} measurements ({median:.1f} GB/s) (source: "
                        f"{short_source(exp.source)})"))
    out = [f for findings in bad.values() for f in findings]
    for host in job.hosts:
        mine = [r for h, r in readings if h == host]
        if host not in bad and mine:
            out.append(Finding(host=host, check=check, status=Status.PASS, source=job.job_id,
                               value=round(min(r.value for r in mine), 2), unit="GB/s",
                               message=f"{name}: all {len(mine)} measurements of this tray at least "
                                       f"{_pct(exp.warn if exp.warn is not None else exp.value)} of the median of "
                                       "the domain's other GPUs"))
    return out


def _pct(fraction: Any) -> str:
    try:
        return f"{float(fraction):.0%}"
    except (TypeError, ValueError):
        return str(fraction)


def nvloom_metric(result: Any) -> float | None:
    """The median per-GPU bandwidth of the first graded testcase (the report's headline number)."""
    for test in result.testcases:
        if test.matrix is not None and test.name.startswith(("bisect_", "gpu_to_rack_")):
            values = [v for _, row in test.matrix.rows for v in row if v is not None]
            if values:
                return float(statistics.median(values))
    return None
