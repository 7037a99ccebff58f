"""GPU performance micro-tests (``gpuperf``): per GPU, GEMM throughput, memory bandwidth, host<->device and
GPU->GPU copy bandwidth, graded against the profile and against the node's own GPUs.

    healthcheck run -i site.yaml --benchmarks gpuperf          # one job per node, all its GPUs
    healthcheck gate                                           # the pre-job gate runs the same program
    parse_gpuperf(text)                                        # GpuPerfResult (pure; ParseError on garbage)

The node program (``benchmarks/gpuperf_node.py``, format ``healthcheck-gpuperf/1``, documented there) prints one
line per GPU. Grading (``evaluate_gpuperf``, pure):

- the program skipped (no PyTorch/CuPy with CUDA, no nvcc) -> SKIP ``gpuperf.ran`` saying why; no device at
  all -> ERROR; fewer devices than the profile's ``gpu.count`` -> FAIL ``gpuperf.devices``; a device that
  raised an error -> FAIL ``gpuperf.gpu.error`` naming it;
- ``gpuperf.gemm`` against ``gpuperf.gemm.<dtype>_tflops`` (dense TFLOPS in the profile's datatype),
  ``gpuperf.hbm`` against ``gpuperf.hbm_gbps``, ``copy.h2d`` / ``copy.d2h`` / ``copy.d2d`` against
  ``copy.h2d_gbps`` / ``copy.d2h_gbps`` / ``copy.d2d_gbps``, as fractions of the expected value (bands); a
  missing expectation is one SKIP saying so, never PASS;
- each of them against the GPU's siblings on the node (``<check>.siblings``, ``benchmarks.perfgrade``): a
  GPU 30% slower than its siblings is a FAIL with or without a profile.

Settings (profile ``settings.benchmarks.gpuperf`` or run options ``gpuperf.<key>``): ``python`` (python3),
``impl`` (auto | torch | cupy | cuda | numpy, numpy only when set explicitly), ``tests`` (gemm, hbm, h2d, d2h,
p2p), ``dtype`` (else the datatype of the profile's ``gpuperf.gemm.<dtype>_tflops`` key, else bf16),
``gemm_n`` (8192), ``gemm_iters`` (50), ``copy_mib`` (1024), ``copy_iters`` (10), ``devices`` (numpy: 1).
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

from healthcheck.benchmarks import BenchContext, BenchmarkSpec, Program, bench_setting, register
from healthcheck.benchmarks.perfgrade import Reading, grade_readings
from healthcheck.core.model import Finding, Status
from healthcheck.core.profiles import Profile
from healthcheck.core.spec import ParseError

FORMAT = "healthcheck-gpuperf/1"
END = "# healthcheck-gpuperf end"
NODE_PROGRAM = "gpuperf_node.py"
DTYPES = ("fp16", "bf16", "fp32", "tf32")
DEFAULTS = {"python": "python3", "impl": "auto", "tests": "gemm,hbm,h2d,d2h,p2p", "dtype": None, "gemm_n": 8192,
            "gemm_iters": 50, "copy_mib": 1024, "copy_iters": 10, "devices": 1}
_METRICS = ("gemm_tflops", "hbm_gbps", "h2d_gbps", "d2h_gbps", "p2p_gbps")
REMEDY = {
    "gemm": "A GPU that computes slowly is throttled or faulty: check its clocks and clock-event reasons "
            "(nvidia-smi -q -d PERFORMANCE), power and thermals; rerun `healthcheck gate`, then drain it and run "
            "`dcgmi diag -r 3` before returning it to service",
    "hbm": "Low memory bandwidth on one GPU points at its HBM or at a throttled memory clock: check "
           "nvidia-smi -q -d CLOCK,PERFORMANCE and row remapping, then `dcgmi diag -r 3` (memory bandwidth test)",
    "copy": "A slow host<->device or GPU<->GPU path: check the PCIe link (gpu.pcie.* findings, `nvidia-smi -q -d "
            "PCIE`), the NUMA binding, NVLink state (`nvidia-smi nvlink -s`) and the fabric manager",
    "error": "A GPU that cannot run a simple GEMM or copy must leave production: drain the node, read the "
             "kernel log for Xid errors and run `dcgmi diag -r 3`",
}


@dataclass(frozen=True)
class GpuPerfDevice:
    index: int
    model: str
    bus: str | None = None
    gemm_tflops: float | None = None
    hbm_gbps: float | None = None
    h2d_gbps: float | None = None
    d2h_gbps: float | None = None
    p2p_gbps: float | None = None
    p2p_peer: int | None = None
    seconds: float | None = None
    error: str | None = None

    @property
    def label(self) -> str:
        return f"({self.bus})" if self.bus and self.bus != "cpu" else ""


@dataclass(frozen=True)
class GpuPerfResult:
    impl: str | None
    tests: tuple[str, ...]
    dtype: str | None
    gemm_n: int | None
    versions: str | None
    devices: tuple[GpuPerfDevice, ...] = ()
    skip: str | None = None


def _fields(line: str) -> dict[str, str]:
    try:
        tokens = shlex.split(line)
    except ValueError as exc:
        raise ParseError(f"gpuperf: unbalanced quoting in {line[:80]!r}", line) from exc
    return dict(t.split("=", 1) for t in tokens if "=" in t)


def _number(text: str | None, name: str, line: str) -> float | None:
    if text is None or text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or value < 0:
        raise ParseError(f"gpuperf: {name}={text[:40]!r} is not a measurement: {line[:120]!r}", line)
    return value


def _device(line: str) -> GpuPerfDevice:
    f = _fields(line)
    index = f.get("device", "")
    if not index.isdigit():
        raise ParseError(f"gpuperf: device line without a device number: {line[:120]!r}", line)
    values = {m: _number(f.get(m), m, line) for m in (*_METRICS, "seconds")}
    if f.get("error") is None and all(values[m] is None for m in _METRICS):
        raise ParseError(f"gpuperf: device line with neither a measurement nor an error: {line[:120]!r}", line)
    peer = f.get("p2p_peer")
    return GpuPerfDevice(index=int(index), model=f.get("model", "unknown"), bus=f.get("bus"),
                         p2p_peer=int(peer) if peer and peer.isdigit() else None, error=f.get("error"),
                         **values)  # type: ignore[arg-type]


def parse_gpuperf(text: str) -> GpuPerfResult:
    """The node program's output (``healthcheck-gpuperf/1``); other lines (launcher noise) are ignored."""
    header: dict[str, str] = {}
    devices: list[GpuPerfDevice] = []
    skip, complete, seen = None, False, False
    for raw in text.splitlines():
        line = raw.strip()
        if line == END:
            complete = True
        elif line.startswith("# ") and "=" in line:
            fields = _fields(line[2:])
            seen = seen or fields.get("format") == FORMAT
            if "impl" in fields:
                devices = []            # a later implementation replaces an earlier attempt
            header.update(fields)
        elif line.startswith("gpuperf skip "):
            skip = _fields(line[13:]).get("reason") or "no reason given"
        elif line.startswith("gpuperf "):
            devices.append(_device(line[8:]))
    if not seen:
        raise ParseError(f"no '# format={FORMAT}' header: not the gpuperf node program's output", text[:300])
    if not complete:
        raise ParseError(f"gpuperf output ends before '{END}' (program killed or crashed)", text[-300:])
    n = header.get("gemm_n", "")
    return GpuPerfResult(impl=header.get("impl"), tests=tuple(t for t in header.get("tests", "").split(",") if t),
                         dtype=header.get("dtype"), gemm_n=int(n) if n.isdigit() else None,
                         versions=header.get("versions"), devices=tuple(devices), skip=skip)


def evaluate_gpuperf(job: Any, result: GpuPerfResult, ctx: BenchContext) -> list[Finding]:
    """Per node: skipped, device count, errors; then every measurement against the profile and the siblings."""
    host = job.hosts[0]
    if result.skip is not None:
        return [Finding(host=host, check="gpuperf.ran", status=Status.SKIP, source=job.job_id,
                        message=f"GPU micro-tests not run: {result.skip}",
                        remedy="Install PyTorch or CuPy with CUDA (or the CUDA toolkit's nvcc and cuBLAS) on the node")]
    if not result.devices:
        return [Finding(host=host, check="gpuperf.ran", status=Status.ERROR, source=job.job_id,
                        expected="one line per GPU", remedy="Run `nvidia-smi` on the node: the program saw no GPU",
                        message=f"the gpuperf program ({result.impl}) reported no device")]
    out = _count_findings(host, job.job_id, result, ctx.profile)
    out += [Finding(host=host, check="gpuperf.gpu.error", component=f"gpu{d.index}", status=Status.FAIL,
                    value=d.error, expected="the micro-tests complete", source=job.job_id, remedy=REMEDY["error"],
                    message=f"gpu{d.index} ({d.model}{', ' + d.bus if d.bus else ''}) could not run the GPU "
                            f"micro-tests: {d.error}")
            for d in result.devices if d.error is not None]
    return out + measurement_findings(host, job.job_id, result, ctx.profile)


def _count_findings(host: str, source: str, result: GpuPerfResult, profile: Profile) -> list[Finding]:
    exp = profile.expect("gpu.count")
    if result.impl == "numpy" or exp is None or not isinstance(exp.value, int) or len(result.devices) >= exp.value:
        return []
    return [Finding(host=host, check="gpuperf.devices", status=Status.FAIL, value=len(result.devices), unit="GPUs",
                    expected=f">= {exp.value}", source=source, remedy=REMEDY["error"],
                    message=f"{result.impl} sees {len(result.devices)} CUDA devices, the profile {profile.name} "
                            f"expects {exp.value} GPUs (a GPU the driver lists but CUDA cannot use)")]


def gemm_key(dtype: str | None) -> str:
    return f"gpuperf.gemm.{dtype or 'bf16'}_tflops"


def measurement_findings(host: str, source: str, result: GpuPerfResult, profile: Profile) -> list[Finding]:
    ok = [d for d in result.devices if d.error is None]
    out: list[Finding] = []
    kinds = (("gpuperf.gemm", gemm_key(result.dtype), "gemm_tflops", f"{result.dtype or ''} GEMM".strip(),
              "TFLOPS", REMEDY["gemm"]),
             ("gpuperf.hbm", "gpuperf.hbm_gbps", "hbm_gbps", "memory bandwidth (device copy)", "GB/s", REMEDY["hbm"]),
             ("copy.h2d", "copy.h2d_gbps", "h2d_gbps", "host-to-device copy", "GB/s", REMEDY["copy"]),
             ("copy.d2h", "copy.d2h_gbps", "d2h_gbps", "device-to-host copy", "GB/s", REMEDY["copy"]))
    for check, key, field, what, unit, remedy in kinds:
        readings = [Reading(f"gpu{d.index}", getattr(d, field), d.label) for d in ok if getattr(d, field) is not None]
        out += grade_readings(host, check, key, readings, profile, source=source, remedy=remedy, what=what, unit=unit)
    p2p = [Reading(f"gpu{d.index}->gpu{d.p2p_peer}", d.p2p_gbps) for d in ok
           if d.p2p_gbps is not None and d.p2p_peer is not None]
    return out + grade_readings(host, "copy.d2d", "copy.d2d_gbps", p2p, profile, source=source,
                                remedy=REMEDY["copy"], what="GPU-to-GPU copy", unit="GB/s")


def profile_dtype(profile: Profile) -> str:
    """The GEMM datatype the profile grades (its ``gpuperf.gemm.<dtype>_tflops`` key), else bf16."""
    for dtype in DTYPES:
        if profile.expect(gemm_key(dtype)) is not None:
            return dtype
    return "bf16"


def program_argv(profile: Profile, options: Mapping[str, Any], program: str = NODE_PROGRAM,
                 tests: str | None = None) -> list[str]:
    """The node program's argv from the settings (``tests`` overrides the setting: the gate's copy split)."""
    def setting(key: str) -> Any:
        return bench_setting(profile, options, f"gpuperf.{key}", DEFAULTS[key])

    impl = str(setting("impl"))
    argv = [str(setting("python")), program, "--tests", tests or str(setting("tests")),
            "--dtype", str(setting("dtype") or profile_dtype(profile)), "--gemm-n", str(int(setting("gemm_n"))),
            "--gemm-iters", str(int(setting("gemm_iters"))), "--copy-mib", str(int(setting("copy_mib"))),
            "--copy-iters", str(int(setting("copy_iters"))), "--impl", impl]
    if impl == "numpy":
        argv += ["--devices", str(int(setting("devices")))]
    return argv


def node_program_source() -> str:
    return (files("healthcheck.benchmarks") / NODE_PROGRAM).read_text()


def program_gpuperf(job: Any, profile: Profile, options: Mapping[str, Any]) -> Program:
    return Program(argv=tuple(program_argv(profile, options)), input_files={NODE_PROGRAM: node_program_source()})


def metric_gpuperf(result: GpuPerfResult) -> float | None:
    """The slowest GPU's GEMM TFLOPS: the node's headline number."""
    values = [d.gemm_tflops for d in result.devices if d.gemm_tflops is not None]
    return min(values) if values else None


SPEC = register(BenchmarkSpec(
    name="gpuperf",
    description="GPU micro-tests: GEMM throughput, memory bandwidth and copy bandwidth per GPU, graded against "
                "the profile and the node's own GPUs",
    tests=lambda profile, options: ("gpuperf",),
    shapes={"quick": ("node",), "acceptance": ("node",)},
    ranks_per_host=lambda profile, shape, options=None: 1,
    program=program_gpuperf,
    parse=parse_gpuperf,
    evaluate=evaluate_gpuperf,
    metric=metric_gpuperf,
    launcher="direct",
))
