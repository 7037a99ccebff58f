"""HPL: xhpl ``HPL.out``, HPCC's HPL section (+ its Summary and PingPong), HPL-NVIDIA and HPL-MxP.

    result = parse_hpl(text)
    result.tests[0].gflops, result.tests[0].residual_passed     # 8706.0, True
    result.gpu_warnings                                         # per-GPU clock / GPU_FP warnings

Written against ../shared/corpus/hpl (HPLinpack 2.0-2.3, Intel MKL xhpl, HPCC 1.4.2/1.5.0,
HPL-NVIDIA 1.0.0 and 24.x incl. the ``Gflops ( per GPU)`` column, HPL-MxP result block) and a real
Debian ``hpcc`` 1.5.0 run. A result row (``WR11C2R4 N NB P Q Time Gflops``) opens a test; the next
``||Ax-b||... = value ...... PASSED|FAILED`` line closes it (``nan``/``-nan`` is kept as NaN and
graded FAIL). HPCC output is parsed from its ``Begin/End of HPL section`` only (PTRANS prints the
same summary words). ANSI colour codes are stripped. A log that has the banner but ends before a
result (a killed run) parses with ``complete=False`` (a result block whose every test has its
residual verdict counts as complete even when ``End of Tests.`` was cut off): the evaluator makes it ERROR. Text with
neither a banner nor a result raises ``ParseError``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from healthcheck.benchmarks import NUMBER_RE, BenchContext, BenchmarkSpec, Program, bench_setting, finite, register
from healthcheck.benchmarks.bands import band_finding
from healthcheck.benchmarks.launcher_errors import LauncherError, launcher_remedy, parse_launcher_errors
from healthcheck.benchmarks.nccl import host_of
from healthcheck.benchmarks.plan import Job
from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import Finding, Status
from healthcheck.core.profiles import Profile
from healthcheck.core.spec import ParseError


@dataclass(frozen=True)
class HplTest:
    variant: str
    n: int
    nb: int
    p: int
    q: int
    time_s: float | None
    gflops: float
    gflops_per_gpu: float | None = None
    residual: float | None = None
    residual_passed: bool | None = None


@dataclass(frozen=True)
class HplGpuWarning:
    """An HPL-NVIDIA ``!!!! WARNING`` line: slow clock during the run, or a slow GPU in the system test."""

    rank: int
    host: str
    gpu: str
    kind: str
    value: float
    unit: str


@dataclass(frozen=True)
class HpccPingPong:
    """HPCC's b_eff PingPong over all rank pairs (Summary section; bandwidth in GB/s = 1e9 B/s)."""

    max_latency_us: float
    avg_latency_us: float | None
    min_bandwidth_gbps: float
    avg_bandwidth_gbps: float | None


@dataclass(frozen=True)
class HplResult:
    flavor: str
    version: str | None
    tests: tuple[HplTest, ...]
    complete: bool
    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    gpu_warnings: tuple[HplGpuWarning, ...] = ()
    progress_pct: float | None = None
    hpcc_success: bool | None = None
    pingpong: HpccPingPong | None = None
    launcher_errors: tuple[LauncherError, ...] = ()
    summary: Mapping[str, str] = field(default_factory=dict)


_ANSI = re.compile(r"\x1b\[[0-9;]*m|\[0;31m|\[0m")
_NUM = NUMBER_RE
_ROW = re.compile(rf"^(?P<tv>W[A-Z0-9]+)\s+(?P<n>\d+)\s+(?P<nb>\d+)\s+(?P<p>\d+)\s+(?P<q>\d+)\s+"
                  rf"(?P<time>{_NUM})\s+(?P<gflops>{_NUM})(?:\s*\(\s*(?P<per>{_NUM})\s*\))?\s*$")
_RESIDUAL = re.compile(r"^\s*\|\|Ax-b\|\|_oo\s*/\s*\(\s*(?:eps|EPS).*=\s*(?P<value>\S+)\s+\.+\s+"
                       r"(?P<verdict>PASSED|FAILED)")
_MXP_SIZE = re.compile(r"N\s*=\s*(\d+),\s*NB\s*=\s*(\d+),\s*NPROW\s*=\s*(\d+),\s*NPCOL\s*=\s*(\d+)")
_MXP_GFLOPS = re.compile(rf"^\s*GFLOPS\s*=\s*({_NUM}),\s*per GPU\s*=\s*({_NUM})")
_CLOCK = re.compile(r"!!!! WARNING:\s+Rank:\s*(\d+)\s*:\s*(\S+)\s*:\s*GPU\s+(\S+)\s+Clock:\s*(\d+)\s*MHz")
_SYSTEST = re.compile(rf"!!!! WARNING:\s+RANK:\s*(\d+)\s+HOST:\s*(\S+)\s+GPU:\s*(\S+)\s+(\w+)\s+\[\s*([^\]]*?)\s*\]"
                      rf"(?:\s*@NB=\s*\d+)?\s+({_NUM})")
_PROGRESS = re.compile(r"Prog=\s*([\d.]+)%")
_ERROR = re.compile(r"^(HPL ERROR:.*|.*\*\*\* Process received signal \*\*\*|.*Signal: .*\(\d+\))$")
_WARNING = re.compile(r"^HPL warning\[.*$")
_KV = re.compile(r"^(\w+)=(\S+)$")


def parse_hpl(text: str) -> HplResult:
    """Parse one HPL / HPCC / HPL-NVIDIA / HPL-MxP run (stdout of rank 0, or hpccoutf.txt)."""
    text = _ANSI.sub("", text)
    flavor, version = _flavor(text)
    section = _between(text, "Begin of HPL section.", "End of HPL section.") if flavor == "hpcc" else text
    tests: list[HplTest] = []
    errors: list[str] = []
    warnings: list[str] = []
    gpu_warnings: list[HplGpuWarning] = []
    progress = None
    mxp: dict[str, Any] = {}
    for line in section.splitlines():
        line = line.rstrip()
        if m := _ROW.match(line.strip()):
            tests.append(HplTest(variant=m["tv"], n=int(m["n"]), nb=int(m["nb"]), p=int(m["p"]), q=int(m["q"]),
                                 time_s=finite(m["time"], line), gflops=finite(m["gflops"], line),
                                 gflops_per_gpu=finite(m["per"], line) if m["per"] else None))
        elif m := _RESIDUAL.match(line):
            residual = _float(m["value"])
            mxp.update(residual=residual, passed=m["verdict"] == "PASSED")
            if tests and tests[-1].residual_passed is None and not line.lstrip().startswith("||Ax-b||_oo /"):
                tests[-1] = _with_residual(tests[-1], residual, m["verdict"] == "PASSED")
        elif m := _MXP_SIZE.search(line):
            mxp.update(n=int(m[1]), nb=int(m[2]), p=int(m[3]), q=int(m[4]))
        elif (m := _MXP_GFLOPS.match(line)) and "residual" in mxp:
            tests.append(HplTest(variant="MxP", n=mxp.get("n", 0), nb=mxp.get("nb", 0), p=mxp.get("p", 0),
                                 q=mxp.get("q", 0), time_s=None, gflops=finite(m[1], line),
                                 gflops_per_gpu=finite(m[2], line), residual=mxp["residual"],
                                 residual_passed=mxp["passed"]))
        elif m := _CLOCK.search(line):
            gpu_warnings.append(HplGpuWarning(int(m[1]), m[2], m[3], "clock", float(m[4]), "MHz"))
        elif m := _SYSTEST.search(line):
            gpu_warnings.append(HplGpuWarning(int(m[1]), m[2], m[3], m[4], float(m[6]), m[5]))
        elif m := _PROGRESS.search(line):
            progress = float(m[1])
        elif _ERROR.match(line.strip()):
            errors.append(line.strip())
        elif _WARNING.match(line.strip()):
            warnings.append(" ".join(line.split()))
    launcher = parse_launcher_errors(text)
    summary = _summary(text) if flavor == "hpcc" else {}
    if flavor == "unknown" and not tests and not errors and not launcher:
        raise ParseError("no HPL banner, result row or error in the output", text[:200])
    if flavor in ("hpl", "unknown") and any(t.gflops_per_gpu is not None and t.variant != "MxP" for t in tests):
        flavor = "hpl-nvidia"  # a snippet without its banner: only HPL-NVIDIA prints the "( per GPU)" column
    complete = "End of Tests." in section or (bool(tests) and all(t.residual_passed is not None for t in tests))
    return HplResult(flavor=flavor, version=version, tests=tuple(tests), complete=complete,
                     errors=tuple(dict.fromkeys(errors)), warnings=tuple(dict.fromkeys(warnings)),
                     gpu_warnings=tuple(gpu_warnings), progress_pct=progress,
                     hpcc_success=(summary["Success"] == "1") if "Success" in summary else None,
                     pingpong=_pingpong(summary), launcher_errors=launcher, summary=summary)


def _flavor(text: str) -> tuple[str, str | None]:
    for flavor, pattern in (("hpcc", r"HPC Challenge Benchmark version (\S+)"),
                            ("hpl-mxp", r"HPL MxP Result()"),  # before HPL-NVIDIA: the MxP container prints both
                            ("hpl-nvidia", r"HPL-NVIDIA (\S+)\s+--"),
                            ("hpl", r"HPLinpack (\S+)\s+--")):
        if m := re.search(pattern, text):
            return flavor, m[1] or None
    if _ROW.search(text.replace("\r", "")) or re.search(r"^T/V\s+N\s+NB", text, re.M):
        return "hpl", None
    return "unknown", None


def _between(text: str, start: str, end: str) -> str:
    begin = text.find(start)
    if begin < 0:
        return ""
    stop = text.find(end, begin)
    return text[begin:] if stop < 0 else text[begin:stop]


def _float(token: str) -> float:
    try:
        return float(token)
    except ValueError:
        return math.nan


def _with_residual(test: HplTest, residual: float, passed: bool) -> HplTest:
    return HplTest(**{**test.__dict__, "residual": residual, "residual_passed": passed})


def _summary(text: str) -> dict[str, str]:
    body = _between(text, "Begin of Summary section.", "End of Summary section.")
    return {m[1]: m[2] for m in map(_KV.match, body.splitlines()) if m}


def _pingpong(summary: Mapping[str, str]) -> HpccPingPong | None:
    if "MaxPingPongLatency_usec" not in summary or "MinPingPongBandwidth_GBytes" not in summary:
        return None
    if _float(summary["MaxPingPongLatency_usec"]) < 0:  # -1: one rank, nothing to ping
        return None
    avg_lat, avg_bw = summary.get("AvgPingPongLatency_usec"), summary.get("AvgPingPongBandwidth_GBytes")
    return HpccPingPong(max_latency_us=_float(summary["MaxPingPongLatency_usec"]),
                        avg_latency_us=_float(avg_lat) if avg_lat else None,
                        min_bandwidth_gbps=_float(summary["MinPingPongBandwidth_GBytes"]),
                        avg_bandwidth_gbps=_float(avg_bw) if avg_bw else None)


_REMEDY = {
    "residual": "HPL computed a wrong answer: the node corrupts data (GPU/CPU/memory). Drain it, run "
                "dcgmi diag -r 3 / a CPU and memory test, check Xid, ECC and MCE logs, replace the part",
    "run": "HPL crashed on the node: read the error (CUBLAS/CUDA init, out of memory, signal); check the "
           "GPUs (nvidia-smi), the HPL.dat grid (P x Q = ranks) and the rank-to-GPU mapping",
    "job": "The HPL job was cut short (timeout, kill, launcher failure): check the launcher output, raise "
           "the job timeout or lower N",
    "gflops": "Below the expected fraction of peak: check GPU clocks and throttle reasons, power caps, "
              "thermals, PCIe links and the HPL.dat tuning (N, NB, P x Q)",
    "gpu": "HPL-NVIDIA flagged this GPU (low clock or slow in the system test): check its throttle "
           "reasons, power, temperature and PCIe link (nvidia-smi -q -d PERFORMANCE,CLOCK)",
    "fleet": "This node is slower than the fastest node of the fleet: compare clocks, power limits, "
             "BIOS settings and firmware with the fastest node",
    "pingpong": "Check the interconnect between these nodes (port state, rate, error counters)",
    "above_peak": "Check which HPL flavour ran (xhpl/HPCC and HPL-NVIDIA are FP64, HPL-MxP mixed precision) and "
                  "that the profile's hpl.node.gflops / hpl.xhpl.node.gflops / hpl.mxp.node.gflops holds the Rpeak "
                  "of that precision for the whole node; otherwise attach the output to a healthcheck bug",
}


def _job_findings(job: Job, check: str, status: Status, message: str, remedy: str | None,
                  **kw: Any) -> list[Finding]:
    return [Finding(host=h, check=check, status=status, component=job.component, message=message,
                    remedy=remedy, source=job.job_id, **kw) for h in job.hosts]


def evaluate_hpl(job: Job, result: HplResult, ctx: BenchContext) -> list[Finding]:
    """Residual (correctness) first, then the run's completeness, GFLOPS, GPU warnings, PingPong."""
    out: list[Finding] = []
    for test in result.tests:
        where = f"{job.prefix}N={test.n} NB={test.nb} {test.p}x{test.q}"
        if test.residual_passed is None:
            continue
        ok = test.residual_passed and test.residual is not None and math.isfinite(test.residual)
        out += _job_findings(job, "hpl.residual", Status.PASS if ok else Status.FAIL,
                             f"{where}: scaled residual {test.residual:g} {'PASSED' if ok else 'FAILED'}",
                             None if ok else _REMEDY["residual"], value=_json_float(test.residual),
                             expected="PASSED (< threshold, finite)")
    out += _run_findings(job, result)
    passed = [t for t in result.tests if t.residual_passed and t.residual is not None
              and math.isfinite(t.residual)]
    for flavour in dict.fromkeys(row_flavour(result, t) for t in passed):
        best = max((t for t in passed if row_flavour(result, t) == flavour), key=lambda t: t.gflops)
        out += _gflops_findings(job, flavour, best, ctx)
    out += _gpu_findings(job, result, ctx)
    if result.pingpong is not None:
        out += _pingpong_findings(job, result.pingpong, ctx)
    return out


@dataclass(frozen=True)
class HplFlavour:
    """How one HPL flavour is graded: its own expectation (each against the peak of its own precision)."""

    key: str      # profile expectation
    check: str    # check id prefix (hpl.node.gflops, hpl.<shape>.gflops_per_node)
    label: str


FLAVOURS = {
    "hpl-nvidia": HplFlavour("hpl.node.gflops", "hpl", "HPL-NVIDIA FP64 GFLOPS per node"),
    "hpl": HplFlavour("hpl.xhpl.node.gflops", "hpl", "xhpl FP64 GFLOPS per node"),
    "hpcc": HplFlavour("hpl.xhpl.node.gflops", "hpl", "HPCC HPL FP64 GFLOPS per node"),
    "hpl-mxp": HplFlavour("hpl.mxp.node.gflops", "hpl.mxp", "HPL-MxP mixed-precision GFLOPS per node"),
}


def row_flavour(result: HplResult, test: HplTest) -> str:
    """The flavour a result row is graded as: HPL-MxP rows by their own block, xhpl when unrecognised."""
    if test.variant == "MxP":
        return "hpl-mxp"
    return result.flavor if result.flavor in FLAVOURS and result.flavor != "hpl-mxp" else "hpl"


def _gflops_findings(job: Job, flavour: str, best: HplTest, ctx: BenchContext) -> list[Finding]:
    """GFLOPS per node against the flavour's own Rpeak; far above it is ERROR, never "excellent"."""
    how = FLAVOURS[flavour]
    per_node = best.gflops / len(job.hosts)
    check = f"{how.check}.node.gflops" if job.shape == "node" else f"{how.check}.{job.shape}.gflops_per_node"
    exp = ctx.profile.expect(how.key)
    note = f" (cluster {best.gflops:g} GFLOPS over {len(job.hosts)} nodes)" if len(job.hosts) > 1 else ""
    ceiling = float(bench_setting(ctx.profile, ctx.options, "hpl.above_peak_ratio", DEFAULTS.hpl_above_peak_ratio))
    if exp is not None and isinstance(exp.value, int | float) and exp.value > 0 and per_node > ceiling * exp.value:
        return _job_findings(
            job, check, Status.ERROR, f"{job.prefix}{how.label} {per_node:.1f} = {per_node / exp.value:.0%} of "
            f"Rpeak {exp.value:g} {exp.unit or ''} ({how.key}): above the theoretical peak, so the expectation is "
            f"for another precision or flavour, or the output was misparsed{note}", _REMEDY["above_peak"],
            value=round(per_node, 3), expected=f"<= {ceiling:.0%} of {exp.value:g} (Rpeak, {exp.source})",
            unit=exp.unit)
    return [band_finding(h, check, exp, per_node, source=job.job_id, remedy=_REMEDY["gflops"],
                         profile=ctx.profile, what=how.label, component=job.component, key=how.key,
                         note=note, of="Rpeak") for h in job.hosts]


def _json_float(value: float | None) -> float | str | None:
    return value if value is None or math.isfinite(value) else str(value)


def _run_findings(job: Job, result: HplResult) -> list[Finding]:
    timeouts = [e for e in result.launcher_errors if e.timeout]
    if timeouts:
        return _job_findings(job, "hpl.job", Status.ERROR, f"{job.prefix}job hung: {timeouts[0].message}",
                             _REMEDY["job"])
    if result.errors:
        return _job_findings(job, "hpl.run", Status.FAIL,
                             f"{job.prefix}HPL aborted: {'; '.join(result.errors[:3])}", _REMEDY["run"],
                             value=result.errors[0])
    if not result.tests and result.launcher_errors and result.flavor == "unknown":  # HPL never started
        return _job_findings(job, "hpl.job", Status.ERROR, f"{job.prefix}launch failed: "
                             f"{'; '.join(e.message for e in result.launcher_errors[:3])}",
                             launcher_remedy(result.launcher_errors, _REMEDY["job"]))
    if not result.tests:
        where = f" at Prog= {result.progress_pct}%" if result.progress_pct is not None else ""
        launcher = f"; {result.launcher_errors[0].message}" if result.launcher_errors else ""
        return _job_findings(job, "hpl.job", Status.ERROR,
                             f"{job.prefix}run ended{where} without a result line (truncated){launcher}",
                             launcher_remedy(result.launcher_errors, _REMEDY["job"]))
    missing = [t for t in result.tests if t.residual_passed is None]
    if missing:
        return _job_findings(job, "hpl.job", Status.ERROR,
                             f"{job.prefix}output ends after the result of N={missing[0].n} without its "
                             "residual check (truncated)", _REMEDY["job"])
    return [] if not result.warnings else _job_findings(
        job, "hpl.warning", Status.WARN, f"{job.prefix}{'; '.join(result.warnings[:3])}", _REMEDY["gflops"])


def _gpu_findings(job: Job, result: HplResult, ctx: BenchContext) -> list[Finding]:
    grouped: dict[tuple[str, str, str, str], list[HplGpuWarning]] = {}
    for warning in result.gpu_warnings:
        host = host_of(warning.host, job, ctx)
        for h in [host] if host else job.hosts:
            grouped.setdefault((h, warning.host, warning.gpu, warning.kind), []).append(warning)
    out = []
    for (h, printed, gpu, kind), items in sorted(grouped.items()):
        low = min(w.value for w in items)
        ranks = ", ".join(str(r) for r in sorted({w.rank for w in items}))
        what = f"{len(items)} low-clock warnings, lowest {low:g} MHz" if kind == "clock" else \
            f"slow in the system test: {kind} {low:g} {items[0].unit}"
        out.append(Finding(host=h, check="hpl.gpu_warning", status=Status.WARN, component=f"gpu {gpu}",
                           value=low, unit=items[0].unit, source=job.job_id, remedy=_REMEDY["gpu"],
                           message=f"gpu {gpu} on {printed} (rank {ranks}): {what}"))
    return out


def _pingpong_findings(job: Job, pingpong: HpccPingPong, ctx: BenchContext) -> list[Finding]:
    """HPCC's PingPong against ``hpcc.pingpong.*`` or else the interconnect's IMB PingPong expectations
    (the same MPI ping-pong between two ranks; HPCC reports the worst pair)."""
    out = []
    for check, keys, value, what in (
            ("hpcc.pingpong.latency", ("hpcc.pingpong.latency_us", "imb.pingpong.latency_us"),
             pingpong.max_latency_us, "max PingPong latency"),
            ("hpcc.pingpong.bandwidth", ("hpcc.pingpong.bandwidth_gbps", "imb.pingpong.bandwidth_gbps"),
             pingpong.min_bandwidth_gbps, "min PingPong bandwidth")):
        key = next((k for k in keys if ctx.profile.expect(k) is not None), keys[0])
        out += [band_finding(h, check, ctx.profile.expect(key), value, source=job.job_id,
                             key=" or ".join(keys) if key == keys[0] and ctx.profile.expect(key) is None else key,
                             remedy=_REMEDY["pingpong"], profile=ctx.profile, what=what,
                             component=job.component) for h in job.hosts]
    return out


def hpl_metric(result: HplResult) -> float | None:
    good = [t.gflops for t in result.tests if t.residual_passed and t.residual is not None
            and math.isfinite(t.residual)]
    return max(good) if good else None


def fleet_hpl(outcomes: Sequence[tuple[Job, HplResult]], ctx: BenchContext) -> list[Finding]:
    """A node more than ``hpl.fleet_slow_fraction`` (5 %) slower than the fastest node is WARN."""
    slow = float(bench_setting(ctx.profile, ctx.options, "hpl.fleet_slow_fraction", DEFAULTS.hpl_fleet_slow_fraction))
    values = {job.hosts[0]: (metric, job.job_id) for job, result in outcomes
              if job.shape == "node" and (metric := hpl_metric(result)) is not None}
    if len(values) < 2:
        return []
    best_host, (best, _) = max(values.items(), key=lambda kv: kv[1][0])
    out = []
    for host, (value, source) in sorted(values.items()):
        status = Status.WARN if value < (1 - slow) * best else Status.PASS
        out.append(Finding(host=host, check="hpl.node.fleet", status=status, value=round(value, 3),
                           expected=f">= {1 - slow:.0%} of the best node ({best_host}: {best:g} GFLOPS)",
                           unit="GFLOPS", source=source, remedy=_REMEDY["fleet"] if status is Status.WARN else None,
                           message=f"HPL {value:g} GFLOPS = {value / best:.1%} of the fastest node "
                                   f"{best_host} ({best:g} GFLOPS)"))
    return out


def process_grid(ranks: int) -> tuple[int, int]:
    """P x Q = ranks with P <= Q, as square as possible (2 -> 1x2, 4 -> 2x2, 8 -> 2x4)."""
    p = max(i for i in range(1, math.isqrt(ranks) + 1) if ranks % i == 0)
    return p, ranks // p


def hpl_dat(n: int, nb: int, p: int, q: int, *, hpcc: bool = False) -> str:
    """HPL.dat (or hpccinf.txt: the same 31 lines + PTRANS lines), results to stdout (device 6)."""
    lines = ["HPLinpack benchmark input file", "Innovative Computing Laboratory, University of Tennessee",
             "HPL.out      output file name (if any)", "6            device out (6=stdout,7=stderr,file)",
             "1            # of problems sizes (N)", f"{n}         Ns", "1            # of NBs",
             f"{nb}          NBs", "0            PMAP process mapping (0=Row-,1=Column-major)",
             "1            # of process grids (P x Q)", f"{p}            Ps", f"{q}            Qs",
             "16.0         threshold", "1            # of panel fact", "2            PFACTs (0=left, 1=Crout, 2=Right)",
             "1            # of recursive stopping criterium", "4            NBMINs (>= 1)",
             "1            # of panels in recursion", "2            NDIVs", "1            # of recursive panel fact.",
             "1            RFACTs (0=left, 1=Crout, 2=Right)", "1            # of broadcast",
             "1            BCASTs (0=1rg,1=1rM,2=2rg,3=2rM,4=Lng,5=LnM)", "1            # of lookahead depth",
             "1            DEPTHs (>=0)", "2            SWAP (0=bin-exch,1=long,2=mix)",
             "64           swapping threshold", "0            L1 in (0=transposed,1=no-transposed) form",
             "0            U  in (0=transposed,1=no-transposed) form", "1            Equilibration (0=no,1=yes)",
             "8            memory alignment in double (> 0)"]
    if hpcc:
        lines += ["##### This line (no. 32) is ignored (it serves as a separator). ######",
                  "0                      \t\tNumber of additional problem sizes for PTRANS",
                  "1200 10000 30000        \tvalues of N",
                  "0                       \tnumber of additional blocking sizes for PTRANS",
                  "40 9 8 13 13 20 16 32 64       \tvalues of NB"]
    return "\n".join(lines) + "\n"


def hpl_ranks_per_host(profile: Profile, shape: str, options: Mapping[str, Any] | None = None) -> int:
    options = options or {}
    ranks = bench_setting(profile, options, "hpl.ranks_per_node")
    if ranks is None and bench_setting(profile, options, "hpl.flavor", "hpl") in ("hpl-nvidia", "hpl-mxp"):
        exp = profile.expect("gpu.count")
        ranks = exp.value if exp is not None and isinstance(exp.value, int) else 1
    return max(1, int(ranks or 1))


def hpl_program(job: Job, profile: Profile, options: Mapping[str, Any]) -> Program:
    """xhpl / hpcc / HPL-NVIDIA with a generated input file; N grows with sqrt(nodes) for multi-node jobs."""
    flavor = bench_setting(profile, options, "hpl.flavor", "hpl")
    nb = int(bench_setting(profile, options, "hpl.nb", 192))
    n_node = int(bench_setting(profile, options, "hpl.n", 20000))
    n = int(n_node * math.sqrt(len(job.hosts))) // nb * nb or nb
    p, q = process_grid(job.ranks)
    default_binary = {"hpcc": "hpcc", "hpl-nvidia": "hpl.sh", "hpl-mxp": "hpl-mxp.sh"}.get(flavor, "xhpl")
    binary = str(bench_setting(profile, options, "hpl.binary", default_binary))
    default_args = {"hpl-nvidia": ["--dat", "HPL.dat"],  # HPL-MxP takes the problem on its command line
                    "hpl-mxp": ["--n", str(n), "--nb", str(nb), "--nprow", str(p), "--npcol", str(q)]}.get(flavor, [])
    args = [str(a) for a in bench_setting(profile, options, "hpl.args", default_args)]
    env = {str(k): str(v) for k, v in (bench_setting(profile, options, "hpl.env", {}) or {}).items()}
    if flavor == "hpcc":
        return Program(argv=(binary, *args), env=env, input_files={"hpccinf.txt": hpl_dat(n, nb, p, q, hpcc=True)},
                       output_files=("hpccoutf.txt",))
    if flavor == "hpl-mxp":
        return Program(argv=(binary, *args), env=env)
    return Program(argv=(binary, *args), env=env, input_files={"HPL.dat": hpl_dat(n, nb, p, q)})


SPEC = register(BenchmarkSpec(
    name="hpl",
    description="HPL / HPCC / HPL-NVIDIA: residual PASSED, GFLOPS vs the profile (% of Rpeak) and the fleet",
    tests=lambda profile, options: ("hpl",),
    shapes={"quick": ("node",), "acceptance": ("node", "cluster")},
    ranks_per_host=hpl_ranks_per_host,
    program=hpl_program,
    parse=parse_hpl,
    evaluate=evaluate_hpl,
    metric=hpl_metric,
    fleet=fleet_hpl,
))
