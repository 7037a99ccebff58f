"""FEC mode and BER of each RDMA port from ``mlxlink -c`` and ``ethtool --show-fec`` (infiniband probe, ``ib.phy.*``).

- ``ib.phy.ber``: the effective (post-FEC) physical BER against the profile's ``ib.phy.effective_ber``;
  the raw (pre-FEC) BER is graded only where the profile sets ``ib.phy.raw_ber`` (the built-in profiles do
  not: no vendor publishes a raw BER limit per link type), and is shown in the message either way.
- ``ib.phy.fec``: FEC off (mlxlink ``No FEC``; ethtool ``Active FEC encoding: None``/``Off``) on a PAM4 link
  (IB HDR/NDR/XDR, Ethernet 200G and faster) is WARN: those links are specified with RS-FEC on.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from healthcheck.core.grading import grade_value
from healthcheck.core.model import Finding, Status
from healthcheck.core.profiles import Profile
from healthcheck.probes.fec_parse import EthFec, LinkPhy

SOURCE = "mlxlink"
_PAM4 = re.compile(r"HDR|NDR|XDR|\b(?:200|400|800)G", re.IGNORECASE)
FEC_RULE_SOURCE = ("IEEE 802.3 Clause 119 (200GBASE-R/400GBASE-R PCS: RS(544,514) FEC is part of the PCS) and "
                   "InfiniBand HDR/NDR (PAM4 lanes run with RS-FEC; mlxlink prints the active FEC)")
_REMEDY_BER = ("Bit errors on this port's physical link: reseat the cable or transceiver at both ends, clean "
               "the fibre, then replace the cable/transceiver; check the peer switch port; clear the "
               "counters (`mlxlink -d <dev> -pc`) and re-check after traffic")
PAM4_MIN_MBPS = 200_000  # 200GBASE-R and faster (IEEE 802.3 Clause 119)
_REMEDY_FEC = ("This link runs without FEC although its speed needs RS-FEC: check the FEC setting of the "
               "port and its peer (`mlxlink -d <dev> --show_fec`; `--fec` to set it) and retrain the link")


def phy_findings(host: str, reports: Sequence[LinkPhy] | None, collected: bool, profile: Profile) -> list[Finding]:
    """Every port's ``ib.phy.ber`` and ``ib.phy.fec``; one SKIP when mlxlink is not installed."""
    if not collected:
        return []
    if reports is None:
        return [Finding(host=host, check="ib.phy", status=Status.SKIP, source=SOURCE,
                        message="mlxlink not installed on the node (NVIDIA MFT/mstflint): FEC and BER not read")]
    findings: list[Finding] = []
    for report in reports:
        port = f"{report.device}/1"
        if report.error is not None:
            findings.append(Finding(host=host, check="ib.phy", component=port, status=Status.SKIP, source=SOURCE,
                                    message=f"{port}: mlxlink gave no link report ({report.error}): FEC and "
                                            "BER not read"))
            continue
        findings.append(_ber_finding(host, port, report, profile))
        findings.append(_fec_finding(host, port, report))
    return findings


def _ber_detail(report: LinkPhy) -> str:
    parts = [f"raw BER {report.raw_ber:.3g}" if report.raw_ber is not None else None,
             f"{report.effective_errors} effective errors" if report.effective_errors is not None else None,
             f"mlxlink: {report.recommendation}" if report.recommendation else None]
    shown = [part for part in parts if part]
    return f" ({'; '.join(shown)})" if shown else ""


def _ber_finding(host: str, port: str, report: LinkPhy, profile: Profile) -> Finding:
    if report.effective_ber is None:
        return Finding(host=host, check="ib.phy.ber", component=port, status=Status.SKIP, source=SOURCE,
                       message=f"{port}: mlxlink printed no Effective Physical BER")
    exp = profile.expect("ib.phy.effective_ber")
    if exp is None:
        return Finding(host=host, check="ib.phy.ber", component=port, status=Status.SKIP, source=SOURCE,
                       value=report.effective_ber,
                       message=f"{port}: effective physical BER {report.effective_ber:.3g} not graded: no "
                               f"ib.phy.effective_ber in profile {profile.name}{_ber_detail(report)}")
    effective = grade_value("ib.phy.ber", exp, report.effective_ber,
                            remedy=_REMEDY_BER, profile=profile, what="effective physical BER")
    worst = effective
    raw_exp = profile.expect("ib.phy.raw_ber")
    if raw_exp is not None and report.raw_ber is not None:
        raw = grade_value("ib.phy.ber", raw_exp, report.raw_ber, remedy=_REMEDY_BER, profile=profile,
                          what="raw physical BER")
        if raw.status.rank > effective.status.rank:
            worst = raw
    return worst.finding(host, port, SOURCE, note=_ber_detail(report))


def _fec_finding(host: str, port: str, report: LinkPhy) -> Finding:
    speed = report.speed or "unknown speed"
    if report.fec is None:
        return Finding(host=host, check="ib.phy.fec", component=port, status=Status.SKIP, source=SOURCE,
                       message=f"{port}: mlxlink printed no FEC line")
    if report.fec_off and _PAM4.search(speed):
        return Finding(host=host, check="ib.phy.fec", component=port, status=Status.WARN, source=SOURCE,
                       value=report.fec, expected="RS-FEC",
                       message=f"{port}: FEC {report.fec} on the {speed} link, which needs RS-FEC "
                               f"(source: {FEC_RULE_SOURCE})", remedy=_REMEDY_FEC)
    return Finding(host=host, check="ib.phy.fec", component=port, status=Status.PASS, source=SOURCE,
                   value=report.fec, message=f"{port}: FEC {report.fec} on {speed}")


def eth_fec_findings(host: str, ports: Sequence[EthFec] | None, collected: bool) -> list[Finding]:
    """Every RoCE netdev's ``ib.phy.fec`` from ``ethtool --show-fec``; one SKIP when ethtool is not installed."""
    if not collected:
        return []
    if ports is None:
        return [Finding(host=host, check="ib.phy.fec", status=Status.SKIP, source="ethtool-fec",
                        message="ethtool not installed on the node: the FEC of RoCE ports not read")]
    return [_eth_fec_finding(host, port) for port in ports]


def _eth_fec_finding(host: str, fec: EthFec) -> Finding:
    port, source = fec.port, "ethtool-fec"
    if fec.error is not None:
        return Finding(host=host, check="ib.phy.fec", component=port, status=Status.SKIP, source=source,
                       message=f"{port}: ethtool --show-fec gave no active FEC ({fec.error})")
    speed = f"{fec.speed_mbps // 1000}G" if fec.speed_mbps else "unknown speed"
    shown = f"active FEC {fec.active} (configured {' '.join(fec.configured) or 'not printed'})"
    if not fec.fec_off:
        return Finding(host=host, check="ib.phy.fec", component=port, status=Status.PASS, source=source,
                       value=fec.active, message=f"{port}: {shown} on {speed}")
    if not fec.speed_mbps:
        return Finding(host=host, check="ib.phy.fec", component=port, status=Status.SKIP, source=source,
                       value=fec.active, message=f"{port}: {shown}; link speed unknown (link down?): not graded")
    if fec.speed_mbps < PAM4_MIN_MBPS:
        return Finding(host=host, check="ib.phy.fec", component=port, status=Status.SKIP, source=source,
                       value=fec.active, message=f"{port}: {shown} on {speed}: not graded below 200G (whether "
                                                 "the link needs FEC depends on its PHY and cable)")
    return Finding(host=host, check="ib.phy.fec", component=port, status=Status.WARN, source=source,
                   value=fec.active, expected="RS-FEC",
                   message=f"{port}: {shown} on the {speed} link, which needs RS-FEC (source: {FEC_RULE_SOURCE})",
                   remedy=_REMEDY_FEC.replace("`mlxlink -d <dev> --show_fec`; `--fec` to set it",
                                              "`ethtool --show-fec <netdev>`; `ethtool --set-fec <netdev> "
                                              "encoding rs` to set it"))
