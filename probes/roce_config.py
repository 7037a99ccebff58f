"""RoCE port configuration for the fleet consistency check: MTU, trust, PFC, ECN per priority, GID index.

    roce-config -> per Ethernet netdev of an RDMA device:
        # roce-config mlx5_0 ens1f0np0
        mtu:9000
        /sys/class/net/ens1f0np0/ecn/roce_np/enable/3:1               (mlx5 DCQCN sysfs, one file a priority)
        /sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/3:RoCE v2
        /sys/class/infiniband/mlx5_0/ports/1/gids/3:0000:0000:0000:0000:0000:ffff:c0a8:d3f2
        Priority trust state: dscp                                    (``mlnx_qos -i NETDEV`` when installed)
        PFC configuration: / priority 0 1 ... / enabled 0 0 0 1 0 0 0 0
    # roce-config end
    -> {"mlx5_0 ens1f0np0": {"mtu": "9000", "trust": "dscp", "pfc": "3", "ecn_np": "3", "ecn_rp": "3",
                              "gid_index": "3"}}

``mlnx_qos`` layout from real outputs (its ``Priority trust state`` line and ``PFC configuration`` table,
e.g. the MLNX_OFED outputs published with DCQCN setup guides); the ECN files are the mlx5 driver's
``/sys/class/net/<netdev>/ecn/roce_{np,rp}/enable/<prio>``. ``gid_index`` is the index NCCL picks by
default: the first RoCE v2 GID that is an IPv4-mapped address (NCCL_IB_ROCE_VERSION_NUM 2,
NCCL_IB_ADDR_FAMILY AF_INET). A field the node does not report is absent (no mlnx_qos: no trust, no pfc).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from healthcheck.core.spec import ParseError

HEADER = "# roce-config "
END = "# roce-config end"
_ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
_IPV4_MAPPED = "0000:0000:0000:0000:0000:ffff:"
COMMAND = (
    "for n in /sys/class/infiniband/*/device/net/*; do "
    '[ "$(cat "$n/type" 2>/dev/null)" = 1 ] || continue; d=${n#/sys/class/infiniband/}; d=${d%%/*}; i=${n##*/}; '
    'echo "# roce-config $d $i"; echo "mtu:$(cat "/sys/class/net/$i/mtu" 2>/dev/null)"; '
    'grep -H -s . "/sys/class/net/$i"/ecn/roce_np/enable/* "/sys/class/net/$i"/ecn/roce_rp/enable/* '
    '"/sys/class/infiniband/$d"/ports/1/gid_attrs/types/*; '
    f'grep -H -s -v -x {_ZERO_GID} "/sys/class/infiniband/$d"/ports/1/gids/*; '
    'if command -v mlnx_qos >/dev/null 2>&1; then mlnx_qos -i "$i" 2>&1; fi; '
    "done; echo '# roce-config end'")
FIELDS = ("mtu", "trust", "pfc", "ecn_np", "ecn_rp", "gid_index")
_ECN = re.compile(r"/ecn/roce_(?P<side>np|rp)/enable/(?P<prio>[0-7]):(?P<value>[01])\s*$")
_GID_TYPE = re.compile(r"/gid_attrs/types/(?P<index>\d{1,4}):(?P<type>.+?)\s*$")
_GID = re.compile(r"/gids/(?P<index>\d{1,4}):(?P<gid>[0-9a-fA-F:]{39})\s*$")
_TRUST = re.compile(r"^\s*Priority trust state:\s*(?P<trust>\S+)")
_PFC_ENABLED = re.compile(r"^\s*enabled\s+(?P<bits>(?:[01]\s+){7}[01])\s*$")


def parse_roce_config(text: str) -> dict[str, dict[str, str]]:
    """``"<rdma device> <netdev>"`` -> field -> value (strings, compared as they are across the fleet)."""
    if END not in text:
        raise ParseError("roce-config output is truncated (no closing '# roce-config end' line)", text[-200:])
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith(HEADER) and line.strip() != END:
            names = line[len(HEADER):].split()
            current = blocks.setdefault(" ".join(names[:2]), []) if len(names) >= 2 else None
        elif current is not None:
            current.append(line)
    return {port: _fields(lines) for port, lines in blocks.items()}


def _fields(lines: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    ecn: dict[str, list[str]] = {"np": [], "rp": []}
    types: dict[int, str] = {}
    gids: dict[int, str] = {}
    in_pfc = False
    for line in lines:
        if line.startswith("mtu:") and line[4:].strip().isdecimal():
            out["mtu"] = line[4:].strip()
        elif m := _ECN.search(line):
            if m["value"] == "1":
                ecn[m["side"]].append(m["prio"])
        elif m := _GID_TYPE.search(line):
            types[int(m["index"])] = m["type"]
        elif m := _GID.search(line):
            gids[int(m["index"])] = m["gid"].lower()
        elif m := _TRUST.match(line):
            out["trust"] = m["trust"]
        elif line.strip().startswith("PFC configuration"):
            in_pfc = True
        elif in_pfc and (m := _PFC_ENABLED.match(line)):
            out["pfc"] = _priorities([str(p) for p, bit in enumerate(m["bits"].split()) if bit == "1"])
            in_pfc = False
    if any(_ECN.search(line) for line in lines):
        out["ecn_np"], out["ecn_rp"] = _priorities(ecn["np"]), _priorities(ecn["rp"])
    index = roce_v2_ipv4_index(types, gids)
    if types:
        out["gid_index"] = str(index) if index is not None else "none"
    return out


def _priorities(prios: list[str]) -> str:
    return ",".join(sorted(set(prios))) or "none"


def roce_v2_ipv4_index(types: Mapping[int, str], gids: Mapping[int, str]) -> int | None:
    """The first GID index of type RoCE v2 whose GID is an IPv4-mapped address (``::ffff:a.b.c.d``)."""
    for index in sorted(types):
        if types[index].strip().lower() == "roce v2" and gids.get(index, "").startswith(_IPV4_MAPPED):
            return index
    return None


def read_roce_config(text: str | None) -> tuple[dict[str, dict[str, str]] | None, str | None]:
    """(ports, None), or (None, why) for an unreadable output; (None, None) when not collected."""
    if text is None:
        return None, None
    try:
        return parse_roce_config(text), None
    except ParseError as exc:
        return None, str(exc)
