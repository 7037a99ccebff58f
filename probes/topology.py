"""Topology probe: the ``nvidia-smi topo -m`` link matrix, graded against the profile.

    nvidia-smi topo -m   ->          GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity
                            GPU0     X      NV18    PXB     0-55            0
                            ...
                            NIC Legend:
                              NIC0: mlx5_0

Every GPU pair must be at the profile's ``NV#`` (``topology.gpu_pair.nvlink``), every GPU must
have a NIC at PIX/PXB when the profile expects GPUDirect RDMA (``topology.gpu_nic.pcie``), and
the matrix must show the profile's NIC count (``topology.nic.count``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from healthcheck.core.grading import ValueGrades, expected_text, finding_from_expectation
from healthcheck.core.model import CommandResult, Finding, Status
from healthcheck.core.spec import EvalContext, ParseError, ProbeSpec
from healthcheck.probes import register
from healthcheck.probes.parse_memo import memoized

SOURCE = "nvidia-smi-topo"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CLASS = r"NV\d{1,4}|SYS|SOC|NODE|PHB|PXB|PIX|X"   # NV<links>: bounded, so int() never sees a digit run
_P2P_CLASS = r"OK|CNS|GNS|TNS|NS|U|X"
_ONE_CLASS = re.compile(rf"^(?:{_CLASS})$")
_FUSED = re.compile(rf"^(?:{_CLASS})+$")
_ONE_P2P = re.compile(rf"^(?:{_P2P_CLASS})$")
_EXTRAS = re.compile(r"CPU Affinity|NUMA Affinity|GPU NUMA ID")
_CPU_LIST = re.compile(r"^(?:N/A|\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*)$")
_LEGEND_NIC = re.compile(r"^\s*(NIC\d+):\s*(\S+)\s*$")
# PCIe distance, nearest first (nvidia-smi's own legend order); NV# is not a PCIe path.
PCIE_ORDER = ("PIX", "PXB", "PHB", "NODE", "SYS", "SOC")


@dataclass(frozen=True)
class TopoRow:
    """One matrix row: the link class to every column device, in column order."""

    device: str
    links: tuple[str, ...]
    cpu_affinity: str | None = None
    numa_affinity: str | None = None
    gpu_numa_id: str | None = None


@dataclass(frozen=True)
class TopologyObservation:
    """``kind`` is ``matrix`` (topo -m) or ``p2p`` (the old OK/NS P2P status matrix)."""

    kind: str
    columns: tuple[str, ...]
    rows: tuple[TopoRow, ...]
    nic_names: Mapping[str, str] = field(default_factory=dict)

    @property
    def gpus(self) -> tuple[str, ...]:
        return tuple(c for c in self.columns if c.startswith("GPU"))

    @property
    def nics(self) -> tuple[str, ...]:
        return tuple(c for c in self.columns if not c.startswith("GPU"))

    def link(self, a: str, b: str) -> str:
        row = next(r for r in self.rows if r.device == a)
        return row.links[self.columns.index(b)]

    def nic_name(self, nic: str) -> str:
        return self.nic_names.get(nic, nic)


def nvlink_count(link_class: str) -> int:
    """``NV18`` -> 18; any PCIe class -> 0."""
    return int(link_class[2:]) if link_class.startswith("NV") else 0


def _split_cells(tokens: list[str], ncols: int, p2p: bool) -> tuple[list[str], list[str]]:
    """The first ``ncols`` link classes (fused tokens such as ``PXBNODE`` split) and the rest."""
    links: list[str] = []
    rest = list(tokens)
    while rest and len(links) < ncols:
        tok = rest[0]
        if (_ONE_P2P if p2p else _ONE_CLASS).match(tok):
            links.append(tok)
        elif not p2p and _FUSED.match(tok):
            # nvidia-smi drops the tab between two columns when a cell overflows (corpus b200-...-glitches)
            links.extend(re.findall(_CLASS, tok))
        else:
            break
        rest.pop(0)
    return links, rest


def _find_header(lines: list[str]) -> int:
    for i, line in enumerate(lines):
        tokens = line.split()
        if len(tokens) >= 2 and tokens[0] == "GPU0" and not _ONE_CLASS.match(tokens[1]) \
                and not _ONE_P2P.match(tokens[1]):
            return i
        if len(tokens) == 1 and tokens[0] == "GPU0":
            return i
    raise ParseError("no 'GPU0 ...' header row: not nvidia-smi topo -m output", "\n".join(lines[:5]))


@memoized(maxsize=16)  # every node of one hardware type prints the same matrix (no serials, no counters)
def parse_nvidia_smi_topo_m(text: str) -> TopologyObservation:
    """``nvidia-smi topo -m`` (drivers 4xx-59x; corpus topo/*.txt).

    Handles tabs or spaces, ANSI escapes (``h100-1gpu-vm-ansi-escapes``), the GPU NUMA ID column,
    fused cells (``PXBNODE``/``SYSSYS`` in ``b200-...-glitches``), prompt lines, the NIC legend and
    the old ``topo -p2p`` OK/NS matrix (``kind='p2p'``). A matrix that is not square, a row with
    too few cells or a CPU affinity that is not a CPU list (a terminal-clipped copy such as
    ``h800-8gpu-4nic-terminal-clipped``) raises ParseError rather than giving a wrong answer. The result
    is shared (memoized on the text): its NIC legend is a read-only mapping.
    """
    lines = [_ANSI.sub("", ln).rstrip() for ln in text.splitlines()]
    start = _find_header(lines)
    header = lines[start]
    head_tokens = header.split()
    columns = tuple(head_tokens[:head_tokens.index("CPU")] if "CPU" in head_tokens else head_tokens)
    extras = _EXTRAS.findall(header)
    body: list[list[str]] = []
    for line in lines[start + 1:]:
        if not line.strip() or line.strip().startswith("Legend"):
            break
        body.append(line.split())
    p2p = not extras and any(_ONE_P2P.match(t) and t != "X" for row in body for t in row[1:])
    rows = tuple(_parse_row(tokens, columns, extras, p2p) for tokens in body)
    labels = [r.device for r in rows]
    if labels != list(columns):
        missing = [c for c in columns if c not in labels]
        extra = [lb for lb in labels if lb not in columns]
        raise ParseError(
            f"topo matrix is not square (clipped or truncated?): header has {len(columns)} devices, "
            f"rows name {len(labels)}; rows without a column: {extra or 'none'}; "
            f"columns without a row: {missing or 'none'}", header)
    nic_names = MappingProxyType({m[1]: m[2] for m in map(_LEGEND_NIC.match, lines[start:]) if m})
    return TopologyObservation(kind="p2p" if p2p else "matrix", columns=columns, rows=rows,
                               nic_names=nic_names)


def _parse_row(tokens: list[str], columns: tuple[str, ...], extras: list[str], p2p: bool) -> TopoRow:
    device = tokens[0]
    links, rest = _split_cells(tokens[1:], len(columns), p2p)
    if len(links) != len(columns):
        raise ParseError(f"topo row {device} has {len(links)} link cells for {len(columns)} columns "
                         f"(clipped or garbled output)", " ".join(tokens))
    if rest and not p2p and _FUSED.match(rest[0]):
        raise ParseError(f"topo row {device} has more link cells than the header's {len(columns)} columns "
                         f"(header clipped?)", " ".join(tokens))
    values: dict[str, str] = {}
    if device.startswith("GPU") and extras:
        if len(rest) < len(extras):
            raise ParseError(f"topo row {device} lacks its {', '.join(extras)} cells", " ".join(tokens))
        values = dict(zip(extras, rest, strict=False))
        cpu = values.get("CPU Affinity")
        if cpu is not None and not _CPU_LIST.match(cpu):
            raise ParseError(f"topo row {device}: CPU affinity {cpu!r} is not a CPU list "
                             f"(terminal-clipped output?)", " ".join(tokens))
    elif rest:
        raise ParseError(f"topo row {device} has unexpected cells {rest!r}", " ".join(tokens))
    return TopoRow(device=device, links=tuple(links), cpu_affinity=values.get("CPU Affinity"),
                   numa_affinity=values.get("NUMA Affinity"), gpu_numa_id=values.get("GPU NUMA ID"))


def parse_topology(outputs: Mapping[str, CommandResult]) -> TopologyObservation:
    result = outputs[SOURCE]
    if result.rc != 0:
        first = (result.text + result.err_text).strip().splitlines()
        raise ParseError(f"nvidia-smi topo -m failed (rc {result.rc}): {first[0] if first else 'no output'}",
                         result.text + result.err_text)
    return parse_nvidia_smi_topo_m(result.text)


_REMEDY_PAIR = ("An NVLink between these GPUs is down or degraded: run `nvidia-smi nvlink -s` to find the "
                "inactive link and check the kernel log for Xid 74/144-150; reset the GPUs or reboot; if it "
                "persists, reseat the GPU baseboard or open an RMA")
_REMEDY_NIC = ("The GPU has no NIC behind its PCIe switch: check that the NIC is present and in the right "
               "slot (lspci -tv), BIOS PCIe/ACS settings and the mlx5 driver; GPUDirect RDMA will cross "
               "the CPU")
_REMEDY_NIC_COUNT = ("NICs are missing from the topology: check lspci for the ConnectX devices, the "
                     "mlx5_core driver (ibv_devinfo) and the NIC firmware; reseat or replace the missing NIC")


def _summarize(bad: list[Finding], host: str, check: str, ok_message: str, value: int | None = None,
               expected: str | None = None) -> list[Finding]:
    """Every non-PASS finding, or one PASS for the node when all passed."""
    if bad:
        return bad
    return [Finding(host=host, check=check, status=Status.PASS, message=ok_message, source=SOURCE,
                    value=value, expected=expected)]


def _link_table(obs: TopologyObservation) -> tuple[dict[str, tuple[str, ...]], dict[str, int]]:
    """``obs.link(a, b)`` as ``rows[a][columns[b]]``, the rows and columns indexed once (a host grades 28 pairs
    and 64 GPU-NIC cells)."""
    rows: dict[str, tuple[str, ...]] = {}
    for row in obs.rows:
        rows.setdefault(row.device, row.links)
    columns: dict[str, int] = {}
    for i, column in enumerate(obs.columns):
        columns.setdefault(column, i)
    return rows, columns


def _grade_pairs(obs: TopologyObservation, ctx: EvalContext) -> list[Finding]:
    host, check = ctx.host.name, "topology.gpu_pair.nvlink"
    exp = ctx.profile.expect(check)
    gpus = obs.gpus
    if exp is None or len(gpus) < 2:
        why = "fewer than 2 GPUs in the matrix" if len(gpus) < 2 else \
            f"no expectation for {check} in profile {ctx.profile.name}"
        return [Finding(host=host, check=check, status=Status.SKIP, message=why, source=SOURCE)]
    (rows, columns), bad = _link_table(obs), []
    grades = ValueGrades(host, check, exp, source=SOURCE, remedy=_REMEDY_PAIR, profile=ctx.profile)
    for i, a in enumerate(gpus):
        for b in gpus[i + 1:]:
            ab, ba = rows[a][columns[b]], rows[b][columns[a]]
            worst = ab if ab == ba else min({ab, ba}, key=nvlink_count)
            if not grades.passes(nvlink_count(worst)):
                bad.append(grades.finding(f"{a.lower()}-{b.lower()}", nvlink_count(worst),
                                          detail=f" [topo class {worst}]"))
    npairs = len(gpus) * (len(gpus) - 1) // 2
    return _summarize(bad, host, check, f"all {npairs} GPU pairs at {expected_text(exp)}",
                      value=npairs, expected=expected_text(exp))


def _grade_nics(obs: TopologyObservation, ctx: EvalContext) -> list[Finding]:
    host = ctx.host.name
    nics, gpus = obs.nics, obs.gpus
    out = [finding_from_expectation(host, "topology.nic.count", ctx.profile.expect("topology.nic.count"),
                                    len(nics), source=SOURCE, remedy=_REMEDY_NIC_COUNT,
                                    profile=ctx.profile)]
    check = "topology.gpu_nic.pcie"
    exp = ctx.profile.expect(check)
    if exp is None:
        out.append(Finding(host=host, check=check, status=Status.SKIP, source=SOURCE,
                           message=f"no expectation for {check} in profile {ctx.profile.name} "
                                   f"(GPUDirect RDMA not expected)"))
        return out
    (rows, columns), bad = _link_table(obs), []
    grades = ValueGrades(host, check, exp, source=SOURCE, remedy=_REMEDY_NIC, profile=ctx.profile)
    places = [columns[nic] for nic in nics]
    for gpu in gpus:
        nearest: str | None = None
        cls = "none"
        if nics:
            row = rows[gpu]
            cells = [row[i] for i in places]
            ranks = [_PCIE_RANK.get(cell, len(PCIE_ORDER)) for cell in cells]  # PCIe classes, then the rest
            first = ranks.index(min(ranks))  # the first of the nearest, as a stable sort's first
            nearest, cls = nics[first], cells[first]
        if grades.passes(cls):
            continue
        nic = f"nearest NIC {obs.nic_name(nearest)}" if nearest is not None else "no NIC in the matrix"
        bad.append(grades.finding(gpu.lower(), cls, detail=f" [{nic}]"))
    out.extend(_summarize(bad, host, check, f"every GPU has a NIC at {expected_text(exp)}",
                          value=len(gpus), expected=expected_text(exp)))
    return out


_PCIE_RANK = {name: i for i, name in enumerate(PCIE_ORDER)}  # distinct names


def evaluate_topology(obs: TopologyObservation, ctx: EvalContext) -> list[Finding]:
    """GPU pairs at the expected NV#, GPU-NIC PCIe distance, NIC count; every bad pair named."""
    if obs.kind == "p2p":
        return [Finding(host=ctx.host.name, check="topology.gpu_pair.nvlink", status=Status.SKIP,
                        source=SOURCE, message="nvidia-smi printed the old P2P status matrix (OK/NS), "
                                               "not link classes: NV# cannot be graded")]
    return _grade_pairs(obs, ctx) + _grade_nics(obs, ctx)


PROBE = register(ProbeSpec(
    name="topology",
    description="nvidia-smi topo -m: GPU pairs at the expected NV#, GPU-NIC PCIe distance, NIC count",
    command_map={SOURCE: "nvidia-smi topo -m"},
    command_tools={SOURCE: ("nvidia-smi",)},
    parse_fn=parse_topology,
    evaluate_fn=evaluate_topology,
))
