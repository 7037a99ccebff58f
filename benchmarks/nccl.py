"""nccl-tests (``all_reduce_perf`` and the other ``*_perf``): parse, then grade data first, bandwidth second.

    result = parse_nccl_tests(text)
    result.rows[-1].busbw_gbps          # 476.53 (best of out-of-place / in-place at that size)
    result.out_of_bounds, result.avg_busbw_gbps

One parser for every layout in ../shared/corpus/nccl-tests (nccl-tests 2.x to 2.18): the current
table (size count type redop root + out-of-place/in-place time algbw busbw #wrong), the legacy one
(``error`` column holding a max error such as ``1e+00``, no root, empty redop for alltoall),
``N/A`` when ``validation: 0``, srun ``--label`` (``0: ``) and Open MPI ``--tag-output``
(``[1,0]<stdout>:``) prefixes, ``[0]`` rank tags even in the middle of a row, NCCL INFO/WARN lines
and launcher banners interleaved, and aborted runs (``Test CUDA failure``, no table). Columns are
mapped from the right (the last eight are always time/algbw/busbw/#wrong twice), so the optional
redop/root columns never shift a value. Output with neither a table nor a recognizable failure
raises ``ParseError``. The evaluator checks #wrong / out-of-bounds (data corruption: FAIL whatever
the bandwidth), the rank count (busbw factor per collective), then busbw at the largest sizes
against the profile's bands.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from healthcheck.benchmarks import NUMBER_RE, BenchContext, BenchmarkSpec, Program, bench_setting, finite, register
from healthcheck.benchmarks.bands import band_finding
from healthcheck.benchmarks.domain import host_of, one_domain
from healthcheck.benchmarks.launcher_errors import LauncherError, launcher_remedy, parse_launcher_errors
from healthcheck.benchmarks.nccl_groups import busbw_expectation, rail_gpu
from healthcheck.benchmarks.nccl_transport import NcclTransport, evaluate_nccl_transport, parse_nccl_transport
from healthcheck.benchmarks.plan import Job
from healthcheck.core.grading import fleet_outliers
from healthcheck.core.model import Finding, Status
from healthcheck.core.profiles import Profile
from healthcheck.core.spec import ParseError

# busbw = algbw x factor(n ranks): NVIDIA/nccl-tests doc/PERFORMANCE.md and src/*.cu.
BUSBW_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n, "gather": lambda n: (n - 1) / n, "scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0, "sendrecv": lambda n: 1.0,
    "hypercube": lambda n: 1.0,
}


@dataclass(frozen=True)
class NcclRow:
    """One message size. ``*_wrong`` is the #wrong count (legacy: the max error); None is ``N/A``."""

    size_bytes: int
    count: int
    dtype: str
    oop_time_us: float
    oop_algbw_gbps: float
    oop_busbw_gbps: float
    oop_wrong: float | None
    ip_time_us: float
    ip_algbw_gbps: float
    ip_busbw_gbps: float
    ip_wrong: float | None

    @property
    def busbw_gbps(self) -> float:
        return max(self.oop_busbw_gbps, self.ip_busbw_gbps)

    @property
    def wrong(self) -> float:
        return (self.oop_wrong or 0.0) + (self.ip_wrong or 0.0)


@dataclass(frozen=True)
class NcclDevice:
    rank: int
    host: str
    pid: int
    device: int
    bus_id: str
    name: str


@dataclass(frozen=True)
class NcclMessage:
    """An NCCL WARN line or a test failure, with the host (as the node printed it) when known."""

    host: str | None
    text: str
    device: int | None = None


@dataclass(frozen=True)
class NcclTestResult:
    test: str | None
    tests_version: str | None
    nccl_version: str | None
    validation: bool | None
    legacy_error_column: bool
    devices: tuple[NcclDevice, ...]
    rows: tuple[NcclRow, ...]
    out_of_bounds: int | None
    out_of_bounds_failed: bool | None
    avg_busbw_gbps: float | None
    warnings: tuple[NcclMessage, ...]
    failures: tuple[NcclMessage, ...]
    launcher_errors: tuple[LauncherError, ...]
    transport: NcclTransport | None = None  # from NCCL_DEBUG=INFO lines (benchmarks/nccl_transport.py)

    @property
    def complete(self) -> bool:
        return self.avg_busbw_gbps is not None

    @property
    def duplicate_sizes(self) -> bool:
        sizes = [r.size_bytes for r in self.rows if r.size_bytes > 0]
        return len(sizes) != len(set(sizes))


_PREFIX = re.compile(r"^\s*(?:\[\d+,\d+\]<std(?:out|err)>:|\d+:(?=\s|$))\s?")
_RANK_TAG = re.compile(r"\[\d+\]")
_NUM = NUMBER_RE
_WRONG = rf"(?:{_NUM}|N/A)"
_ROW = re.compile(
    rf"^\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<type>[A-Za-z_][\w]*)(?P<mid>(?:\s+\S+){{0,2}}?)\s+"
    rf"(?P<t1>{_NUM})\s+(?P<a1>{_NUM})\s+(?P<b1>{_NUM})\s+(?P<w1>{_WRONG})\s+"
    rf"(?P<t2>{_NUM})\s+(?P<a2>{_NUM})\s+(?P<b2>{_NUM})\s+(?P<w2>{_WRONG})\s*$")
_DEVICE = re.compile(r"^#\s+Rank\s+(\d+)(?:\s+Group\s+\d+)?\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)"
                     r"\s+\[([^\]]*)\]\s*(.*?)\s*$")
_HEADER = re.compile(r"^#\s*nThread\s+\d+\s+nGpus\s+(\d+).*?(?:validation:\s*(\d))?")
_VALIDATION = re.compile(r"validation:\s*(\d)")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s+(OK|FAILED)")
_AVG = re.compile(rf"^#\s*Avg bus bandwidth\s*:\s*({_NUM})")
_TESTS_VERSION = re.compile(r"^#\s*nccl-tests version\s+(\S+)")
_NCCL_VERSION = re.compile(r"NCCL version\s+(\S+)")
_TEST_NAME = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_LEGACY = re.compile(r"^#\s+size\s+count\s+type\b.*\berror\s*$")
_WARN = re.compile(r"NCCL WARN\s+(?P<msg>.*?)\s*$")
_WHO = re.compile(r"(?P<host>[A-Za-z0-9_.{}-]+):\d+:\d+\s+\[(?P<dev>\d+)\]")
_FAIL = re.compile(r"^(?P<host>\S+): Test (?P<kind>CUDA|NCCL) failure (?P<where>\S+)\s*(?P<msg>.*)$")
_FAIL_TAIL = re.compile(r"^\s*\.\. (?P<host>\S+) pid \d+: Test failure (?P<where>\S+)")


def parse_nccl_tests(text: str) -> NcclTestResult:
    """Parse one nccl-tests run (any ``*_perf``) as printed by rank 0, with launcher noise."""
    fields: dict[str, Any] = {"test": None, "tests_version": None, "nccl_version": None,
                              "validation": None, "legacy": False, "oob": None, "oob_failed": None,
                              "avg": None}
    devices: list[NcclDevice] = []
    rows: list[NcclRow] = []
    warnings: list[NcclMessage] = []
    failures: list[NcclMessage] = []
    for raw in text.splitlines():
        line = _PREFIX.sub("", raw, count=1).rstrip()
        if "NCCL WARN" in line:  # "NCCL WARN(oops)" (no space) is a warning too, its text after the tag
            found = _WARN.search(line)
            warnings.append(_message(line, found["msg"] if found else line.split("NCCL WARN", 1)[1].strip()))
            continue
        if line.lstrip().startswith("#"):
            _header_line(line.strip(), fields, devices)
            continue
        row = _ROW.match(_RANK_TAG.sub(" ", line))
        if row:
            rows.append(_row(row))
        elif m := _FAIL.match(line.strip()):
            failures.append(NcclMessage(m["host"], f"Test {m['kind']} failure {m['where']} {m['msg']}".strip()))
        elif m := _FAIL_TAIL.match(line):
            failures.append(NcclMessage(m["host"], f"Test failure {m['where']}"))
        elif fields["nccl_version"] is None and (m := _NCCL_VERSION.search(line)):
            fields["nccl_version"] = m[1]
    launcher = parse_launcher_errors(text)
    if not rows and not failures and not warnings and not launcher and fields["avg"] is None:
        raise ParseError("no nccl-tests table, summary or failure message in the output", text[:200])
    return NcclTestResult(
        test=fields["test"], tests_version=fields["tests_version"], nccl_version=fields["nccl_version"],
        validation=fields["validation"], legacy_error_column=fields["legacy"], devices=tuple(devices),
        rows=tuple(rows), out_of_bounds=fields["oob"], out_of_bounds_failed=fields["oob_failed"],
        avg_busbw_gbps=fields["avg"], warnings=tuple(warnings), failures=tuple(failures),
        launcher_errors=launcher, transport=parse_nccl_transport(text))


def _header_line(line: str, fields: dict[str, Any], devices: list[NcclDevice]) -> None:
    if m := _DEVICE.match(line):
        devices.append(NcclDevice(rank=int(m[1]), pid=int(m[2]), host=m[3], device=int(m[4]),
                                  bus_id=m[5], name=m[6]))
    elif _HEADER.match(line):
        v = _VALIDATION.search(line)
        fields["validation"] = None if v is None else v[1] == "1"
    elif m := _OOB.match(line):
        fields["oob"], fields["oob_failed"] = int(m[1]), m[2] == "FAILED"
    elif m := _AVG.match(line):
        fields["avg"] = finite(m[1], line)
    elif m := _TESTS_VERSION.match(line):
        fields["tests_version"] = m[1]
    elif m := _TEST_NAME.match(line):
        fields["test"] = m[1]
    elif _LEGACY.match(line):
        fields["legacy"] = True


def _wrong(token: str) -> float | None:
    return None if token == "N/A" else finite(token, "#wrong")


def _row(m: re.Match[str]) -> NcclRow:
    return NcclRow(size_bytes=int(m["size"]), count=int(m["count"]), dtype=m["type"],
                   oop_time_us=finite(m["t1"], m[0]), oop_algbw_gbps=finite(m["a1"], m[0]),
                   oop_busbw_gbps=finite(m["b1"], m[0]), oop_wrong=_wrong(m["w1"]), ip_time_us=finite(m["t2"], m[0]),
                   ip_algbw_gbps=finite(m["a2"], m[0]), ip_busbw_gbps=finite(m["b2"], m[0]), ip_wrong=_wrong(m["w2"]))


def _message(line: str, msg: str) -> NcclMessage:
    who = _WHO.search(line)
    return NcclMessage(host=who["host"] if who else None, text=msg,
                       device=int(who["dev"]) if who else None)


def collective_of(test: str) -> str:
    """``all_reduce_perf`` / ``all_reduce_perf_mpi`` -> ``all_reduce``."""
    return re.sub(r"_perf(_mpi)?$", "", test)


def infer_ranks(collective: str, row: NcclRow) -> int | None:
    """Ranks implied by busbw/algbw at one size (None when the factor is constant or algbw is 0)."""
    algbw, busbw = max((row.oop_algbw_gbps, row.oop_busbw_gbps), (row.ip_algbw_gbps, row.ip_busbw_gbps))
    factor_of = BUSBW_FACTORS.get(collective)
    if algbw <= 0 or factor_of is None or factor_of(2) == factor_of(4):
        return None
    factor = busbw / algbw
    scale = 2.0 if collective == "all_reduce" else 1.0
    if factor <= 0:
        return 1
    return None if factor >= scale else round(scale / (scale - factor))


def busbw_metric(result: NcclTestResult, min_bytes: int | None) -> tuple[float, int] | None:
    """(best busbw, size) over the rows at or above ``min_bytes`` (default: the largest size)."""
    rows = [r for r in result.rows if r.size_bytes > 0]
    if not rows:
        return None
    largest = max(r.size_bytes for r in rows)
    floor = min(largest, min_bytes) if min_bytes else largest
    best = max((r for r in rows if r.size_bytes >= floor), key=lambda r: r.busbw_gbps)
    return best.busbw_gbps, best.size_bytes


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


_REMEDY = {
    "data": "Data corruption in a collective: drain the node(s), run dcgmi diag -r 3 and check Xid, ECC "
            "and NVLink/IB error counters; for pairs the attribution finding names the node or link",
    "run": "Read the failure: 'system not yet initialized' = start nvidia-fabricmanager; 'busy or "
           "unavailable' = another process holds the GPU (or exclusive compute mode); NCCL WARN lines "
           "name the HCA or socket at fault",
    "job": "The job could not be launched or hung: check the launcher output (mpirun/srun), ssh between "
           "the nodes, the benchmark binary path and the job timeout",
    "ranks": "The run had the wrong number of ranks: rebuild nccl-tests with MPI=1, check -np/--map-by "
             "and that every GPU is visible (nvidia-smi -L)",
    "node": "Check NVLink/NVSwitch health (nvidia-smi nvlink -s, nvidia-fabricmanager), GPU clocks, "
            "power and PCIe links; compare with the fleet",
    "net": "Check the IB/RoCE ports of these nodes (ibstat rate/width, error counters), NCCL_IB_HCA and GID "
           "settings, GPUDirect RDMA, and the switch ports on their path",
    "domain": "A slow collective over one NVLink domain: check the domain's fabric findings (fabric.health, "
              "nvl.domain, imex), the NVLink switch trays (NMX) and run nvloom's gpu-to-rack suite to find the "
              "slow GPU",
    "warn": "NCCL reported a warning: read it (HCA, QP, socket or NVLS error) and check that device",
}


def evaluate_nccl(job: Job, result: NcclTestResult, ctx: BenchContext) -> list[Finding]:
    """Correctness (wrong elements, out of bounds, aborts, rank count) first, then busbw per shape."""
    coll = collective_of(result.test or job.test)
    base = f"nccl.{coll}"
    data = _data_findings(job, result, base)
    out = data + _run_findings(job, result, base, ctx, corrupt=any(f.status is Status.FAIL for f in data))
    ranks_ok, rank_findings = _rank_findings(job, result, base, coll)
    out += rank_findings + _warn_findings(job, result, base, ctx)
    if result.rows and result.transport is not None:  # which network carried a multi-node job
        out += evaluate_nccl_transport(job, result.transport, ctx, base, host_of)
    if ranks_ok and result.rows and result.complete:
        min_bytes = bench_setting(ctx.profile, ctx.options, "nccl.grade_min_bytes")
        metric = busbw_metric(result, int(min_bytes) if min_bytes else None)
        if metric is not None:
            busbw, size = metric
            scope = _scope(job, ctx)
            key = f"{base}.{scope}.busbw_gbps"
            remedy = _REMEDY["domain" if scope == "domain" else "node" if job.shape == "node" else "net"]
            what = f"{coll} busbw at {_size(size)}" + (" over one NVLink domain" if scope == "domain" else "")
            out += [band_finding(h, f"{base}.{scope}.busbw", busbw_expectation(ctx.profile, base, scope), busbw,
                                 source=job.job_id, remedy=remedy, profile=ctx.profile, key=key,
                                 component=job.component, what=what)
                    for h in job.hosts]
    return out


def _scope(job: Job, ctx: BenchContext) -> str:
    """``domain`` for a cluster job that is exactly one NVLink domain (graded against
    ``nccl.<coll>.domain.busbw_gbps``), else the job's shape."""
    return "domain" if job.shape in ("cluster", "domain") and one_domain(job, ctx).one_domain else job.shape


def _all(job: Job, check: str, status: Status, message: str, remedy: str | None, **kw: Any) -> list[Finding]:
    return [Finding(host=h, check=check, status=status, message=message, component=job.component,
                    remedy=remedy, source=job.job_id, **kw) for h in job.hosts]


def _data_findings(job: Job, result: NcclTestResult, base: str) -> list[Finding]:
    corrupt = [r for r in result.rows if r.wrong > 0]
    if corrupt or result.out_of_bounds_failed:
        what = "error" if result.legacy_error_column else "#wrong"
        sizes = "; ".join(f"{what} {r.oop_wrong or 0:g} out-of-place / {r.ip_wrong or 0:g} in-place at "
                          f"{r.size_bytes} B" for r in corrupt[:5])
        more = f" (+{len(corrupt) - 5} more sizes)" if len(corrupt) > 5 else ""
        oob = f"; out of bounds values: {result.out_of_bounds} FAILED" if result.out_of_bounds_failed else ""
        total = sum(r.wrong for r in corrupt)
        tails = sorted({f"{f.host}: {f.text}" for f in result.failures if f.text.startswith("Test failure ")})
        then = f"; the run then exited with {', '.join(tails[:4])}" if tails and result.complete else ""
        return _all(job, f"{base}.data", Status.FAIL, f"{job.prefix}data corruption: {sizes}{more}{oob}{then}",
                    _REMEDY["data"], value=total, expected="0 wrong elements", unit="elements")
    if not result.rows:
        return []
    if result.validation is False or all(r.oop_wrong is None and r.ip_wrong is None for r in result.rows):
        return _all(job, f"{base}.data", Status.SKIP,
                    f"{job.prefix}results were not validated (validation: 0 / -c 0, #wrong N/A)", None)
    return _all(job, f"{base}.data", Status.PASS,
                f"{job.prefix}0 wrong elements over {len(result.rows)} sizes", None,
                value=0, expected="0 wrong elements", unit="elements")


def _consequences(result: NcclTestResult, corrupt: bool) -> list[NcclMessage]:
    """The bare ``Test failure common.cu:NNNN`` lines nccl-tests prints after a finished run whose
    #wrong or out-of-bounds check failed: the data finding already reports that cause."""
    if not (corrupt and result.complete):
        return []
    return [f for f in result.failures if f.text.startswith("Test failure ")]


def _run_findings(job: Job, result: NcclTestResult, base: str, ctx: BenchContext,
                  corrupt: bool = False) -> list[Finding]:
    consequences = _consequences(result, corrupt)
    failures = [f for f in result.failures if f not in consequences]
    if failures:
        blamed: dict[str, list[str]] = {}
        for failure in failures:
            host = host_of(failure.host, job, ctx)
            for h in [host] if host else job.hosts:
                blamed.setdefault(h, [])
                if failure.text not in blamed[h]:
                    blamed[h].append(failure.text)
        out = [Finding(host=h, check=f"{base}.run", status=Status.FAIL, component=job.component,
                       message=f"{job.prefix}test aborted on {h}: {'; '.join(texts[:3])}",
                       value=texts[0], remedy=_REMEDY["run"], source=job.job_id)
               for h, texts in blamed.items()]
        out += [Finding(host=h, check=f"{base}.run", status=Status.ERROR, component=job.component,
                        message=f"{job.prefix}not evaluated: the test aborted on {', '.join(blamed)}",
                        source=job.job_id) for h in job.hosts if h not in blamed]
        return out
    errors = result.launcher_errors
    if errors and (not result.complete or any(e.timeout for e in errors)):
        what = "; ".join(e.message for e in errors[:4])
        hung = any(e.timeout for e in errors)
        return _all(job, f"{base}.job", Status.ERROR,
                    f"{job.prefix}{'job hung' if hung else 'launch failed'}: {what}",
                    launcher_remedy(errors, _REMEDY["job"]))
    if not result.rows:
        return _all(job, f"{base}.job", Status.ERROR, f"{job.prefix}no result rows in the output"
                    + (f"; NCCL WARN: {result.warnings[0].text}" if result.warnings else ""), _REMEDY["job"])
    if not result.complete:
        return _all(job, f"{base}.job", Status.ERROR,
                    f"{job.prefix}output ends after {len(result.rows)} rows without the summary "
                    "(truncated or killed)", _REMEDY["job"])
    return []


def _rank_findings(job: Job, result: NcclTestResult, base: str, coll: str) -> tuple[bool, list[Finding]]:
    expected = job.ranks
    sized = [r for r in result.rows if r.size_bytes > 0]
    zero_busbw = bool(sized) and all(r.busbw_gbps == 0 and max(r.oop_algbw_gbps, r.ip_algbw_gbps) > 0
                                     for r in sized)
    if result.devices:  # a tail may list only the last ranks: the highest rank counts them
        measured: int | None = max(d.rank for d in result.devices) + 1
    elif sized:
        measured = infer_ranks(coll, max(sized, key=lambda r: r.size_bytes))
    else:
        return True, []
    if expected > 1 and (zero_busbw or result.duplicate_sizes or measured == 1):
        return False, _all(job, f"{base}.ranks", Status.FAIL,
                           f"{job.prefix}each process ran its own 1-rank test (busbw 0, repeated sizes): "
                           f"nccl-tests built without MPI=1?", _REMEDY["ranks"], value=1, expected=expected,
                           unit="ranks")
    if measured is not None and measured != expected:
        return False, _all(job, f"{base}.ranks", Status.FAIL,
                           f"{job.prefix}{measured} ranks in the run, expected {expected}",
                           _REMEDY["ranks"], value=measured, expected=expected, unit="ranks")
    return True, []


_ADDR = re.compile(r"0x[0-9a-fA-F]+")


def _warn_findings(job: Job, result: NcclTestResult, base: str, ctx: BenchContext) -> list[Finding]:
    grouped: dict[tuple[str, str], list[NcclMessage]] = {}
    for warning in result.warnings:
        host = host_of(warning.host, job, ctx)
        text = _ADDR.sub("0x…", warning.text)
        for h in [host] if host else job.hosts:
            grouped.setdefault((h, text), []).append(warning)
    out = []
    for (h, text), items in grouped.items():
        devices = sorted({w.device for w in items if w.device is not None})
        where = f" (device {', '.join(map(str, devices))})" if devices else ""
        out.append(Finding(host=h, check=f"{base}.nccl_warn", status=Status.WARN, component=job.component,
                           value=len(items), unit="lines", source=job.job_id, remedy=_REMEDY["warn"],
                           message=f"{job.prefix}NCCL WARN x{len(items)}{where}: {text}"))
    return out


def fleet_nccl(outcomes: Sequence[tuple[Job, NcclTestResult]], ctx: BenchContext) -> list[Finding]:
    """Per-node busbw far below the fleet median (WARN): the node is slower than its peers."""
    low = float(bench_setting(ctx.profile, ctx.options, "nccl.fleet_low_fraction", 0.9))
    by_test: dict[str, dict[str, tuple[float, str]]] = {}
    for job, result in outcomes:
        metric = busbw_metric(result, None) if job.shape == "node" and result.complete else None
        if metric is not None:
            by_test.setdefault(collective_of(result.test or job.test), {})[job.hosts[0]] = (metric[0], job.job_id)
    out = []
    for coll, values in by_test.items():
        outliers = fleet_outliers({h: v for h, (v, _) in values.items()}, low_fraction=low)
        for host, median in sorted(outliers.items()):
            value, source = values[host]
            out.append(Finding(host=host, check=f"nccl.{coll}.node.fleet", status=Status.WARN,
                               value=round(value, 2), expected=f">= {low:.0%} of fleet median {median:.1f} GB/s",
                               unit="GB/s", source=source, remedy=_REMEDY["node"],
                               message=f"{coll} busbw {value:.1f} GB/s is below {low:.0%} of the fleet "
                                       f"median {median:.1f} GB/s"))
    return out


def _gpus_per_node(profile: Profile, options: Mapping[str, Any]) -> int:
    gpus = bench_setting(profile, options, "nccl.gpus_per_node")
    if gpus is None:
        exp = profile.expect("gpu.count")
        gpus = exp.value if exp is not None and isinstance(exp.value, int) else 8
    return int(gpus)


def nccl_ranks_per_host(profile: Profile, shape: str, options: Mapping[str, Any] | None = None) -> int:
    options = options or {}
    per_process = int(bench_setting(profile, options, "nccl.gpus_per_process", 1))
    return max(1, _gpus_per_node(profile, options) // per_process)


def nccl_program(job: Job, profile: Profile, options: Mapping[str, Any]) -> Program:
    """``<binary_dir>/<test> -b MIN -e MAX -f F -g G -c 1 -n ITERS -w WARMUP`` with the profile's NCCL env."""
    def setting(name: str, default: Any) -> str:
        return str(bench_setting(profile, options, f"nccl.{name}", default))

    binary_dir = setting("binary_dir", "")
    binary = f"{binary_dir.rstrip('/')}/{job.test}" if binary_dir else job.test
    one_gpu = job.shape == "group_rail"
    argv = (binary, "-b", setting("min_bytes", "8G"), "-e", setting("max_bytes", "8G"),
            "-f", setting("step_factor", "2"), "-g", "1" if one_gpu else setting("gpus_per_process", "1"), "-c", "1",
            "-n", setting("iters", "20"), "-w", setting("warmup_iters", "5"))
    # NCCL_DEBUG=INFO (INIT,NET only) names the network NCCL chose: a silent fallback to TCP sockets is a FAIL
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET",
           **{str(k): str(v) for k, v in (bench_setting(profile, options, "nccl.env", {}) or {}).items()}}
    if job.rail:
        env["NCCL_IB_HCA"] = job.rail if job.rail[0] in "=^" else f"={job.rail}"
    if one_gpu and job.rail:  # the GPU beside that HCA, so that the rails of one node run side by side
        env["CUDA_VISIBLE_DEVICES"] = str(rail_gpu(profile, options, job.rail))
    return Program(argv=argv, env=env)


def nccl_metric(result: NcclTestResult) -> float | None:
    metric = busbw_metric(result, None)
    return None if metric is None or not math.isfinite(metric[0]) else metric[0]


def nccl_series(result: Any) -> dict[str, Any]:
    """What the report draws of one job (JSON form of ``NcclTestResult``): ``busbw``, a list of
    [size_bytes, busbw_gbps], the best of out-of-place and in-place per message size."""
    rows = result.get("rows") if isinstance(result, Mapping) else None
    points = []
    for r in rows if isinstance(rows, list) else ():
        size = _json_number(r.get("size_bytes")) if isinstance(r, Mapping) else None
        values = [v for k in ("oop_busbw_gbps", "ip_busbw_gbps", "busbw_gbps")
                  if isinstance(r, Mapping) and (v := _json_number(r.get(k))) is not None]
        if size and values:
            points.append((size, max(values)))
    return {"busbw": [list(p) for p in sorted(points)]} if points else {}


def _json_number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


SPEC = register(BenchmarkSpec(
    name="nccl",
    description="nccl-tests (*_perf): #wrong/out-of-bounds, rank count, busbw per shape against bands",
    tests=lambda profile, options: tuple(bench_setting(profile, options, "nccl.tests", ["all_reduce_perf"])),
    shapes={"quick": ("node",), "acceptance": ("node", "pair", "cluster"), "isolate": ("isolate",)},
    ranks_per_host=nccl_ranks_per_host,
    program=nccl_program,
    parse=parse_nccl_tests,
    evaluate=evaluate_nccl,
    metric=nccl_metric,
    series=nccl_series,
    fleet=fleet_nccl,
))
