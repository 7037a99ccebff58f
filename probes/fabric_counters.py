"""What each fabric counter the rates probe reads means, its unit, what to do, and how it is graded.

    info("ib_hw", "np_cnp_sent").meaning     # "congestion notification packets this port sent ..."
    info("eth", "rx_prio3_pause").unit        # "pause frames"  (per-priority names share one entry)
    fleet_graded("eth", "tx_prio3_pause")     # True: no public absolute threshold, graded against the fleet

Families: ``ib`` (IBA PortCounters in sysfs ``ports/N/counters``), ``ib_hw`` (mlx5 ``ports/N/hw_counters``)
and ``eth`` (``ethtool -S`` of RoCE netdevs). ``grading`` says where the threshold comes from: ``profile``
(``rate.<family>.<counter>`` with a public source) or ``fleet`` (no public number: a port far above the
fleet's median rate is named by ``fleet.fabric_counters``). Meanings: IBA vol. 1 PortCounters, kernel
Documentation/ABI/stable/sysfs-class-infiniband, NVIDIA "Understanding mlx5 ethtool counters" and
"Understanding mlx5 Linux counters and status parameters".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PHY = ("Physical-layer errors: check `mlxlink -d DEV -m` (BER, FEC), reseat or replace the cable or "
        "transceiver, check the switch port")
_CONGESTION = ("Congestion on this port's path: compare with its neighbours (the same job, the same switch), "
               "check the switch's ECN/PFC configuration and buffer drops, and this node's PFC/ECN/trust "
               "settings against the fleet's (mlnx_qos -i NETDEV)")
_TRANSPORT = ("RDMA transport retries/timeouts: look for packet loss on the path (switch drops, PFC off on the "
              "RoCE priority, a flapping link), then for a slow or stuck peer (its node, its GPU)")
_FLAP = ("The link went down and came back: check the cable/transceiver (`mlxlink -d DEV -m`), the switch "
         "port's log, and the kernel log for the same time; a flapping link kills RDMA jobs")


@dataclass(frozen=True)
class CounterInfo:
    meaning: str
    unit: str
    remedy: str
    grading: str  # "profile": rate.<family>.<counter> with a public source; "fleet": fleet outliers


def _c(meaning: str, unit: str, remedy: str, grading: str = "profile") -> CounterInfo:
    return CounterInfo(meaning, unit, remedy, grading)


CATALOG: dict[tuple[str, str], CounterInfo] = {
    ("ib", "symbol_error"): _c("minor link errors on any lane (pre-FEC symbol errors)", "errors", _PHY),
    ("ib", "link_error_recovery"): _c("link retrains that succeeded", "events", _PHY),
    ("ib", "link_downed"): _c("link retrains that failed: the link went down", "events", _FLAP),
    ("ib", "port_rcv_errors"): _c("received packets with errors (CRC, malformed)", "packets", _PHY),
    ("ib", "port_rcv_remote_physical_errors"): _c("received packets marked bad by an upstream link (EBP)",
                                                  "packets", _PHY),
    ("ib", "port_xmit_discards"): _c("outbound packets discarded (port down or congested)", "packets", _CONGESTION),
    ("ib", "local_link_integrity_errors"): _c("times the local physical error threshold was exceeded", "events",
                                              _PHY),
    ("ib", "excessive_buffer_overrun_errors"): _c("receive buffer overruns: the lossless contract broken",
                                                  "events", _CONGESTION),
    ("ib", "port_xmit_wait"): _c("ticks the port had data to send and no credits (IB congestion)", "ticks",
                                 _CONGESTION, "fleet"),
    ("ib_hw", "rnr_nak_retry_err"): _c("RNR NAK retries exhausted: a QP failed", "events", _TRANSPORT),
    ("ib_hw", "local_ack_timeout_err"): _c("QP ACK timeouts (the sender retransmitted)", "events", _TRANSPORT),
    ("ib_hw", "roce_slow_restart"): _c("RoCE flows restarted slowly after repeated losses", "events", _CONGESTION),
    ("ib_hw", "out_of_sequence"): _c("packets received out of sequence (a loss upstream)", "packets", _TRANSPORT,
                                     "fleet"),
    ("ib_hw", "packet_seq_err"): _c("NAK sequence errors received (the peer saw a loss)", "events", _TRANSPORT,
                                    "fleet"),
    ("ib_hw", "implied_nak_seq_err"): _c("implied NAK sequence errors (a read/atomic response lost)", "events",
                                         _TRANSPORT, "fleet"),
    ("ib_hw", "out_of_buffer"): _c("packets dropped: no receive WQE posted", "packets", _TRANSPORT, "fleet"),
    ("ib_hw", "req_cqe_error"): _c("requester completions with error", "completions", _TRANSPORT, "fleet"),
    ("ib_hw", "resp_cqe_error"): _c("responder completions with error", "completions", _TRANSPORT, "fleet"),
    ("ib_hw", "roce_adp_retrans"): _c("RoCE adaptive retransmissions", "events", _TRANSPORT, "fleet"),
    ("ib_hw", "np_cnp_sent"): _c("congestion notification packets this port sent (ECN-marked traffic "
                                 "arrived)", "packets", _CONGESTION, "fleet"),
    ("ib_hw", "np_ecn_marked_roce_packets"): _c("ECN-marked RoCE packets received", "packets", _CONGESTION,
                                                "fleet"),
    ("ib_hw", "rp_cnp_handled"): _c("congestion notification packets handled (this port slowed down)",
                                    "packets", _CONGESTION, "fleet"),
    ("eth", "rx_prioN_pause"): _c("PFC pause frames received on priority N (the peer asked us to stop)",
                                  "pause frames", _CONGESTION, "fleet"),
    ("eth", "tx_prioN_pause"): _c("PFC pause frames sent on priority N (this NIC could not absorb traffic)",
                                  "pause frames", _CONGESTION, "fleet"),
    ("eth", "rx_pause_ctrl_phy"): _c("pause control frames received", "pause frames", _CONGESTION, "fleet"),
    ("eth", "tx_pause_ctrl_phy"): _c("pause control frames sent", "pause frames", _CONGESTION, "fleet"),
    ("eth", "rx_discards_phy"): _c("received packets dropped for lack of buffers (adapter congested)", "packets",
                                   _CONGESTION, "fleet"),
    ("eth", "tx_discards_phy"): _c("packets dropped on transmit (a pause storm or a stuck peer)", "packets",
                                   _CONGESTION, "fleet"),
    ("eth", "rx_prioN_discards"): _c("received packets dropped on priority N", "packets", _CONGESTION, "fleet"),
    ("eth", "rx_out_of_buffer"): _c("packets dropped: the receive queue had no buffer", "packets", _CONGESTION,
                                    "fleet"),
    ("eth", "rx_crc_errors_phy"): _c("frames received with a bad FCS (post-FEC errors)", "frames", _PHY, "fleet"),
    ("eth", "rx_symbol_err_phy"): _c("symbol errors on the physical port", "errors", _PHY, "fleet"),
    ("eth", "link_down_events_phy"): _c("times the physical link went down", "events", _FLAP),
}
_PRIO = re.compile(r"_prio[0-7]_")


def info(family: str, counter: str) -> CounterInfo | None:
    """The counter's entry (``rx_prio3_pause`` finds ``rx_prioN_pause``), or None."""
    return CATALOG.get((family, counter)) or CATALOG.get((family, _PRIO.sub("_prioN_", counter, count=1)))


def fleet_graded(family: str, counter: str) -> bool:
    """Whether the counter has no public absolute threshold and is graded against the fleet."""
    entry = info(family, counter)
    return entry is not None and entry.grading == "fleet"
