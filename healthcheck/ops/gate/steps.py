"""The active tests of ``healthcheck gate``: how each one is launched on this node and how its output is graded.

    ctx = GateContext(host="gpu007", profile=profile, options={}, gpus=8, workdir=Path("/tmp/x"))
    launch = TESTS["copy"].launch(ctx)        # Launch(argv=("nvbandwidth", "-t", ...)) or a str: why not
    findings = TESTS["copy"].grade(ctx, launch, output)

The plug-ins stay pure and apart: ``gpuperf``, ``nvbandwidth``, ``sdc`` and the node NCCL run are graded by
their benchmark specs through ``benchmarks.grade.grade_job`` (a hung or unreadable run is an ERROR naming it,
an exit code alone never passes), ``dcgmi diag -r 1`` by the dcgm probe's parser and evaluator. A tool that is
not installed is a ``str`` from ``launch``: the gate reports it as SKIP, never PASS.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from healthcheck.benchmarks import BenchContext, BenchmarkSpec, nccl_node, nvbandwidth, sdc
from healthcheck.benchmarks import gpuperf as gpuperf_bench
from healthcheck.benchmarks.grade import JobOutcome, grade_job
from healthcheck.benchmarks.plan import Job
from healthcheck.core.model import CommandResult, Finding, Host, Status
from healthcheck.core.profiles import Profile
from healthcheck.core.spec import EvalContext
from healthcheck.probes.dcgm import evaluate_dcgm, parse_dcgm


@dataclass(frozen=True)
class GateContext:
    host: str
    profile: Profile
    options: Mapping[str, Any]            # benchmark settings given on the command line (``--set``)
    gpus: int | None                      # what the node reported (passive gpu probe), else the profile's count
    workdir: Path                         # node programs are written here and run from here
    which: Callable[[str], str | None] = shutil.which


@dataclass(frozen=True)
class Launch:
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)
    tool: str = ""                        # what runs, for messages and grading: "nvbandwidth", "gpuperf", ...

    @property
    def command(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return f"{env} {shlex.join(self.argv)}".strip()


@dataclass(frozen=True)
class StepOutput:
    """What one test returned: ``start_error`` when it could not be started at all."""

    rc: int | None
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    start_error: str | None = None
    timeout_s: float = 0.0


@dataclass(frozen=True)
class GateTest:
    name: str
    what: str
    launch: Callable[[GateContext], Launch | str]
    grade: Callable[[GateContext, Launch, StepOutput], list[Finding]]


def _resolve(ctx: GateContext, argv: tuple[str, ...] | list[str], tool: str) -> tuple[str, ...] | str:
    """argv with its program found on PATH (or as given, when it is a path), else why it cannot run."""
    found = ctx.which(argv[0])
    if found is None:
        return f"{tool}: {argv[0]} not found (not installed, or not on PATH)"
    return (argv[0], *argv[1:])


def _job(ctx: GateContext, name: str, spec: BenchmarkSpec, test: str, ranks: int, timeout_s: float) -> Job:
    return Job(job_id=f"gate.{name}.{ctx.host}", benchmark=spec.name, test=test, shape="node", hosts=(ctx.host,),
               ranks_per_host=ranks, timeout_s=timeout_s)


def _bench_findings(ctx: GateContext, name: str, spec: BenchmarkSpec, test: str, ranks: int, launch: Launch,
                    out: StepOutput) -> tuple[list[Finding], Any, Job]:
    job = _job(ctx, name, spec, test, ranks, out.timeout_s)
    outcome = JobOutcome(job=job, launcher=ctx.host, command=launch.command, rc=out.rc, timed_out=out.timed_out,
                         transport_error=out.start_error, duration_s=out.duration_s, stdout=out.stdout,
                         stderr=out.stderr)
    bench_ctx = BenchContext(ctx.profile, {ctx.host: Host(ctx.host, transport="local")}, ctx.options)
    findings, parsed = grade_job(outcome, spec, bench_ctx)
    return findings, parsed, job


# --- gpuperf: GEMM and memory bandwidth per GPU ----------------------------------------------------------------

def _program(ctx: GateContext, tests: str) -> Launch | str:
    argv = gpuperf_bench.program_argv(ctx.profile, ctx.options, tests=tests)
    resolved = _resolve(ctx, argv, "the gpuperf node program's Python")
    if isinstance(resolved, str):
        return resolved
    return Launch(argv=resolved, files={gpuperf_bench.NODE_PROGRAM: gpuperf_bench.node_program_source()},
                  tool="gpuperf")


def launch_gpuperf(ctx: GateContext) -> Launch | str:
    return _program(ctx, "gemm,hbm")


def grade_program(ctx: GateContext, launch: Launch, out: StepOutput, name: str = "gpuperf") -> list[Finding]:
    return _bench_findings(ctx, name, gpuperf_bench.SPEC, "gpuperf", 1, launch, out)[0]


# --- copy: nvbandwidth when installed, else the node program's copy tests --------------------------------------

def launch_copy(ctx: GateContext) -> Launch | str:
    program = nvbandwidth.program_nvbandwidth(None, ctx.profile, ctx.options)
    found = ctx.which(program.argv[0])
    if found is not None:
        return Launch(argv=program.argv, tool="nvbandwidth")
    return _program(ctx, "h2d,d2h,p2p")


def grade_copy(ctx: GateContext, launch: Launch, out: StepOutput) -> list[Finding]:
    if launch.tool == "nvbandwidth":
        return _bench_findings(ctx, "copy", nvbandwidth.SPEC, "nvbandwidth", 1, launch, out)[0]
    return grade_program(ctx, launch, out, name="copy")


# --- dcgmi diag -r 1 ---------------------------------------------------------------------------------------------

def launch_dcgm(ctx: GateContext) -> Launch | str:
    resolved = _resolve(ctx, ("dcgmi", "diag", "-r", "1", "-j"), "DCGM")
    return resolved if isinstance(resolved, str) else Launch(argv=resolved, tool="dcgmi")


def grade_dcgm(ctx: GateContext, launch: Launch, out: StepOutput) -> list[Finding]:
    if out.start_error is not None or out.timed_out:
        why = out.start_error or f"did not finish within {out.timeout_s:.0f} s: killed"
        return [Finding(host=ctx.host, check="dcgm.diag", status=Status.ERROR, source="gate.dcgm_diag",
                        message=f"dcgmi diag -r 1 {why}",
                        remedy="Check nv-hostengine (systemctl status nvidia-dcgm) and run `dcgmi diag -r 1` by hand")]
    result = CommandResult(host=ctx.host, command_id="dcgmi-diag", stdout=out.stdout.encode(),
                           stderr=out.stderr.encode(), rc=out.rc, duration_s=out.duration_s)
    eval_ctx = EvalContext(host=Host(ctx.host, transport="local"), profile=ctx.profile,
                           options={"dcgm_diag_level": 1})
    return evaluate_dcgm(parse_dcgm({"dcgmi-diag": result}), eval_ctx)


# --- NCCL all_reduce on this node ----------------------------------------------------------------------------------

def launch_nccl(ctx: GateContext) -> Launch | str:
    if not ctx.gpus:
        return "the node's GPU count is unknown (no gpu.count in the profile, the gpu probe did not report one)"
    if ctx.gpus < 2:
        return f"{ctx.gpus} GPU: an all_reduce needs two"
    job = _job(ctx, "nccl", nccl_node.SPEC, "all_reduce_perf", ctx.gpus, 0.0)
    program = nccl_node.program_nccl_node(job, ctx.profile, ctx.options)
    argv = program.argv
    if ctx.which(argv[0]) is None and "/" in argv[0]:
        argv = ("all_reduce_perf", *argv[1:])    # the profile's nccl-tests folder is not here: try PATH
    resolved = _resolve(ctx, argv, "nccl-tests (settings.benchmarks.nccl.binary_dir)")
    return resolved if isinstance(resolved, str) else Launch(argv=resolved, env=program.env, tool="all_reduce_perf")


def grade_nccl(ctx: GateContext, launch: Launch, out: StepOutput) -> list[Finding]:
    return _bench_findings(ctx, "nccl", nccl_node.SPEC, "all_reduce_perf", ctx.gpus or 1, launch, out)[0]


# --- silent data corruption ------------------------------------------------------------------------------------------

def launch_sdc(ctx: GateContext) -> Launch | str:
    program = sdc.program_sdc(None, ctx.profile, ctx.options)
    resolved = _resolve(ctx, program.argv, "the sdc node program's Python")
    if isinstance(resolved, str):
        return resolved
    return Launch(argv=resolved, files=dict(program.input_files), tool="sdc")


def grade_sdc(ctx: GateContext, launch: Launch, out: StepOutput) -> list[Finding]:
    """The program's own findings, then its GPUs' checksums against the node's majority (identical GPUs)."""
    findings, parsed, job = _bench_findings(ctx, "sdc", sdc.SPEC, "sdc", 1, launch, out)
    if parsed is not None and parsed.skip is None and parsed.devices:
        bench_ctx = BenchContext(ctx.profile, {ctx.host: Host(ctx.host, transport="local")}, ctx.options)
        findings += sdc.fleet_sdc([(job, parsed)], bench_ctx)
    return findings


TESTS: dict[str, GateTest] = {t.name: t for t in (
    GateTest("gpuperf", "GEMM throughput and memory bandwidth per GPU (gpuperf node program)",
             launch_gpuperf, grade_program),
    GateTest("copy", "host<->device and GPU<->GPU copy bandwidth (nvbandwidth, else the node program)",
             launch_copy, grade_copy),
    GateTest("dcgm_diag", "dcgmi diag -r 1", launch_dcgm, grade_dcgm),
    GateTest("nccl", "all_reduce_perf on this node's GPUs at one size: busbw floor and transport",
             launch_nccl, grade_nccl),
    GateTest("sdc", "silent data corruption: the same computation on every GPU, checksums compared",
             launch_sdc, grade_sdc),
)}


def write_files(launch: Launch, workdir: Path) -> None:
    """The launch's input files (node programs) into ``workdir``, readable by the test only."""
    workdir.mkdir(parents=True, exist_ok=True)
    for name, text in launch.files.items():
        path = workdir / os.path.basename(name)
        path.write_text(text)
        path.chmod(0o600)
