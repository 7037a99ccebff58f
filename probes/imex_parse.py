"""Parse ``nvidia-imex-ctl -N`` (the IMEX daemon's view of its whole domain) and ``nodes_config.cfg``.

    domain = parse_imex_ctl_nodes(text)
    domain.state, domain.nodes[5].address, domain.broken[0]     # "UP", "10.40.7.16", ImexLink(0, 5, "D")

``nvidia-imex-ctl -N`` (docs.nvidia.com/multi-node-nvlink-systems/imex-guide/cmdservice.html) prints a
legend, a timestamp, ``Nodes:`` with one ``Node #<i> - <ip> - <STATUS>[ - Version: <v>]`` line per configured
node, a ``Nodes From\\To`` matrix of connection letters (C Connected; I, N, R, D, A, !V!, !M! not usable)
and ``Domain State: <word>``. Written against two published real outputs (an 18-node GB200 domain, driver
570.172, with the Version column; a one-node GH200 domain, IMEX 570.00, without it: see
tests/fixtures/imex/README.md). Lines outside those blocks (a leading ``READY``, log lines) are ignored; an
output with neither nodes nor a domain state raises ParseError (never an empty domain that could pass).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from healthcheck.core.spec import ParseError

_NODE = re.compile(r"^Node #(\d+)\s+-\s+(\S+)\s+-\s+(\S+)(?:\s+-\s+Version:\s*(\S+))?\s*$")
_STATE = re.compile(r"^Domain State:\s*(\S+)\s*$")
_HEADER = re.compile(r"^\s*Nodes From\\To\s+(.*)$")
_ROW = re.compile(r"^\s*(\d+)\s{2,}(\S.*)$")
CONNECTED = "C"
LETTERS = {"C": "Connected", "I": "Invalid (not reachable)", "N": "Never Connected",
           "R": "Recovering (connection lost)", "D": "Disconnected (connection lost, cleaned up)",
           "A": "Authenticating", "!V!": "Version mismatch", "!M!": "Node map mismatch"}


@dataclass(frozen=True)
class ImexNode:
    index: int
    address: str
    status: str                 # READY, or the daemon's other word for the node
    version: str | None = None


@dataclass(frozen=True)
class ImexLink:
    source: int                 # the node index of the matrix row (From)
    target: int                 # the node index of the column (To)
    letter: str


@dataclass(frozen=True)
class ImexDomain:
    nodes: tuple[ImexNode, ...] = ()
    connected: int = 0                  # matrix cells C
    broken: tuple[ImexLink, ...] = ()   # every other cell
    state: str | None = None            # "UP", another word, None when the line is missing


def parse_imex_ctl_nodes(text: str) -> ImexDomain:
    """The nodes, the connection matrix and the domain state of one ``nvidia-imex-ctl -N`` output."""
    nodes: list[ImexNode] = []
    cells: list[ImexLink] = []
    state, columns = None, None
    for line in text.splitlines():
        if m := _NODE.match(line.strip()):
            nodes.append(ImexNode(int(m[1]), m[2], m[3], m[4]))
        elif m := _STATE.match(line.strip()):
            state = m[1]
        elif m := _HEADER.match(line):
            columns = [int(c) for c in m[1].split() if c.isdigit()]
        elif columns is not None and (m := _ROW.match(line)):
            letters = m[2].split()
            if len(letters) != len(columns):
                raise ParseError(f"IMEX connectivity row {m[1]} has {len(letters)} cells for {len(columns)} "
                                 "nodes (truncated output?)", line)
            cells += [ImexLink(int(m[1]), to, letter) for to, letter in zip(columns, letters, strict=True)]
    if not nodes and state is None:
        raise ParseError("no 'Node #' lines and no 'Domain State:' line: not nvidia-imex-ctl -N output", text[:200])
    return ImexDomain(nodes=tuple(nodes), connected=sum(c.letter == CONNECTED for c in cells),
                      broken=tuple(c for c in cells if c.letter != CONNECTED), state=state)


def parse_nodes_config(text: str) -> tuple[str, ...]:
    """``/etc/nvidia-imex/nodes_config.cfg``: one IP or host name per line; ``#`` comments and blanks skipped."""
    entries = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return tuple(e for e in entries if e)
