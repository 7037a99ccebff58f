"""NVIDIA nvloom (``nvloom_cli``): bandwidth across a multi-node NVLink domain, one MPI rank per GPU.

    healthcheck run -i rack07.yaml --benchmarks nvloom      # one job over the rack's 18 trays (4 ranks each)
    result = parse_nvloom(text)
    result.processes[5]     # NvloomProcess(rank=5, host="r07t02", device=1, gpu="NVIDIA GB200 (...)", rack="18...")
    result.testcases[0].matrix.rows[5]     # ("5->41", (612.3,))

Text output of nvloom_cli 1.x (NVIDIA/nvloom ``cli/nvloom_cli.cpp``, ``cli/util.cpp`` ``discoverRanks`` and
``OutputMatrix``, ``cli/util.h``, ``cli/testcases.h``; the project's own ``cli/plot_heatmaps.py`` reads the same
layout). Rank 0 prints::

    nvloom_cli 1.3.0 / git commit: ... / NVCC version: ... / CUDA version: 12.9 / Driver version: 575.57.08
    Allocation strategy: reuse / Buffer size: 512 MiB / Iteration count: 16
    Process  5 (r07t02): device 1: NVIDIA GB200 (00000009:01:00); rackGuid: 1821324190001
    Running bisect_device_to_device_write_sm
    <TAB>0<TAB>                                  column labels (rack GUIDs in gpu_to_rack, "|" separators)
    5->41<TAB>612.30<TAB>                        row label, one value per column; 0 is printed N/A;
                                                 --richOutput adds ";(src-dst)" to a value
    Min/Avg/Max/Total bisect_device_to_device_write_sm 612.30 GB/s
    ExecutionTime bisect_device_to_device_write_sm 2.91 s / Done bisect_device_to_device_write_sm
    testcase WAIVED                              (after Running: the testcase does not apply here)
    [host:dev]: [CUDA_ERROR_...] ... in expression ...   Error running testcase X: ...   (stderr, then exit 1)

Grading is in ``benchmarks/nvloom_grade.py``: the quick test (``bisect_*``: every GPU copies to its peer half a
domain away at once) and the gpu-to-rack sampling (``gpu_to_rack_*``: each GPU's median against sampled peers
of every rack) per GPU, against the profile's ``nvloom.unidir_gbps`` / ``nvloom.bidir_gbps`` and against the
median of the domain; other testcases are parsed and listed, not graded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from healthcheck.benchmarks import NUMBER_RE, BenchmarkSpec, Program, bench_setting, finite, register
from healthcheck.benchmarks.nvloom_grade import evaluate_nvloom, nvloom_metric
from healthcheck.core.profiles import Profile
from healthcheck.core.spec import ParseError

DEFAULT_TESTS = ("bisect_device_to_device_write_sm", "gpu_to_rack_device_to_device_unidir_write_ce")
_PREFIX = re.compile(r"^\s*(?:\[\d+,\d+\]<std(?:out|err)>:|\d+:(?=\s|$))\s?")
_PROCESS = re.compile(r"^Process\s+(\d+)\s+\((.*)\):\s+device\s+(\d+):\s+(.*?);\s+rackGuid:\s*(.*?)\s*$")
_SUMMARY = re.compile(rf"^(Min|Avg|Max|Total)\s+(\S+)\s+({NUMBER_RE}|N/A)\s+(\S+)\s*$")
_CUDA_ERROR = re.compile(r"^\[(?P<host>[^\]:]+):(?P<dev>-?\d+)\]:\s+(?P<msg>.*)$")
_HEADER = {"nvloom_cli": "version", "Driver version:": "driver", "CUDA version:": "cuda"}


@dataclass(frozen=True)
class NvloomProcess:
    """One MPI rank: the host it ran on (as the node printed it), its local GPU, and the rack (chassis serial)."""

    rank: int
    host: str
    device: int
    gpu: str
    rack: str


@dataclass(frozen=True)
class NvloomMatrix:
    """One printed matrix: column labels, rows (label, values; None is ``N/A``: no bandwidth measured)."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, tuple[float | None, ...]], ...]


@dataclass(frozen=True)
class NvloomTestcase:
    name: str
    matrix: NvloomMatrix | None = None
    waived: bool = False
    done: bool = False
    unit: str | None = None
    summary: Mapping[str, float | None] | None = None   # Min/Avg/Max/Total as printed


@dataclass(frozen=True)
class NvloomError:
    """A line on which nvloom (or CUDA under it) gave up; ``host``/``device`` when the line names them."""

    text: str
    host: str | None = None
    device: int | None = None


@dataclass(frozen=True)
class NvloomResult:
    version: str | None
    driver: str | None
    cuda: str | None
    buffer_mib: int | None
    processes: tuple[NvloomProcess, ...]
    testcases: tuple[NvloomTestcase, ...]
    errors: tuple[NvloomError, ...] = ()

    def process(self, rank: int) -> NvloomProcess | None:
        return next((p for p in self.processes if p.rank == rank), None)


class _Builder:
    def __init__(self) -> None:
        self.header: dict[str, str] = {}
        self.processes: list[NvloomProcess] = []
        self.tests: list[dict[str, Any]] = []
        self.errors: list[NvloomError] = []
        self.matrix: dict[str, Any] | None = None

    def line(self, raw: str) -> None:
        line = _PREFIX.sub("", raw, count=1).rstrip()
        stripped = line.strip()
        if self.matrix is not None and not _is_error(stripped) and self._matrix_line(line, stripped):
            return
        if self.matrix is not None and _is_error(stripped):
            self._close()
        tokens = stripped.split()
        if m := _PROCESS.match(stripped):
            self.processes.append(NvloomProcess(int(m[1]), m[2].strip(), int(m[3]), m[4].strip(), m[5]))
        elif len(tokens) == 2 and tokens[0] == "Running":
            self.tests.append({"name": tokens[1], "matrix": None, "waived": False, "done": False, "unit": None,
                               "summary": {}})
            self.matrix = {"columns": None, "rows": []}
        elif stripped == "testcase WAIVED" and self.tests:
            self.tests[-1]["waived"] = True
        elif (m := _SUMMARY.match(stripped)) and self.tests and m[2] == self.tests[-1]["name"]:
            self.tests[-1]["summary"][m[1]] = None if m[3] == "N/A" else finite(m[3], stripped)
            self.tests[-1]["unit"] = m[4]
        elif len(tokens) == 2 and tokens[0] == "Done" and self.tests and tokens[1] == self.tests[-1]["name"]:
            self.tests[-1]["done"] = True
        elif _is_error(stripped):
            m = _CUDA_ERROR.match(stripped)
            self.errors.append(NvloomError(m["msg"][:300], m["host"], int(m["dev"])) if m
                               else NvloomError(stripped[:300]))
        elif stripped.startswith("Buffer size:") and len(tokens) >= 3 and tokens[2].isdigit():
            self.header["buffer_mib"] = tokens[2]
        else:
            for prefix, key in _HEADER.items():
                if stripped.startswith(prefix + " ") and key not in self.header:
                    self.header[key] = stripped[len(prefix):].strip()

    def _matrix_line(self, line: str, stripped: str) -> bool:
        """Consume a line of the current testcase's matrix; False when the line is not part of it. The column
        header starts with a tab (``OutputMatrix::incrementalPrint``)."""
        matrix = self.matrix
        assert matrix is not None
        tokens = [t for t in stripped.split() if t != "|"]
        if matrix["columns"] is None:
            if not tokens or not line[:1].isspace():
                self.matrix = None
                return False
            matrix["columns"] = tuple(tokens)
            return True
        if not tokens or _SUMMARY.match(stripped) or tokens[0] in ("ExecutionTime", "Done", "Running"):
            self._close()
            return False
        if len(tokens) != len(matrix["columns"]) + 1:
            raise ParseError(f"nvloom: matrix row with {len(tokens) - 1} values for {len(matrix['columns'])} "
                             f"columns: {stripped[:120]!r}", stripped)
        matrix["rows"].append((tokens[0], tuple(_cell(t, stripped) for t in tokens[1:])))
        return True

    def _close(self) -> None:
        if self.matrix is not None and self.matrix["columns"] is not None and self.tests:
            self.tests[-1]["matrix"] = NvloomMatrix(self.matrix["columns"], tuple(self.matrix["rows"]))
        self.matrix = None

    def result(self) -> NvloomResult:
        self._close()
        buffer = self.header.get("buffer_mib")
        return NvloomResult(version=self.header.get("version"), driver=self.header.get("driver"),
                            cuda=self.header.get("cuda"), buffer_mib=int(buffer) if buffer else None,
                            processes=tuple(self.processes), errors=tuple(self.errors),
                            testcases=tuple(NvloomTestcase(t["name"], t["matrix"], t["waived"], t["done"], t["unit"],
                                                           dict(t["summary"]) or None) for t in self.tests))


def _is_error(stripped: str) -> bool:
    """A line on which nvloom gives up: its own errors, or a CUDA/ASSERT line tagged ``[host:device]:``."""
    if stripped.startswith(("Error running testcase", "No such testcase", "No such suite")):
        return True
    return bool(_CUDA_ERROR.match(stripped)) and ("in expression" in stripped or "CUDA_ERROR" in stripped)


def _cell(token: str, line: str) -> float | None:
    value = token.split(";", 1)[0]          # --richOutput: "612.30;(5-41)"
    if value == "N/A":
        return None
    if not re.fullmatch(NUMBER_RE, value):
        raise ParseError(f"nvloom: bad value {token!r} in matrix row {line[:120]!r}", token)
    return finite(value, line)


def parse_nvloom(text: str) -> NvloomResult:
    """nvloom_cli's text output (pure). Unknown lines (launcher noise, warnings) are skipped; output that is not
    nvloom's, or a matrix row with the wrong number of values, raises ``ParseError``."""
    builder = _Builder()
    for raw in text.splitlines():
        builder.line(raw)
    result = builder.result()
    if result.version is None and not result.processes and not result.testcases and not result.errors:
        raise ParseError("no 'nvloom_cli' header, 'Process' or 'Running' line: not nvloom output", text[:300])
    return result


def nvloom_ranks_per_host(profile: Profile, shape: str, options: Mapping[str, Any] | None = None) -> int:
    """One rank per GPU (the nvloom README: 4 processes on each of 18 nodes for a 72-GPU GB200 domain)."""
    gpus = bench_setting(profile, options or {}, "nvloom.gpus_per_node")
    if gpus is None:
        exp = profile.expect("gpu.count")
        gpus = exp.value if exp is not None and isinstance(exp.value, int) else 4
    return max(1, int(gpus))


def nvloom_program(job: Any, profile: Profile, options: Mapping[str, Any]) -> Program:
    """``nvloom_cli -t <testcase>`` (a name with a hyphen is a suite: ``-s gpu-to-rack``), with settings
    ``benchmarks.nvloom.binary``, ``buffer_mib``, ``gpu_to_rack_samples``."""
    binary = str(bench_setting(profile, options, "nvloom.binary", "nvloom_cli"))
    argv = [binary, "-s" if "-" in job.test else "-t", job.test]
    buffer_mib = bench_setting(profile, options, "nvloom.buffer_mib", None)
    samples = bench_setting(profile, options, "nvloom.gpu_to_rack_samples", None)
    if buffer_mib:
        argv += ["-b", str(int(buffer_mib))]
    if samples:
        argv += ["--gpuToRackSamples", str(int(samples))]
    return Program(argv=tuple(argv))


def nvloom_tests(profile: Profile, options: Mapping[str, Any]) -> tuple[str, ...]:
    tests = bench_setting(profile, options, "nvloom.tests", list(DEFAULT_TESTS))
    if isinstance(tests, str):
        tests = [t for t in tests.split(",") if t]
    return tuple(str(t) for t in tests)


SPEC = register(BenchmarkSpec(
    name="nvloom",
    description="NVIDIA nvloom: per-GPU bandwidth across a multi-node NVLink domain (bisect quick test, "
                "gpu-to-rack sampling) against the profile and the domain median",
    tests=nvloom_tests,
    shapes={"quick": ("domain",), "acceptance": ("domain",)},
    ranks_per_host=nvloom_ranks_per_host,
    program=nvloom_program,
    parse=parse_nvloom,
    evaluate=evaluate_nvloom,
    metric=nvloom_metric,
))
