"""Which switch each host's HCAs are cabled to, from ``ibnetdiscover`` or ``iblinkinfo`` output.

    links = parse_fabric(text)                    # any of the three layouts below
    host_leaves(links, ["gpu001", "gpu002"])      # {"gpu001": "leaf-a01", "gpu002": "leaf-a01"}

Layouts (infiniband-diags 1.6 to rdma-core 50; the man pages ibnetdiscover(8), iblinkinfo(8)):
- ``ibnetdiscover`` topology file: ``Switch 36 "S-<guid>" # "<desc>" ... lid N`` blocks whose port lines
  ``[3] "H-<guid>"[1](<portguid>) # "gpu001 mlx5_0" lid 5 4xNDR`` name the HCA on each port, and ``Ca``
  blocks whose port lines name the switch (``[1](<portguid>) "S-<guid>"[3] # lid 5 lmc 0 "<desc>" lid 1``);
- ``ibnetdiscover -p``: one line per connected port, ``CA 134 1 0x... 4x EDR - SW 1719 10 0x... ( 'o0001
  HCA-1' - 'ib-i1l1s01' )`` (corpus ``ib/ibnetdiscover-p-edr-fixture.txt``; ``4x ???`` = nothing cabled);
- ``iblinkinfo``: ``CA: n02 HCA-1:`` and ``Switch: 0x... <desc>:`` blocks of ``==( 4X 25.78125 Gbps
  Active/ LinkUp)==> 2 17[ ] "<remote desc>"`` lines (corpus ``ib/iblinkinfo-edr-sb7700-...``); ports
  that are Down/Polling name no remote and are left out.

Pure: a host is matched by the first word of its HCA's node description (``gpu001 mlx5_0`` ->
``gpu001``), which is what the HCA reports as ``hostname <device>`` by default. A node whose HCAs go to
several switches (a rail-optimised fabric: one leaf per rail) gets all of them, joined with ``+``, so
nodes under the same set of leaves share a cell. Lines that fit no layout are ignored; a text with no
link at all gives an empty tuple (the caller says the topology file named no host).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class FabricLink:
    """One cable between an HCA port and a switch port, as the fabric tools print it."""

    ca: str           # the HCA's node description: "gpu001 mlx5_0"
    switch: str       # the switch's node description (its GUID when it has none)
    ca_port: int = 1
    switch_port: int = 0

    @property
    def host(self) -> str:
        return self.ca.split()[0] if self.ca.split() else ""


_SWITCH_HEAD = re.compile(r'^Switch\s+\d+\s+"S-(?P<guid>[0-9a-fA-F]+)"\s*#\s*"(?P<desc>[^"]*)"')
_CA_HEAD = re.compile(r'^Ca\s+\d+\s+"H-(?P<guid>[0-9a-fA-F]+)"\s*#\s*"(?P<desc>[^"]*)"')
_SWITCH_PORT = re.compile(r'^\[(?P<port>\d+)\]\s+"H-[0-9a-fA-F]+"\[(?P<rport>\d+)\](?:\([0-9a-fA-F]+\))?\s*#\s*'
                          r'"(?P<desc>[^"]*)"')
_CA_PORT = re.compile(r'^\[(?P<port>\d+)\](?:\([0-9a-fA-F]+\))?\s+"S-(?P<guid>[0-9a-fA-F]+)"\[(?P<rport>\d+)\]'
                      r'\s*#[^"]*"(?P<desc>[^"]*)"')
_PORTS_LINE = re.compile(r"^(?P<t1>CA|SW)\s+\d+\s+(?P<p1>\d+)\s+0x[0-9a-fA-F]+\s+\S+\s+\S+\s+-\s+(?P<t2>CA|SW)\s+"
                         r"\d+\s+(?P<p2>\d+)\s+0x[0-9a-fA-F]+\s+\(\s*'(?P<d1>[^']*)'\s+-\s+'(?P<d2>[^']*)'\s*\)")
_LINKINFO_HEAD = re.compile(r"^(?P<kind>CA|Switch):\s+(?:0x[0-9a-fA-F]+\s+)?(?P<desc>.*?):?\s*$")
_LINKINFO_PORT = re.compile(r"^\s*(?:0x[0-9a-fA-F]+\s+)?\d+\s+(?P<port>\d+)\[[^\]]*\]\s+==\(.*?\)==>\s+\d+\s+"
                            r"(?P<rport>\d+)\[[^\]]*\]\s+\"(?P<desc>[^\"]*)\"")


def parse_ibnetdiscover(text: str) -> tuple[FabricLink, ...]:
    """HCA-to-switch links of an ``ibnetdiscover`` topology file or ``ibnetdiscover -p`` report."""
    links: list[FabricLink] = []
    switch: str | None = None
    ca: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if m := _PORTS_LINE.match(line):
            if {m["t1"], m["t2"]} == {"CA", "SW"}:
                ca_first = m["t1"] == "CA"
                links.append(FabricLink(ca=m["d1"] if ca_first else m["d2"], switch=m["d2"] if ca_first else m["d1"],
                                        ca_port=int(m["p1"] if ca_first else m["p2"]),
                                        switch_port=int(m["p2"] if ca_first else m["p1"])))
        elif m := _SWITCH_HEAD.match(line):
            switch, ca = m["desc"] or m["guid"], None
        elif m := _CA_HEAD.match(line):
            ca, switch = m["desc"], None
        elif switch is not None and (m := _SWITCH_PORT.match(line)):
            links.append(FabricLink(ca=m["desc"], switch=switch, ca_port=int(m["rport"]), switch_port=int(m["port"])))
        elif ca is not None and (m := _CA_PORT.match(line)):
            links.append(FabricLink(ca=ca, switch=m["desc"] or m["guid"], ca_port=int(m["port"]),
                                    switch_port=int(m["rport"])))
        elif not line:
            switch = ca = None
    return _unique(links)


def parse_iblinkinfo(text: str) -> tuple[FabricLink, ...]:
    """HCA-to-switch links of ``iblinkinfo`` (default layout); ports with no remote, and cables between
    two switches listed in the output, are left out."""
    heads = [m for line in text.splitlines() if (m := _LINKINFO_HEAD.match(line.strip()))]
    switches = {m["desc"] for m in heads if m["kind"] == "Switch"}
    links: list[FabricLink] = []
    kind: str | None = None
    desc = ""
    for line in text.splitlines():
        if m := _LINKINFO_HEAD.match(line.strip()):
            kind, desc = m["kind"], m["desc"]
        elif kind is not None and (m := _LINKINFO_PORT.match(line)) and m["desc"]:
            if kind == "CA":
                links.append(FabricLink(ca=desc, switch=m["desc"], ca_port=int(m["port"]),
                                        switch_port=int(m["rport"])))
            elif m["desc"] not in switches:
                links.append(FabricLink(ca=m["desc"], switch=desc, ca_port=int(m["rport"]),
                                        switch_port=int(m["port"])))
    return _unique(links)


def parse_fabric(text: str) -> tuple[FabricLink, ...]:
    """Links from whichever of the supported layouts ``text`` is in."""
    if re.search(r"^\s*(CA|Switch):\s", text, re.M) and "==(" in text:
        return parse_iblinkinfo(text)
    return parse_ibnetdiscover(text)


def _unique(links: Iterable[FabricLink]) -> tuple[FabricLink, ...]:
    """Each cable once (the topology and ``-p`` layouts list it from both ends)."""
    seen: dict[tuple[str, int, str], FabricLink] = {}
    for link in links:
        seen.setdefault((link.ca, link.ca_port, link.switch), link)
    return tuple(seen.values())


_MELLANOX_DESC = re.compile(r"^MF0;(?P<name>[^:]+):")


def switch_name(desc: str) -> str:
    """A switch's name as people say it: ``MF0;leaf-su1-r0:MQM9700/U1`` (NVIDIA/Mellanox managed switches
    describe themselves as ``MF0;<hostname>:<model>/<unit>``) -> ``leaf-su1-r0``; other descriptions as they are."""
    m = _MELLANOX_DESC.match(desc)
    return m["name"] if m else desc


def host_leaves(links: Iterable[FabricLink], hosts: Sequence[str]) -> dict[str, str]:
    """The leaf (or ``+``-joined leaves) each of ``hosts`` is cabled to; hosts no HCA names are left out.

    A host matches an HCA whose description starts with the host name or its short name."""
    wanted = {h: h for h in hosts} | {h.split(".")[0]: h for h in hosts}
    switches: dict[str, set[str]] = {}
    for link in links:
        host = wanted.get(link.host) or wanted.get(link.host.split(".")[0])
        if host is not None:
            switches.setdefault(host, set()).add(switch_name(link.switch))
    return {h: "+".join(sorted(names)) for h, names in switches.items()}
