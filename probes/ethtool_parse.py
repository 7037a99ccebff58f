"""Pure parser for ``ethtool -S`` of the RoCE netdevs of RDMA devices: the pause, discard and PHY error counters.

    # ethtool-stats mlx5_0 ens1f0np0          (our command's header: RDMA device, then its netdev)
    NIC statistics:
         rx_discards_phy: 12
         tx_pause_ctrl_phy: 5745055
    # ethtool-stats end
    -> {"mlx5_0 ens1f0np0": {"rx_discards_phy": 12, "tx_pause_ctrl_phy": 5745055}}

The body of each block is ``ethtool -S`` as the mlx5 driver prints it (``NIC statistics:``, then one
``     name: value`` line per counter; layout from a real ConnectX run posted to the bpf list, see
tests/fixtures/ethtool/README.md). Only the counters that tell a fault or congestion are kept
(``KEPT``), plus the PHY byte counters that normalise them; per-queue and software counters are dropped.
"""

from __future__ import annotations

import re

from healthcheck.core.spec import ParseError

HEADER = "# ethtool-stats "
END = "# ethtool-stats end"
MISSING_TOOL = "healthcheck: ethtool not installed"
# mlx5 counter names (kernel drivers/net/ethernet/mellanox/mlx5/core/en_stats.c; NVIDIA "Understanding mlx5
# ethtool counters"): PFC/global pause, physical discards and errors, receive buffer exhaustion, link downs.
KEPT = re.compile(r"(?:rx|tx)_prio[0-7]_pause|(?:rx|tx)_pause_ctrl_phy|(?:rx|tx)_global_pause|"
                  r"(?:rx|tx)_discards_phy|rx_prio[0-7]_(?:discards|buf_discard|cong_discard)|"
                  r"rx_crc_errors_phy|rx_symbol_err_phy|rx_pcs_symbol_err_phy|tx_errors_phy|"
                  r"rx_out_of_buffer|link_down_events_phy|(?:rx|tx)_bytes_phy")
MAX_DIGITS = 20  # a 64-bit counter


def parse_ethtool_stats(text: str) -> dict[str, dict[str, int]] | None:
    """``"<rdma device> <netdev>"`` -> kept counters, from our framed command; None when ethtool is not
    installed. Output without the closing line is truncated (ParseError); a block whose ethtool failed
    ("Operation not supported") has no counters and is left out."""
    if MISSING_TOOL in text:
        return None
    if END not in text:
        raise ParseError("ethtool-stats output is truncated (no closing '# ethtool-stats end' line)", text[-200:])
    out: dict[str, dict[str, int]] = {}
    current: dict[str, int] | None = None
    for line in text.splitlines():
        if line.startswith(HEADER) and line.strip() != END:
            names = line[len(HEADER):].split()
            current = out.setdefault(" ".join(names[:2]), {}) if len(names) >= 2 else None
            continue
        name, colon, value = line.strip().partition(":")
        value = value.strip()
        if current is None or not colon or not KEPT.fullmatch(name) or not value.isdecimal():
            continue
        if len(value) > MAX_DIGITS:
            raise ParseError(f"ethtool-stats {name} has {len(value)} digits: not a 64-bit counter", value[:60])
        current[name] = int(value)
    return {netdev: counters for netdev, counters in out.items() if counters}
