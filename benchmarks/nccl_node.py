"""One node's NCCL all_reduce at one size, for the pre-job gate: nccl-tests' grading plus which transport
connected the node's GPUs (peer-to-peer over NVLink/PCIe, host shared memory, or a network).

    result = parse_nccl_node(text)            # NcclNodeResult(tests=NcclTestResult, paths=NodePaths)
    result.paths.kind                         # "P2P", "SHM", "NET", "Socket", or None (no channel lines)
    evaluate_nccl_node(job, result, ctx)      # evaluate_nccl's findings + nccl.all_reduce.node.transport

``all_reduce_perf -b SIZE -e SIZE -g <GPUs>`` runs one process driving every GPU (no MPI). With
``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT`` NCCL prints one line per channel it connects, in the layouts of
NCCL 2.x published in these threads::

    node-0:5124:5182 [7] NCCL INFO Channel 14/0 : 7[7] -> 6[6] via P2P/CUMEM     (corpus nccl-tests, issue #360)
    hw14:798:813 [3] NCCL INFO Channel 02/0 : 3[3] -> 4[4] via P2P/direct pointer (NVIDIA/nccl-tests#213)
    host:3884652:3884740 [7] NCCL INFO Channel 01 : 7[7] -> 2[2] via SHM/direct/direct (NVIDIA/nccl#1817)
    host:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA

Inside one node the GPUs should talk peer-to-peer (P2P). SHM means through host memory (P2P disabled or
broken: NCCL_P2P_DISABLE, an IOMMU/ACS setting, NVLink down); a NET channel inside one node means NCCL found no
local path at all, and ``NET/Socket`` is a silent fallback to TCP: FAIL whatever the profile says. Otherwise
the worst transport seen is graded against the profile's ``nccl.node.transport`` (SKIP without one); no channel
line at all is SKIP saying how to get them. busbw is graded by ``evaluate_nccl`` against
``nccl.all_reduce.node.busbw_gbps`` (bands: the floor is the acceptable fraction of that value).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from healthcheck.benchmarks import BenchContext, BenchmarkSpec, Program, bench_setting
from healthcheck.benchmarks.nccl import NcclTestResult, evaluate_nccl, parse_nccl_tests
from healthcheck.benchmarks.plan import Job
from healthcheck.core.grading import finding_from_expectation
from healthcheck.core.model import Finding, Status

_CHANNEL = re.compile(r"NCCL INFO\s+Channel\s+\d+(?:/\d+)?\s*:\s*\d+\[\w+\]\s*->\s*\d+\[\w+\]"
                      r"(?:\s*\[(?:send|receive)\])?\s+via\s+(?P<via>\S+(?: pointer)?)")
_NVLS = re.compile(r"NCCL INFO\s+NVLS multicast support is available")
_RANK = {"P2P": 0, "SHM": 1, "NET": 2, "Socket": 3}
TRANSPORT_KEY = "nccl.node.transport"
DEFAULT_BYTES = "2G"
REMEDY_SOCKET = ("NCCL connected this node's own GPUs over TCP sockets: peer-to-peer and shared memory are both "
                 "unavailable; check NCCL_P2P_DISABLE/NCCL_SHM_DISABLE in the environment, the fabric manager "
                 "(nvidia-fabricmanager) and `nvidia-smi topo -p2p r`")
REMEDY_PATH = ("NCCL did not use peer-to-peer between this node's GPUs: check NVLink (`nvidia-smi nvlink -s`), the "
               "fabric manager, `nvidia-smi topo -p2p r`, IOMMU/ACS settings and NCCL_P2P_DISABLE / NCCL_P2P_LEVEL")


@dataclass(frozen=True)
class NodePaths:
    """Channels NCCL connected, by what followed ``via`` (``P2P/CUMEM``, ``SHM/direct/direct``, ``NET/IB/0``)."""

    channels: Mapping[str, int] = field(default_factory=dict)
    nvls: bool = False
    info_lines: int = 0

    @property
    def kind(self) -> str | None:
        """The worst transport seen: ``Socket`` > ``NET`` > ``SHM`` > ``P2P``; None without channel lines."""
        kinds = {_kind(via) for via in self.channels}
        return max(kinds, key=lambda k: _RANK[k]) if kinds else None


def _kind(via: str) -> str:
    parts = via.split("/")
    if parts[0] == "NET":
        return "Socket" if len(parts) > 1 and parts[1] == "Socket" else "NET"
    return parts[0] if parts[0] in _RANK else "NET"


def parse_node_paths(text: str) -> NodePaths:
    """Channel lines by transport (pure; any text, never raises)."""
    channels: dict[str, int] = {}
    nvls, info = False, 0
    for line in text.splitlines():
        if "NCCL INFO" not in line:
            continue
        info += 1
        if m := _CHANNEL.search(line):
            channels[m["via"]] = channels.get(m["via"], 0) + 1
        elif _NVLS.search(line):
            nvls = True
    return NodePaths(channels=channels, nvls=nvls, info_lines=info)


@dataclass(frozen=True)
class NcclNodeResult:
    tests: NcclTestResult
    paths: NodePaths


def parse_nccl_node(text: str) -> NcclNodeResult:
    """nccl-tests' table (``parse_nccl_tests``, ParseError on garbage) and the channel lines."""
    return NcclNodeResult(tests=parse_nccl_tests(text), paths=parse_node_paths(text))


def evaluate_nccl_node(job: Job, result: NcclNodeResult, ctx: BenchContext) -> list[Finding]:
    return evaluate_nccl(job, result.tests, ctx) + evaluate_node_paths(job, result.paths, ctx)


def evaluate_node_paths(job: Job, paths: NodePaths, ctx: BenchContext) -> list[Finding]:
    host = job.hosts[0]
    check = "nccl.all_reduce.node.transport"
    kind = paths.kind
    used = ", ".join(f"{via} x{n}" for via, n in sorted(paths.channels.items())) or "none"
    nvls = "; NVLS multicast available" if paths.nvls else ""
    if kind is None:
        why = ("no NCCL INFO line: run all_reduce_perf with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT" if not
               paths.info_lines else "the NCCL INFO lines name no channel (NCCL_DEBUG_SUBSYS without INIT?)")
        return [Finding(host=host, check=check, status=Status.SKIP, source=job.job_id,
                        message=f"transport between this node's GPUs unknown: {why}")]
    if kind == "Socket":
        return [Finding(host=host, check=check, status=Status.FAIL, value="Socket", source=job.job_id,
                        expected="P2P (NVLink or PCIe peer-to-peer)", remedy=REMEDY_SOCKET,
                        message=f"NCCL connected this node's GPUs over TCP sockets ({used}): a silent fallback, "
                                "the busbw measured is not the node's")]
    exp = ctx.profile.expect(TRANSPORT_KEY)
    if exp is None:
        return [Finding(host=host, check=check, status=Status.SKIP, value=kind, source=job.job_id,
                        message=f"NCCL connected this node's GPUs via {kind} ({used}{nvls}); no expectation "
                                f"{TRANSPORT_KEY} in profile {ctx.profile.name}")]
    found = finding_from_expectation(host, check, exp, kind, source=job.job_id, remedy=REMEDY_PATH,
                                     profile=ctx.profile)
    return [Finding(host=found.host, check=found.check, status=found.status, value=found.value,
                    expected=found.expected, remedy=found.remedy, source=found.source,
                    message=f"{found.message}; channels: {used}{nvls}")]


def gpu_count(profile: Any, options: Mapping[str, Any]) -> int | None:
    """The GPUs to drive: ``nccl_node.gpus`` (the gate passes what the node reported), else the profile's
    ``gpu.count``; None when neither says."""
    gpus = options.get("nccl_node.gpus")
    if gpus is None:
        exp = profile.expect("gpu.count")
        gpus = exp.value if exp is not None and isinstance(exp.value, int) else None
    return int(gpus) if gpus else None


def program_nccl_node(job: Job, profile: Any, options: Mapping[str, Any]) -> Program:
    """``all_reduce_perf -b S -e S -g N -c 1 -n ITERS -w WARMUP`` (nccl-tests from ``nccl.binary_dir``), with
    the profile's NCCL env and NCCL_DEBUG=INFO for the channel lines."""
    binary_dir = str(bench_setting(profile, options, "nccl.binary_dir", "") or "")
    binary = f"{binary_dir.rstrip('/')}/all_reduce_perf" if binary_dir else "all_reduce_perf"
    size = str(bench_setting(profile, options, "nccl_node.bytes", DEFAULT_BYTES))
    argv = (binary, "-b", size, "-e", size, "-g", str(job.ranks_per_host), "-c", "1",
            "-n", str(bench_setting(profile, options, "nccl_node.iters", 20)),
            "-w", str(bench_setting(profile, options, "nccl_node.warmup_iters", 5)))
    env = {**{str(k): str(v) for k, v in (bench_setting(profile, options, "nccl.env", {}) or {}).items()},
           "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT"}
    return Program(argv=argv, env=env)


# Not registered: the gate runs it (acceptance runs have the ``nccl`` benchmark's node shape).
SPEC = BenchmarkSpec(
    name="nccl",
    description="one node's all_reduce at one size: data, busbw floor and the transport between its GPUs",
    tests=lambda profile, options: ("all_reduce_perf",),
    shapes={"quick": ("node",)},
    ranks_per_host=lambda profile, shape, options=None: gpu_count(profile, options or {}) or 1,
    program=program_nccl_node,
    parse=parse_nccl_node,
    evaluate=evaluate_nccl_node,
    launcher="direct",
)
