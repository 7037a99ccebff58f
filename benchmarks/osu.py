"""OSU micro-benchmarks: osu_latency, osu_bw, osu_bibw and the collective latency tests.

    result = parse_osu(text)
    result.kind, result.small_latency_us, result.max_bandwidth_gbps     # 'latency', 0.97, None

Written against ../shared/corpus/osu (OSU 5.6.3, 5.7.1, 7.5): a ``# OSU MPI ... Test vX`` banner,
an optional ``# Datatype:`` line (7.x), a ``# Size  <columns>`` header and one row per size;
``[0] MPI startup()`` / ``SET UCX_NET_DEVICES`` lines, command lines and prompts around it are
ignored. Bandwidth columns are MB/s (1e6 B/s), converted to GB/s. No banner raises ``ParseError``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from healthcheck.benchmarks import BenchContext, BenchmarkSpec, Program, bench_setting, finite, register
from healthcheck.benchmarks.bands import band_finding
from healthcheck.benchmarks.imb import REMEDY
from healthcheck.benchmarks.launcher_errors import LauncherError, launcher_remedy, parse_launcher_errors
from healthcheck.benchmarks.plan import Job
from healthcheck.core.model import Finding, Status
from healthcheck.core.profiles import Profile
from healthcheck.core.spec import ParseError

_BANNER = re.compile(r"^#\s*OSU MPI(?:-CUDA)?\s+(?P<title>.+?)\s+v(?P<version>[\d.]+)\s*$")
_KINDS = (("Bi-Directional Bandwidth", "bibw"), ("Multiple Bandwidth", "mbw_mr"), ("Bandwidth", "bw"),
          ("Non-blocking Allreduce", "iallreduce"), ("Allreduce", "allreduce"), ("All-to-All", "alltoall"),
          ("Latency", "latency"))


@dataclass(frozen=True)
class OsuResult:
    kind: str
    title: str
    version: str
    columns: tuple[str, ...]
    rows: tuple[tuple[int, tuple[float, ...]], ...]
    launcher_errors: tuple[LauncherError, ...] = ()

    def column(self, *names: str) -> list[tuple[int, float]]:
        for name in names:
            if name in self.columns:
                index = self.columns.index(name)
                return [(size, values[index]) for size, values in self.rows if len(values) > index]
        return []

    @property
    def small_latency_us(self) -> float | None:
        values = self.column("Latency (us)", "Avg Latency(us)", "Overall(us)")
        return min(values)[1] if values else None

    @property
    def max_bandwidth_gbps(self) -> float | None:
        values = self.column("Bandwidth (MB/s)", "MB/s")
        return max(v for _, v in values) / 1000.0 if values else None


def parse_osu(text: str) -> OsuResult:
    """Parse one OSU micro-benchmark run (point-to-point or collective)."""
    banner = None
    columns: tuple[str, ...] = ()
    rows: list[tuple[int, tuple[float, ...]]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if m := _BANNER.match(line):
            banner = m
        elif banner and line.startswith("# Size"):
            columns = tuple(c.strip() for c in re.split(r"\s{2,}", line[len("# Size"):].strip()) if c.strip())
        elif banner and columns and re.match(r"^\d{1,20}\s", line):  # a message size, never a digit run
            try:
                tokens = line.split()
                values = tuple(float(t) for t in tokens[1:])
            except ValueError:
                continue
            rows.append((int(tokens[0]), tuple(finite(t, line) for t in tokens[1:]) if values else values))
    if banner is None:
        raise ParseError("no '# OSU MPI ... Test' banner in the output", text[:200])
    kind = next((k for needle, k in _KINDS if needle in banner["title"]), "other")
    return OsuResult(kind=kind, title=banner["title"], version=banner["version"], columns=columns,
                     rows=tuple(rows), launcher_errors=parse_launcher_errors(text))


def evaluate_osu(job: Job, result: OsuResult, ctx: BenchContext) -> list[Finding]:
    if not result.rows:
        why = "; ".join(e.message for e in result.launcher_errors[:2]) or "no result rows (truncated?)"
        return [Finding(host=h, check=f"osu.{result.kind}.job", status=Status.ERROR, component=job.component,
                        message=f"{job.prefix}{result.title}: {why}",
                        remedy=launcher_remedy(result.launcher_errors, REMEDY["job"]), source=job.job_id)
                for h in job.hosts]
    out: list[Finding] = []
    for check, unit_key, value, what in (("latency", "latency_us", result.small_latency_us, "small-message latency"),
                                         ("bandwidth", "bandwidth_gbps", result.max_bandwidth_gbps, "peak bandwidth")):
        if value is None:
            continue
        key = f"osu.{result.kind}.{unit_key}"
        out += [band_finding(h, f"osu.{result.kind}.{check}", ctx.profile.expect(key), value, source=job.job_id,
                             remedy=REMEDY[check], profile=ctx.profile, key=key, what=f"{result.title} {what}",
                             component=job.component) for h in job.hosts]
    return out


def osu_program(job: Job, profile: Profile, options: Mapping[str, Any]) -> Program:
    binary_dir = str(bench_setting(profile, options, "osu.binary_dir", ""))
    binary = f"{binary_dir.rstrip('/')}/{job.test}" if binary_dir else job.test
    args = [str(a) for a in bench_setting(profile, options, "osu.args", [])]
    env = {str(k): str(v) for k, v in (bench_setting(profile, options, "osu.env", {}) or {}).items()}
    return Program(argv=(binary, *args), env=env)


SPEC = register(BenchmarkSpec(
    name="osu",
    description="OSU osu_latency / osu_bw / osu_bibw between node pairs against the profile",
    tests=lambda profile, options: tuple(bench_setting(profile, options, "osu.tests", ["osu_latency", "osu_bw"])),
    shapes={"quick": ("pair",), "acceptance": ("pair",)},
    ranks_per_host=lambda profile, shape, options=None: 1,
    program=osu_program,
    parse=parse_osu,
    evaluate=evaluate_osu,
    metric=lambda result: result.max_bandwidth_gbps if result.kind in ("bw", "bibw") else result.small_latency_us,
))
