"""NVIDIA nvbandwidth: host<->device, device<->device and device-local copy bandwidth, graded per path.

    healthcheck run -i site.yaml --benchmarks nvbandwidth      # one job per node (acceptance runs)
    result = parse_nvbandwidth(text)
    result.testcases[0].name, result.testcases[0].matrices[0].cells()
    # "host_to_device_memcpy_ce", [("cpu0", "gpu0", 55.21), ("cpu0", "gpu1", 55.18), ...]

Text output of nvbandwidth v0.2-v0.8 (NVIDIA/nvbandwidth ``output.cpp``, ``inline_common.h``), as published in
the project's README and issues (#15 v0.2 RTX 4090, #34 v0.7 A100 with a data-verification ASSERT, #42 v0.8
A100, #48 v0.8 H20-3e, #50 v0.8 A6000 with ``N/A`` cells)::

    nvbandwidth Version: v0.8
    CUDA Runtime Version: 12060 / CUDA Driver Version: 12060 / Driver Version: 550.127.08
    <hostname>                                  (v0.8)
    Device 0: NVIDIA H20-3e (00000000:18:00)
    Running host_to_device_memcpy_ce.
    memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)
               0         1 ...                  (column header; rows: a label, then one value per column)
     0     55.21     55.18 ...
    SUM host_to_device_memcpy_ce 441.50
    Waived:                                     (a test that does not apply here: no name is printed)
    Error: <message>  /  ERROR: Testcase x not found!
    ASSERT in expression ... : memcpy.cpp:165   (stderr; after " Invalid value when checking the pattern at 0x...")

Grading per path (``evaluate_nvbandwidth``, pure): the host-to-device and device-to-host copies against
``copy.h2d_gbps`` / ``copy.d2h_gbps`` per GPU, GPU-to-GPU copies against ``copy.d2d_gbps`` per ordered pair,
``device_local_copy`` against ``gpuperf.hbm_gbps`` (x2: a copy reads and writes each byte, as the maintainers
explain in NVIDIA/nvbandwidth#48), each also against its sibling paths on the node. A data-verification
failure is FAIL ``copy.verify`` (a copy delivered wrong bytes); an aborted tool or a failed testcase is ERROR;
``N/A`` between two GPUs is a missing peer path, FAIL when the profile expects GPU-to-GPU bandwidth.
Bidirectional and latency testcases are parsed and listed, not graded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from healthcheck.benchmarks import NUMBER_RE, BenchContext, BenchmarkSpec, Program, bench_setting, finite, register
from healthcheck.benchmarks.perfgrade import Reading, grade_readings
from healthcheck.core.model import Finding, Status
from healthcheck.core.spec import ParseError

# testcase -> (path kind, profile key, scale to the key's unit)
PATHS = {
    "host_to_device_memcpy_ce": ("h2d", "copy.h2d_gbps", 1.0),
    "host_to_device_memcpy_sm": ("h2d", "copy.h2d_gbps", 1.0),
    "device_to_host_memcpy_ce": ("d2h", "copy.d2h_gbps", 1.0),
    "device_to_host_memcpy_sm": ("d2h", "copy.d2h_gbps", 1.0),
    "device_to_device_memcpy_read_ce": ("d2d", "copy.d2d_gbps", 1.0),
    "device_to_device_memcpy_write_ce": ("d2d", "copy.d2d_gbps", 1.0),
    "device_to_device_memcpy_read_sm": ("d2d", "copy.d2d_gbps", 1.0),
    "device_to_device_memcpy_write_sm": ("d2d", "copy.d2d_gbps", 1.0),
    "device_local_copy": ("hbm", "gpuperf.hbm_gbps", 2.0),
}
DEFAULT_TESTS = ("host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "device_to_device_memcpy_read_ce")
_WHAT = {"h2d": "host-to-device copy", "d2h": "device-to-host copy", "d2d": "GPU-to-GPU copy",
         "hbm": "device-local copy (memory traffic, 2x the copy rate)"}
_DEVICE = re.compile(r"^Device (\d+): (.*?)(?: \(([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.\d)?)\))?\s*$")
_DESCRIPTION = re.compile(r"\((?:GB/s|ns|us)\)\s*$")
_HEADER_KEYS = {"nvbandwidth Version": "version", "CUDA Runtime Version": "cuda_runtime",
                "Driver Version": "driver"}
REMEDY = {
    "verify": "A copy delivered wrong data: drain the node, check Xid/ECC/row-remap findings and run "
              "`dcgmi diag -r 3`; rerun nvbandwidth with a smaller --bufferSize to confirm (NVIDIA/nvbandwidth#34)",
    "copy": "A slow or missing copy path: check the PCIe link of that GPU (gpu.pcie.* findings), its NUMA binding, "
            "NVLink state (`nvidia-smi nvlink -s`), peer access (`nvidia-smi topo -p2p r`) and the fabric manager",
    "hbm": "Low memory bandwidth on one GPU points at its HBM or a throttled memory clock: check nvidia-smi -q -d "
           "CLOCK,PERFORMANCE and row remapping, then `dcgmi diag -r 3` (memory bandwidth test)",
    "run": "Read raw output of the nvbandwidth job: a CUDA error names the GPU or call that failed; check that the "
           "binary was built for this driver's CUDA version",
}


@dataclass(frozen=True)
class NvbMatrix:
    """One printed matrix: its description line, column labels and rows (label, values; None is ``N/A``)."""

    description: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, tuple[float | None, ...]], ...]

    @property
    def source_kind(self) -> str:
        return "gpu" if "GPU(row)" in self.description else "cpu"

    def cells(self) -> list[tuple[str, str, float | None]]:
        """(from, to, value) per cell, following the description's arrow: ``GPU(row) <- GPU(column)`` copies
        from the column to the row; ``local GPU(column)`` names only the column's GPU (from == to)."""
        out = []
        row_kind = "gpu" if "GPU(row)" in self.description else "cpu"
        backwards = "<-" in self.description and "<->" not in self.description
        for label, values in self.rows:
            for column, value in zip(self.columns, values, strict=True):
                row, col = f"{row_kind}{label}", f"gpu{column}"
                if "local" in self.description:
                    out.append((col, col, value))
                else:
                    out.append((col, row, value) if backwards else (row, col, value))
        return out


@dataclass(frozen=True)
class NvbTestcase:
    name: str
    matrices: tuple[NvbMatrix, ...] = ()
    sum_value: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class NvbResult:
    version: str | None
    cuda_runtime: str | None
    driver: str | None
    devices: tuple[tuple[int, str, str | None], ...]
    testcases: tuple[NvbTestcase, ...]
    waived: int = 0
    errors: tuple[str, ...] = ()          # tool-level: ASSERT / CUDA errors, unknown testcases
    corruption: str | None = None         # the data-verification message, when a copy delivered wrong bytes


class _Builder:
    def __init__(self) -> None:
        self.header: dict[str, str] = {}
        self.devices: list[tuple[int, str, str | None]] = []
        self.tests: list[dict[str, Any]] = []
        self.waived = 0
        self.errors: list[str] = []
        self.corruption: str | None = None
        self.matrix: dict[str, Any] | None = None
        self.seen = False

    def line(self, line: str) -> None:
        stripped = line.strip()
        if self.matrix is not None and self._matrix_line(stripped):
            return
        key, sep, value = stripped.partition(":")
        if sep and key in _HEADER_KEYS:
            self.header[_HEADER_KEYS[key]] = value.strip()
            self.seen = True
        elif m := _DEVICE.match(stripped):
            self.devices.append((int(m[1]), m[2].strip(), m[3]))
        elif stripped.startswith("Running ") and stripped.endswith("."):
            self.tests.append({"name": stripped[8:-1].strip(), "matrices": [], "sum": None, "error": None})
            self.seen = True
        elif _DESCRIPTION.search(stripped):
            if not self.tests:  # an excerpt without its "Running" line: the SUM line names the testcase
                self.tests.append({"name": "", "matrices": [], "sum": None, "error": None})
            self.matrix = {"description": stripped, "columns": None, "rows": []}
            self.seen = True
        elif stripped.startswith("SUM ") and self.tests:
            parts = stripped.split()
            if len(parts) == 3 and re.fullmatch(NUMBER_RE, parts[2]):
                self.tests[-1]["sum"] = finite(parts[2], stripped)
                self.tests[-1]["name"] = self.tests[-1]["name"] or parts[1]
        elif stripped.startswith("Waived"):
            self.waived += 1
        elif stripped.startswith(("Error:", "ERROR:")):
            self._error(stripped.split(":", 1)[1].strip() or stripped)
        elif stripped.startswith("Invalid value when checking the pattern"):
            self.corruption = stripped
        elif stripped.startswith("ASSERT in expression") or re.match(r"^\[(CUDA|cuda)\w*\]", stripped) \
                or " in expression " in stripped:
            self.errors.append(stripped[:300])

    def _error(self, text: str) -> None:
        if self.tests and self.tests[-1]["error"] is None and not text.startswith("Testcase "):
            self.tests[-1]["error"] = text
        else:
            self.errors.append(text)

    def _matrix_line(self, stripped: str) -> bool:
        """Consume a line of the current matrix; False when the matrix ended (the line is not part of it)."""
        matrix = self.matrix
        assert matrix is not None
        tokens = stripped.split()
        if matrix["columns"] is None:
            if tokens and all(t.isdigit() for t in tokens):
                matrix["columns"] = tuple(tokens)
                return True
            raise ParseError(f"nvbandwidth: no column header after {matrix['description']!r}", stripped)
        if tokens and len(tokens) == len(matrix["columns"]) + 1 and tokens[0].isdigit():
            if not all(t == "N/A" or re.fullmatch(NUMBER_RE, t) for t in tokens[1:]):
                raise ParseError(f"nvbandwidth: bad value in matrix row {stripped[:120]!r}", stripped)
            matrix["rows"].append((tokens[0], tuple(None if t == "N/A" else finite(t, stripped) for t in tokens[1:])))
            return True
        if tokens and tokens[0].isdigit() and not stripped.startswith("SUM"):
            raise ParseError(f"nvbandwidth: matrix row with {len(tokens) - 1} values for "
                             f"{len(matrix['columns'])} columns: {stripped[:120]!r}", stripped)
        self._close()
        return False

    def _close(self) -> None:
        if self.matrix is not None and self.matrix["columns"] is not None:
            self.tests[-1]["matrices"].append(NvbMatrix(self.matrix["description"], self.matrix["columns"],
                                                        tuple(self.matrix["rows"])))
        self.matrix = None

    def result(self) -> NvbResult:
        self._close()
        return NvbResult(version=self.header.get("version"), cuda_runtime=self.header.get("cuda_runtime"),
                         driver=self.header.get("driver"), devices=tuple(self.devices),
                         testcases=tuple(NvbTestcase(t["name"], tuple(t["matrices"]), t["sum"], t["error"])
                                         for t in self.tests),
                         waived=self.waived, errors=tuple(self.errors), corruption=self.corruption)


def parse_nvbandwidth(text: str) -> NvbResult:
    """nvbandwidth's plain-text output (pure). Lines it does not know (hostname, NOTE, VERBOSE samples, launcher
    noise) are skipped; output that is not nvbandwidth's, or a matrix cut in the middle of a row, raises
    ``ParseError``."""
    builder = _Builder()
    for line in text.splitlines():
        builder.line(line)
    result = builder.result()
    if not builder.seen and result.corruption is None and not result.errors:
        raise ParseError("no 'nvbandwidth Version:' header nor 'Running <testcase>.' line: not nvbandwidth output",
                         text[:300])
    return result


def evaluate_nvbandwidth(job: Any, result: NvbResult, ctx: BenchContext) -> list[Finding]:
    host = job.hosts[0]
    out: list[Finding] = []
    if result.corruption is not None:
        running = result.testcases[-1].name if result.testcases else "a copy"
        out.append(Finding(host=host, check="copy.verify", status=Status.FAIL, source=job.job_id,
                           value=result.corruption[:200], expected="every copied byte verified",
                           remedy=REMEDY["verify"],
                           message=f"nvbandwidth's data check after {running} found a wrong value: "
                                   f"{result.corruption[:200]}"))
    elif result.errors:
        out.append(Finding(host=host, check="nvbandwidth.run", status=Status.ERROR, source=job.job_id,
                           remedy=REMEDY["run"], message=f"nvbandwidth stopped: {'; '.join(result.errors[:2])}"))
    if result.waived:
        out.append(Finding(host=host, check="nvbandwidth.waived", status=Status.SKIP, source=job.job_id,
                           value=result.waived, message=f"{result.waived} testcase(s) waived by nvbandwidth (not "
                                                        "supported on this node, e.g. fewer than 2 GPUs)"))
    aborted = result.corruption is not None or bool(result.errors)
    for i, test in enumerate(result.testcases):
        if aborted and i == len(result.testcases) - 1 and not test.matrices and test.error is None:
            continue                       # the testcase the abort above interrupted: already reported
        out += _testcase_findings(host, job.job_id, test, ctx)
    return out


def _testcase_findings(host: str, source: str, test: NvbTestcase, ctx: BenchContext) -> list[Finding]:
    check = f"nvbandwidth.{test.name}"
    if test.error is not None:
        return [Finding(host=host, check=check, status=Status.ERROR, source=source, remedy=REMEDY["run"],
                        message=f"{test.name} failed: {test.error[:200]}")]
    path = PATHS.get(test.name)
    if path is None or len(test.matrices) != 1:
        why = "no result matrix (killed during the testcase?)" if not test.matrices else "measured, not graded " \
              "(only the unidirectional copies and the local copy are graded per path)"
        status = Status.ERROR if not test.matrices else Status.SKIP
        return [Finding(host=host, check=check, status=status, source=source, message=f"{test.name}: {why}")]
    kind, key, scale = path
    readings, missing = [], []
    for src, dst, value in test.matrices[0].cells():
        if kind == "d2d" and src == dst:
            continue                       # the diagonal: N/A (0.00 before v0.7), a GPU with itself
        component = f"{src}->{dst}" if kind == "d2d" else dst if kind == "h2d" else src
        if value is None:
            missing.append(component)
        else:
            readings.append(Reading(component, value))
    out = _missing_findings(host, check, key, missing, source, ctx, test.name)
    return out + grade_readings(host, check, key, readings, ctx.profile, source=source,
                                remedy=REMEDY["hbm" if kind == "hbm" else "copy"], what=_WHAT[kind], unit="GB/s",
                                scale=scale)


def _missing_findings(host: str, check: str, key: str, missing: list[str], source: str, ctx: BenchContext,
                      name: str) -> list[Finding]:
    if not missing:
        return []
    expected = ctx.profile.expect(key) is not None
    return [Finding(host=host, check=f"{check}.path", component=c, source=source,
                    status=Status.FAIL if expected else Status.SKIP, value="N/A",
                    expected=f"a measured path ({key} in profile {ctx.profile.name})" if expected else None,
                    remedy=REMEDY["copy"] if expected else None,
                    message=f"{c}: {name} printed N/A (no such path: no peer access between these GPUs)"
                            + ("" if expected else f"; no expectation {key} in profile {ctx.profile.name}"))
            for c in missing]


def program_nvbandwidth(job: Any, profile: Any, options: Mapping[str, Any]) -> Program:
    """``nvbandwidth -t <testcase>... -b <MiB> -i <samples>`` (settings ``benchmarks.nvbandwidth.binary``,
    ``tests``, ``buffer_mib``, ``samples``)."""
    binary = str(bench_setting(profile, options, "nvbandwidth.binary", "nvbandwidth"))
    tests = bench_setting(profile, options, "nvbandwidth.tests", list(DEFAULT_TESTS))
    if isinstance(tests, str):
        tests = [t for t in tests.split(",") if t]
    argv = [binary, *(a for t in tests for a in ("-t", str(t)))]
    buffer_mib = bench_setting(profile, options, "nvbandwidth.buffer_mib", None)
    samples = bench_setting(profile, options, "nvbandwidth.samples", None)
    if buffer_mib:
        argv += ["-b", str(int(buffer_mib))]
    if samples:
        argv += ["-i", str(int(samples))]
    return Program(argv=tuple(argv))


SPEC = register(BenchmarkSpec(
    name="nvbandwidth",
    description="NVIDIA nvbandwidth: host<->device, GPU<->GPU and device-local copy bandwidth graded per path",
    tests=lambda profile, options: ("nvbandwidth",),
    shapes={"quick": ("node",), "acceptance": ("node",)},
    ranks_per_host=lambda profile, shape, options=None: 1,
    program=program_nvbandwidth,
    parse=parse_nvbandwidth,
    evaluate=evaluate_nvbandwidth,
    launcher="direct",
))
