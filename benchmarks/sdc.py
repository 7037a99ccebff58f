"""Silent data corruption (``sdc``): every GPU computes the same thing; a GPU whose checksum differs from the
majority of identical GPUs is FAIL, named.

    healthcheck run -i site.yaml --benchmarks sdc               # one job per node, all its GPUs
    parse_sdc(text)                                             # SdcResult (pure; ParseError on garbage)
    checksum_verdicts([("gpu001", device, key), ...])          # majority per group, pure

The node program (``benchmarks/sdc_node.py``, shipped with the job, format ``healthcheck-sdc/1``, documented
there and in docs/fleet-lessons.md) runs a fixed-seed FP32 ``C = tanh(C @ B)`` chain on every GPU with
deterministic algorithms and prints one SHA-256 per device. Its launch is ``direct`` (no MPI): the program
runs on the job's node itself. Grading:

- per job (``evaluate``): the program skipped (no PyTorch+CUDA, no nvcc) -> SKIP ``sdc.ran`` saying why; a
  device that raised an error -> FAIL ``sdc.gpu.error``; no device at all -> ERROR ``sdc.ran``;
- across every node of a profile (``fleet``): devices are grouped by (model, implementation, library
  versions, size, seed, iterations); within a group the checksum held by a strict majority is the reference,
  a device with another checksum is FAIL ``sdc.checksum`` naming host and GPU; a group without a strict
  majority is WARN for its dissenting devices (which one is wrong cannot be told); a group of one device
  is SKIP (nothing to compare with). A host whose devices all agree gets one PASS ``sdc.checksum``.

Settings (profile ``settings.benchmarks.sdc`` or run options ``sdc.<key>``): ``python`` (python3), ``impl``
(auto | torch | cuda | numpy; numpy only when set explicitly), ``size`` (2048), ``seed``, ``iterations`` (8),
``devices`` (pseudo devices for numpy, 1).
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

from healthcheck.benchmarks import BenchContext, BenchmarkSpec, Program, bench_setting, register
from healthcheck.core.model import Finding, Status
from healthcheck.core.profiles import Profile
from healthcheck.core.spec import ParseError

FORMAT = "healthcheck-sdc/1"
END = "# healthcheck-sdc end"
NODE_PROGRAM = "sdc_node.py"
DEFAULTS = {"python": "python3", "impl": "auto", "size": 2048, "seed": 20261123, "iterations": 8, "devices": 1}
_REMEDY = ("A GPU that returns wrong results without any error must leave production: rerun `healthcheck run "
           "--benchmarks sdc --limit HOST` to confirm, drain the node, run `dcgmi diag -r 4` (or NVIDIA's field "
           "diagnostic) and RMA the GPU if it is confirmed")


@dataclass(frozen=True)
class SdcDevice:
    index: int
    model: str
    bus: str | None = None
    checksum: str | None = None
    seconds: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class SdcResult:
    impl: str | None
    size: int | None
    seed: int | None
    iterations: int | None
    versions: str | None
    devices: tuple[SdcDevice, ...] = ()
    skip: str | None = None

    def component(self, device: SdcDevice) -> str:
        return f"{'cpu' if self.impl == 'numpy' else 'gpu'}{device.index}"

    def group(self, device: SdcDevice) -> tuple[str, ...]:
        """Devices comparable bit for bit: same model, implementation, libraries and problem."""
        return (device.model, str(self.impl), str(self.versions), str(self.size), str(self.seed), str(self.iterations))


def _fields(line: str) -> dict[str, str]:
    try:
        tokens = shlex.split(line)
    except ValueError as exc:
        raise ParseError(f"sdc: unbalanced quoting in {line[:80]!r}", line) from exc
    return dict(t.split("=", 1) for t in tokens if "=" in t)


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.lstrip("-").isdigit() else None


def _seconds(text: str | None, line: str) -> float | None:
    """A device line's ``seconds=`` (absent: None); anything but a finite number is a malformed line."""
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value):
        raise ParseError(f"sdc: device line with seconds={text[:40]!r}, not a number: {line[:120]!r}", line)
    return value


def parse_sdc(text: str) -> SdcResult:
    """The node program's output (``healthcheck-sdc/1``); other lines (launcher noise) are ignored."""
    header: dict[str, str] = {}
    devices: list[SdcDevice] = []
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
        elif line.startswith("sdc skip "):
            skip = _fields(line[9:]).get("reason") or "no reason given"
        elif line.startswith("sdc "):
            f = _fields(line[4:])
            index = _int(f.get("device"))
            if index is None or not ("checksum" in f or "error" in f):
                raise ParseError(f"sdc: device line without device/checksum/error: {line[:120]!r}", line)
            devices.append(SdcDevice(index=index, model=f.get("model", "unknown"), bus=f.get("bus"),
                                     checksum=f.get("checksum"), error=f.get("error"),
                                     seconds=_seconds(f.get("seconds"), line)))
    if not seen:
        raise ParseError(f"no '# format={FORMAT}' header: not the sdc node program's output", text)
    if not complete:
        raise ParseError(f"sdc output ends before '{END}' (program killed or crashed)", text[-300:])
    return SdcResult(impl=header.get("impl"), size=_int(header.get("size")), seed=_int(header.get("seed")),
                     iterations=_int(header.get("iterations")), versions=header.get("versions"),
                     devices=tuple(devices), skip=skip)


def evaluate_sdc(job: Any, result: SdcResult, ctx: BenchContext) -> list[Finding]:
    """Per node: skipped, device errors, nothing ran. Checksums are compared across nodes in ``fleet_sdc``."""
    host = job.hosts[0]
    if result.skip is not None:
        return [Finding(host=host, check="sdc.ran", status=Status.SKIP, source=job.job_id,
                        message=f"SDC check not run: {result.skip}",
                        remedy="Install PyTorch with CUDA (or the CUDA toolkit's nvcc) on the node to run it")]
    if not result.devices:
        return [Finding(host=host, check="sdc.ran", status=Status.ERROR, source=job.job_id, expected="one checksum "
                        "per GPU", message=f"the sdc program ({result.impl}) reported no device",
                        remedy="Run `nvidia-smi` on the node: the program saw no usable GPU")]
    return [Finding(host=host, check="sdc.gpu.error", component=result.component(d), status=Status.FAIL,
                    value=d.error, expected="the computation completes", source=job.job_id,
                    message=f"{result.component(d)} ({d.model}{', ' + d.bus if d.bus else ''}) could not compute "
                            f"the SDC workload: {d.error}", remedy=_REMEDY)
            for d in result.devices if d.error is not None]


@dataclass(frozen=True)
class DeviceVerdict:
    host: str
    component: str
    device: SdcDevice
    group: tuple[str, ...]
    verdict: str                 # agree, differs, no-majority, alone
    reference: str | None        # the majority checksum (None without a strict majority)
    peers: int                   # devices in the group


def checksum_verdicts(devices: Sequence[tuple[str, str, SdcDevice, tuple[str, ...]]]) -> list[DeviceVerdict]:
    """(host, component, device, group) -> each device's verdict against its group's strict majority. Pure."""
    groups: dict[tuple[str, ...], list[tuple[str, str, SdcDevice]]] = {}
    for host, component, device, group in devices:
        if device.checksum is not None:
            groups.setdefault(group, []).append((host, component, device))
    out = []
    for group, members in groups.items():
        counts: dict[str, int] = {}
        for _, _, d in members:
            counts[d.checksum or ""] = counts.get(d.checksum or "", 0) + 1
        top, top_count = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
        reference = top if top_count * 2 > len(members) else None
        for host, component, d in members:
            if len(members) == 1:
                verdict = "alone"
            elif reference is None:
                verdict = "agree" if len(counts) == 1 else "no-majority"
            else:
                verdict = "agree" if d.checksum == reference else "differs"
            out.append(DeviceVerdict(host, component, d, group, verdict, reference, len(members)))
    return out


def fleet_sdc(parsed: Sequence[tuple[Any, SdcResult]], ctx: BenchContext) -> list[Finding]:
    devices = [(job.hosts[0], result.component(d), d, result.group(d)) for job, result in parsed
               for d in result.devices]
    verdicts = checksum_verdicts(devices)
    findings: list[Finding] = []
    by_host: dict[str, list[DeviceVerdict]] = {}
    for v in verdicts:
        by_host.setdefault(v.host, []).append(v)
    for host, items in sorted(by_host.items()):
        findings += [_device_finding(v) for v in items if v.verdict in ("differs", "no-majority")]
        if all(v.verdict == "agree" for v in items):
            v = items[0]
            findings.append(Finding(
                host=host, check="sdc.checksum", status=Status.PASS, value=len(items), unit="devices",
                expected="the majority checksum of identical devices", source="sdc",
                message=f"all {len(items)} devices ({v.device.model}) agree with the checksum held by the majority "
                        f"of {v.peers} identical devices ({_what(v.group)})"))
        elif all(v.verdict == "alone" for v in items):
            findings.append(Finding(host=host, check="sdc.checksum", status=Status.SKIP, source="sdc",
                                    message=f"the only {items[0].device.model} device in this run: no majority "
                                            "to compare its checksum with"))
    return findings


def _what(group: tuple[str, ...]) -> str:
    _model, impl, versions, size, _seed, iterations = group
    return f"{impl}, {versions}, size {size}, {iterations} iterations"


def _device_finding(v: DeviceVerdict) -> Finding:
    where = f"{v.component} ({v.device.model}{', ' + v.device.bus if v.device.bus and v.device.bus != 'cpu' else ''})"
    if v.verdict == "differs":
        return Finding(host=v.host, check="sdc.checksum", component=v.component, status=Status.FAIL,
                       value=(v.device.checksum or "")[:16], expected=f"{(v.reference or '')[:16]} (majority)",
                       source="sdc", remedy=_REMEDY,
                       message=f"{where} computed checksum {(v.device.checksum or '')[:16]}…, the majority of "
                               f"{v.peers} identical devices computed {(v.reference or '')[:16]}… "
                               f"({_what(v.group)}): silent data corruption on this GPU")
    return Finding(host=v.host, check="sdc.checksum", component=v.component, status=Status.WARN,
                   value=(v.device.checksum or "")[:16], expected="one checksum held by a strict majority",
                   source="sdc", message=f"{where}: the {v.peers} identical devices disagree with no strict "
                                        f"majority ({_what(v.group)}): which one is wrong cannot be told",
                   remedy="Rerun with more nodes of this model (a majority names the bad GPU), or rerun on each "
                          "node alone")


def program_sdc(job: Any, profile: Profile, options: Mapping[str, Any]) -> Program:
    def setting(key: str) -> Any:
        return bench_setting(profile, options, f"sdc.{key}", DEFAULTS[key])

    impl = str(setting("impl"))
    argv = [str(setting("python")), NODE_PROGRAM, "--size", str(int(setting("size"))),
            "--seed", str(int(setting("seed"))), "--iterations", str(int(setting("iterations"))), "--impl", impl]
    if impl == "numpy":
        argv += ["--devices", str(int(setting("devices")))]
    source = (files("healthcheck.benchmarks") / NODE_PROGRAM).read_text()
    return Program(argv=tuple(argv), input_files={NODE_PROGRAM: source})


SPEC = register(BenchmarkSpec(
    name="sdc",
    description="silent data corruption: the same deterministic computation on every GPU, checksums compared "
                "with the majority of identical GPUs across nodes",
    tests=lambda profile, options: ("sdc",),
    shapes={"quick": ("node",), "acceptance": ("node",)},
    ranks_per_host=lambda profile, shape, options=None: 1,
    program=program_sdc,
    parse=parse_sdc,
    evaluate=evaluate_sdc,
    fleet=fleet_sdc,
    launcher="direct",
))
