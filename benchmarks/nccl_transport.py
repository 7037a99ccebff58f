"""Which network NCCL used in a multi-node job, from its ``NCCL_DEBUG=INFO`` lines (subsystems INIT,NET).

    net = parse_nccl_transport(text)
    net.kind, net.by_host["h100-4"].devices      # "ib", ("mlx5_1:1/IB/SHARP", ..., "mlx5_8:1/IB/SHARP")

NCCL prints, per rank (``host:pid:tid [dev] NCCL INFO ...``), NCCL 2.x layouts:

    NET/IB : Using [0]mlx5_1:1/IB/SHARP [1]mlx5_2:1/IB/SHARP ... [RO]; OOB ens7:172.27.32.104<0>
    NET/Socket : Using [0]eth0:10.0.0.1<0> [1]eth1:10.0.1.1<0>
    Using network IBext_v6            (or IB, Socket, a plugin name)
    NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'
    Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA   (no /GDRDMA: through host memory)

The NET/IB lines were written against ../shared/corpus/nccl-tests (NCCL 2.18.3, HPC-X IBext_v6 plugin);
the NET/Socket and channel layouts follow NCCL's published debug output (tests/fixtures/nccl-tests says
which fixture is derived from which real layout). Without any NCCL INFO line the transport is unknown:
SKIP saying to run with NCCL_DEBUG=INFO, never PASS.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from healthcheck.benchmarks import BenchContext
from healthcheck.benchmarks.plan import Job
from healthcheck.core.grading import finding_from_expectation
from healthcheck.core.model import Finding, Status

# Each pattern reads a bounded piece of one line at a fixed place, so the parse stays linear in the input:
# the "host:pid:tid [dev] " part just before "NCCL INFO" (at most _WHO_MAX characters of it), and what
# follows "NCCL INFO", matched from its start.
_INFO = "NCCL INFO"
_WHO_MAX = 320   # a host name (253) + ":pid:tid [dev] " with room to spare
_WHO = re.compile(r"(?P<host>[A-Za-z0-9_.{}-]+):\d{1,20}:\d{1,20}\s+\[\d{1,10}\]\s+$")
_USING = re.compile(r"NET/(?P<net>IB|Socket)\s*:\s*Using\s+")
_OOB = re.compile(r"OOB\s+\S+\s*")
_DEVICE = re.compile(r"\[\d{1,10}\](\S+)")
_NETWORK = re.compile(r"Using network (?P<name>\S+)")
_GDR_ON = re.compile(r"NET/IB\s*:\s*GPU Direct RDMA Enabled for HCA")
_CHANNEL = re.compile(r"Channel \d{1,10}/\d{1,10} : ")
_VIA = re.compile(r"NET/(?P<net>[A-Za-z_]+)/\d{1,10}(?P<gdr>/GDRDMA)?")
_SOCKET_NAMES = {"Socket"}


@dataclass
class HostNet:
    """What one host's ranks reported: networks named, devices NCCL said it uses, GDR evidence."""

    networks: set[str] = field(default_factory=set)
    ib_devices: tuple[str, ...] = ()
    socket_devices: tuple[str, ...] = ()
    gdr_channels: int = 0
    plain_channels: int = 0
    gdr_enabled_line: bool = False

    @property
    def kind(self) -> str | None:
        """``socket`` when NCCL ran over TCP, ``ib`` over IB verbs (InfiniBand or RoCE), None unknown."""
        if self.networks & _SOCKET_NAMES or (self.socket_devices and not self.ib_devices):
            return "socket"
        if self.ib_devices or self.networks:
            return "ib"
        return None

    @property
    def gdr(self) -> bool | None:
        if self.gdr_channels:
            return True
        if self.plain_channels:
            return False
        return True if self.gdr_enabled_line else None


@dataclass(frozen=True)
class NcclTransport:
    info_lines: int
    by_host: dict[str, HostNet]

    @property
    def kind(self) -> str | None:
        kinds = {h.kind for h in self.by_host.values()} - {None}
        return "socket" if "socket" in kinds else ("ib" if kinds else None)


def parse_nccl_transport(text: str) -> NcclTransport:
    """The networks, HCAs and GDR use each host reported (pure; any text, never raises; linear in it)."""
    by_host: dict[str, HostNet] = {}
    info = 0
    for line in text.splitlines():
        at = line.find(_INFO)
        if at < 0:
            continue
        info += 1
        who = _WHO.search(line, max(0, at - _WHO_MAX), at)
        body = line[at + len(_INFO):]
        if who is not None and body[:1].isspace():
            _read_info(by_host, who["host"], body.lstrip())
    return NcclTransport(info_lines=info, by_host=by_host)


def _read_info(by_host: dict[str, HostNet], host: str, body: str) -> None:
    """One ``NCCL INFO`` message (the text after it) of ``host`` into ``by_host``."""
    if m := _USING.match(body):
        net = by_host.setdefault(host, HostNet())
        devices = tuple(_DEVICE.findall(_devices_part(body[m.end():])))
        if m["net"] == "IB":
            net.ib_devices = tuple(dict.fromkeys(net.ib_devices + devices))
        else:
            net.socket_devices = tuple(dict.fromkeys(net.socket_devices + devices))
    elif m := _NETWORK.match(body):
        by_host.setdefault(host, HostNet()).networks.add(m["name"])
    elif _GDR_ON.match(body):
        by_host.setdefault(host, HostNet()).gdr_enabled_line = True
    elif _CHANNEL.match(body) and (via := _last_via(body)) is not None:
        net = by_host.setdefault(host, HostNet())
        if via["net"] == "Socket":
            net.networks.add("Socket")
        elif via["gdr"]:
            net.gdr_channels += 1
        else:
            net.plain_channels += 1


def _last_via(body: str) -> re.Match[str] | None:
    """The last `` via NET/<net>/<n>[/GDRDMA]`` of a channel line (each occurrence tried once, from the end)."""
    end = len(body)
    while (at := body.rfind(" via ", 0, end)) >= 0:
        if m := _VIA.match(body, at + 5):
            return m
        end = at
    return None


def _devices_part(rest: str) -> str:
    """The device list of a ``NET/IB : Using ...`` line: what precedes a trailing ``; OOB <if>`` part."""
    head, sep, tail = rest.rpartition(";")
    return head if sep and _OOB.fullmatch(tail.strip() + " ") else rest


REMEDY_SOCKET = ("NCCL fell back to TCP sockets: check that the IB/RoCE HCAs are up (ibstat), that the RDMA "
                 "libraries (rdma-core, libibverbs) and the NCCL net plugin are installed in the job's "
                 "environment, and that NCCL_IB_DISABLE / NCCL_NET / NCCL_IB_HCA do not exclude them")
REMEDY_RAILS = ("NCCL used fewer HCAs than the node has: check the missing HCAs' ports (ibstat, ib.port "
                "findings), NCCL_IB_HCA, and the GPU-NIC topology (nvidia-smi topo -m)")


def _expected_rails(job: Job, ctx: BenchContext) -> tuple[int | None, str]:
    if job.rail:
        return 1, f"1 (the job is pinned to rail {job.rail})"
    for key in ("nccl.net.rails", "ib.hca.count"):
        exp = ctx.profile.expect(key)
        if exp is not None and isinstance(exp.value, int):
            return exp.value, f"{exp.value} ({key} in profile {ctx.profile.name}, {exp.source})"
    return None, ""


HostOf = Callable[[str | None, Job, BenchContext], str | None]


def evaluate_nccl_transport(job: Job, net: NcclTransport, ctx: BenchContext, base: str,
                            host_of: HostOf) -> list[Finding]:
    """Multi-node jobs only: FAIL over TCP sockets or over fewer HCAs than the profile expects.

    ``host_of(printed, job, ctx)`` maps a node-printed name to the inventory host."""
    if len(job.hosts) < 2:
        return []
    check = f"{base}.transport"
    if not net.by_host:
        why = ("no NCCL INFO line in the output: run with NCCL_DEBUG=INFO (or NCCL_DEBUG_SUBSYS=INIT,NET) "
               "to see which network NCCL used" if not net.info_lines else
               "the NCCL INFO lines do not say which network was used (NCCL_DEBUG_SUBSYS without INIT,NET?)")
        return [Finding(host=h, check=check, status=Status.SKIP, component=job.component, source=job.job_id,
                        message=f"{job.prefix}transport unknown: {why}") for h in job.hosts]
    mapped: dict[str, HostNet] = {}
    for printed, hnet in net.by_host.items():
        name = host_of(printed, job, ctx)
        if name is not None:
            mapped[name] = hnet
    merged = HostNet()
    for hnet in net.by_host.values():
        merged.networks |= hnet.networks
        merged.ib_devices = tuple(dict.fromkeys(merged.ib_devices + hnet.ib_devices))
        merged.socket_devices = tuple(dict.fromkeys(merged.socket_devices + hnet.socket_devices))
        merged.gdr_channels += hnet.gdr_channels
        merged.plain_channels += hnet.plain_channels
        merged.gdr_enabled_line |= hnet.gdr_enabled_line
    return [_host_finding(job, ctx, check, h, mapped.get(h, merged), h in mapped) for h in job.hosts]


def _host_finding(job: Job, ctx: BenchContext, check: str, h: str, hnet: HostNet, own: bool) -> Finding:
    where = "" if own else " (job-wide: no line names this host)"
    networks = f" ({', '.join(sorted(hnet.networks))})" if hnet.networks else ""
    gdr = {True: "GPUDirect RDMA on", False: "GPUDirect RDMA off (through host memory)", None: "GDR not reported"}
    exp = ctx.profile.expect("nccl.net.transport")
    if hnet.kind == "socket":
        devices = ", ".join(hnet.socket_devices) or "interface not reported"
        message = (f"{job.prefix}NCCL used TCP sockets (NET/Socket{networks}: {devices}) instead of InfiniBand/"
                   f"RoCE{where}: the busbw measured is not the fabric's")
        if exp is not None:  # a site without RDMA says so in its profile
            return finding_from_expectation(h, check, exp, "Socket", source=job.job_id, remedy=REMEDY_SOCKET,
                                            component=job.component, profile=ctx.profile)
        return Finding(host=h, check=check, status=Status.FAIL, component=job.component, value="Socket",
                       expected="NET/IB (InfiniBand or RoCE)", source=job.job_id, remedy=REMEDY_SOCKET,
                       message=message)
    if hnet.kind is None:
        return Finding(host=h, check=check, status=Status.SKIP, component=job.component, source=job.job_id,
                       message=f"{job.prefix}NCCL INFO lines name no network for {h}{where}")
    rails, why = _expected_rails(job, ctx)
    used = len(hnet.ib_devices)
    summary = (f"NET/IB{networks} over {used} HCA(s): {' '.join(hnet.ib_devices) or 'not listed'}; "
               f"{gdr[hnet.gdr]}{where}")
    if rails is not None and hnet.ib_devices and used < rails:
        return Finding(host=h, check=check, status=Status.FAIL, component=job.component, value=used, unit="HCAs",
                       expected=f">= {rails}", source=job.job_id, remedy=REMEDY_RAILS,
                       message=f"{job.prefix}NCCL used {used} of {why} HCAs: {summary}")
    return Finding(host=h, check=check, status=Status.PASS, component=job.component, value=used or None,
                   unit="HCAs", expected=f">= {rails}" if rails else "NET/IB", source=job.job_id,
                   message=f"{job.prefix}NCCL used {summary}")
