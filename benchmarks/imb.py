"""Intel MPI Benchmarks (IMB-MPI1): PingPong, PingPing, Sendrecv, Uniband, Biband, Allreduce, ... tables.

    result = parse_imb(text)
    pingpong = result.section("PingPong")
    pingpong.rows[0].t_usec, pingpong.max_bandwidth_gbps        # 1.0 us, 12.04746 GB/s

Written against ../shared/corpus/imb (IMB 2019 Update 5/6, 2021.2, 2021.7; Open MPI, Intel MPI
with ``I_MPI_DEBUG`` lines, ``-multi`` groups, ``-show_tail`` lines, several sections per run,
``( N additional processes waiting in MPI_Barrier)``). Columns are mapped by their header names
(``t[usec]`` or ``t_avg[usec]``, ``Mbytes/sec``, ``Msg/sec``); IMB 2019+ counts 1 Mbyte = 1e6 bytes
(4194304 B in 348.15 us is printed as 12047.46), converted here to GB/s = 1e9 B/s. A header
without any ``# Benchmarking`` section (cut off) parses with no sections and ``complete=False``;
text without the IMB banner or a table raises ``ParseError``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from healthcheck.benchmarks import BenchContext, BenchmarkSpec, Program, bench_setting, finite, register
from healthcheck.benchmarks.bands import band_finding
from healthcheck.benchmarks.launcher_errors import LauncherError, launcher_remedy, parse_launcher_errors
from healthcheck.benchmarks.plan import Job
from healthcheck.core.model import Finding, Status
from healthcheck.core.profiles import Profile
from healthcheck.core.spec import ParseError


@dataclass(frozen=True)
class ImbRow:
    bytes: int | None
    repetitions: int
    t_usec: float | None
    t_min_usec: float | None = None
    t_max_usec: float | None = None
    bandwidth_gbps: float | None = None
    msg_per_s: float | None = None


@dataclass(frozen=True)
class ImbSection:
    benchmark: str
    processes: int | None
    groups: int | None
    rows: tuple[ImbRow, ...]

    @property
    def name(self) -> str:
        """``pingpong`` for ``PingPong`` and ``Multi-PingPong``: the key used in check ids."""
        return self.benchmark.removeprefix("Multi-").lower()

    @property
    def small_latency_usec(self) -> float | None:
        timed = [r for r in self.rows if r.t_usec is not None]  # Barrier rows have no #bytes
        return min(timed, key=lambda r: r.bytes or 0).t_usec if timed else None

    @property
    def max_bandwidth_gbps(self) -> float | None:
        values = [r.bandwidth_gbps for r in self.rows if r.bandwidth_gbps is not None]
        return max(values) if values else None


@dataclass(frozen=True)
class ImbResult:
    version: str | None
    sections: tuple[ImbSection, ...]
    complete: bool
    errors: tuple[str, ...] = ()
    launcher_errors: tuple[LauncherError, ...] = ()

    def section(self, benchmark: str) -> ImbSection | None:
        wanted = benchmark.lower()
        return next((s for s in self.sections if s.name == wanted), None)


_VERSION = re.compile(r"Intel\(R\) MPI Benchmarks\s+(.+?),\s+MPI")
_BENCH = re.compile(r"^#\s*Benchmarking\s+(\S+)")
_PROCS = re.compile(r"^#\s*#processes\s*=\s*(\d+)")
_GROUPS = re.compile(r"^#\s*\(\s*(\d+)\s+groups of")
_COLUMNS = ("#bytes", "#repetitions")
_COLUMN_KEYS = {"#bytes": "bytes", "#repetitions": "repetitions", "t[usec]": "t_usec", "t_avg[usec]": "t_usec",
                "t_min[usec]": "t_min_usec", "t_max[usec]": "t_max_usec", "Mbytes/sec": "mbytes",
                "Msg/sec": "msg_per_s"}
_ERROR = re.compile(r"^(Invalid benchmark name .*|.*\bERROR\b.*)$")


def parse_imb(text: str) -> ImbResult:
    """Parse one IMB-MPI1 (or IMB-RMA/-EXT) run: every ``# Benchmarking`` section and its table."""
    version = m[1].strip() if (m := _VERSION.search(text)) else None
    sections: list[ImbSection] = []
    current: dict[str, Any] | None = None
    columns: list[str] = []
    errors: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if m := _BENCH.match(line):
            current = {"benchmark": m[1], "processes": None, "groups": None, "rows": []}
            sections.append(current)  # type: ignore[arg-type]
            columns = []
        elif current is not None and (m := _PROCS.match(line)):
            current["processes"] = int(m[1])
        elif current is not None and (m := _GROUPS.match(line)):
            current["groups"] = int(m[1])
        elif current is not None and line.split()[:1] and line.split()[0] in _COLUMNS:
            columns = line.split()
        elif current is not None and columns and (row := _row(columns, line.split())):
            current["rows"].append(row)
        elif _ERROR.match(line) and not line.startswith("#"):
            errors.append(line)
    launcher = parse_launcher_errors(text)
    if version is None and not sections and not launcher:
        raise ParseError("no IMB banner or benchmark table in the output", text[:200])
    built = tuple(ImbSection(benchmark=s["benchmark"], processes=s["processes"], groups=s["groups"],
                             rows=tuple(s["rows"])) for s in sections)  # type: ignore[index]
    return ImbResult(version=version, sections=built, complete="All processes entering MPI_Finalize" in text,
                     errors=tuple(dict.fromkeys(errors)), launcher_errors=launcher)


def _row(columns: list[str], tokens: list[str]) -> ImbRow | None:
    if len(tokens) != len(columns):
        return None
    try:
        values = {_COLUMN_KEYS.get(c, c): float(t) for c, t in zip(columns, tokens, strict=True)}
    except ValueError:
        return None
    for token in tokens:
        finite(token, " ".join(tokens))  # a nan/inf in a result row: the job is ERROR, not graded
    mbytes = values.get("mbytes")
    return ImbRow(bytes=int(values["bytes"]) if "bytes" in values else None,
                  repetitions=int(values.get("repetitions", 0)), t_usec=values.get("t_usec"),
                  t_min_usec=values.get("t_min_usec"), t_max_usec=values.get("t_max_usec"),
                  bandwidth_gbps=None if mbytes is None else mbytes / 1000.0, msg_per_s=values.get("msg_per_s"))


REMEDY = {
    "job": "IMB did not run to completion: check the launcher output, the IMB arguments and the job timeout",
    "latency": "Small-message latency is too high: check the port state and rate, the MPI transport "
               "actually used (UCX_NET_DEVICES, btl/pml), CPU frequency and the switch path",
    "bandwidth": "Large-message bandwidth is too low: check the HCA link rate/width (ibstat), PCIe link of the "
                 "HCA, error counters and the switch ports on the path",
}


def evaluate_imb(job: Job, result: ImbResult, ctx: BenchContext) -> list[Finding]:
    """Completeness and errors first (IMB has no data check), then latency and bandwidth per section."""
    wanted = [str(t) for t in bench_setting(ctx.profile, ctx.options, "imb.benchmarks", ["PingPong"])]
    problem = _problem(result, wanted)
    if problem:
        return [Finding(host=h, check="imb.job", status=Status.ERROR, component=job.component,
                        message=f"{job.prefix}{problem}", remedy=launcher_remedy(result.launcher_errors, REMEDY["job"]),
                        source=job.job_id)
                for h in job.hosts]
    out: list[Finding] = []
    for section in result.sections:
        metrics = (("latency", "latency_us", section.small_latency_usec, "small-message latency"),
                   ("bandwidth", "bandwidth_gbps", section.max_bandwidth_gbps, "peak bandwidth"))
        for check, unit_key, value, what in metrics:
            if value is None:
                continue
            key = f"imb.{section.name}.{unit_key}"
            out += [band_finding(h, f"imb.{section.name}.{check}", ctx.profile.expect(key), value,
                                 source=job.job_id, remedy=REMEDY[check], profile=ctx.profile, key=key,
                                 what=f"{section.benchmark} {what}", component=job.component)
                    for h in job.hosts]
    return out


def _problem(result: ImbResult, wanted: list[str]) -> str | None:
    if result.errors:
        return f"IMB reported: {'; '.join(result.errors[:3])}"
    if result.launcher_errors and not result.complete:
        return "; ".join(e.message for e in result.launcher_errors[:3])
    missing = [w for w in wanted if result.section(w) is None or not result.section(w).rows]  # type: ignore[union-attr]
    if missing:
        return f"no result table for {', '.join(missing)} (run cut short or benchmark not run)"
    if not result.complete:
        return "output ends before 'All processes entering MPI_Finalize' (truncated or killed)"
    return None


def imb_program(job: Job, profile: Profile, options: Mapping[str, Any]) -> Program:
    """``IMB-MPI1 PingPong ... -msglog 0:22 [args]``: the configured benchmarks in one run."""
    binary = str(bench_setting(profile, options, "imb.binary", "IMB-MPI1"))
    benchmarks = [str(b) for b in bench_setting(profile, options, "imb.benchmarks", ["PingPong"])]
    msglog = str(bench_setting(profile, options, "imb.msglog", "0:22"))
    args = [str(a) for a in bench_setting(profile, options, "imb.args", [])]
    env = {str(k): str(v) for k, v in (bench_setting(profile, options, "imb.env", {}) or {}).items()}
    return Program(argv=(binary, *benchmarks, "-msglog", msglog, *args), env=env)


def imb_metric(result: ImbResult) -> float | None:
    section = result.section("PingPong")
    return section.max_bandwidth_gbps if section else None


def imb_series(result: Any) -> dict[str, Any]:
    """What the report shows of one job (JSON form of the parsed IMB result): ``latency_us``, the
    small-message PingPong latency (smallest #bytes with a time)."""
    sections = result.get("sections") if isinstance(result, Mapping) else None
    for section in sections if isinstance(sections, list) else ():
        if isinstance(section, Mapping) and str(section.get("benchmark", "")).lower() == "pingpong":
            timed = [r for r in section.get("rows") or [] if isinstance(r, Mapping) and _json_number(r.get("t_usec"))]
            if timed:
                latency = _json_number(min(timed, key=lambda r: r.get("bytes") or 0)["t_usec"])
                return {"latency_us": latency} if latency is not None else {}
    return {}


def _json_number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


SPEC = register(BenchmarkSpec(
    name="imb",
    description="IMB-MPI1 between node pairs: small-message latency and peak bandwidth against the profile",
    tests=lambda profile, options: ("IMB-MPI1",),
    shapes={"quick": ("pair",), "acceptance": ("pair",)},
    ranks_per_host=lambda profile, shape, options=None: 1,
    program=imb_program,
    parse=parse_imb,
    evaluate=evaluate_imb,
    metric=imb_metric,
    series=imb_series,
))
