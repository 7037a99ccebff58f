"""``mlxlink`` link reports and ``ethtool --show-fec``: FEC mode and BER of each RDMA port (pure parsers).

    mlxlink    -> per RDMA device (``mlxlink -d <dev> -c``: Operational Info + Physical Counters and BER Info):
        # mlxlink mlx5_0
        State                              : Active
        Speed                              : IB-NDR
        FEC                                : Ethernet_Consortium_LL_50G_RS_FEC_PLR -(272,257+1)
        Effective Physical BER             : 15E-255
        Raw Physical BER                   : 3E-12
    # mlxlink end

The ``key : value`` layout is mlxlink's (a real CX7 ``--show_mo`` in the corpus, a real CX4 ``-c`` posted on
NVIDIA's forum: see tests/fixtures/mlxlink/README.md); values may carry trailing spaces. A BER is printed as
``<mantissa>E-<exponent>`` (``15E-255``: no error seen since the last clear).

    ethtool-fec -> per Ethernet netdev of an RDMA device (RoCE), its speed from sysfs then ``ethtool --show-fec``:
        # ethtool-fec mlx5_0 ens1f0np0
        speed:400000
        FEC parameters for ens1f0np0:
        Configured FEC encodings: Auto RS              (newer ethtool: ``Supported/Configured FEC encodings:``)
        Active FEC encoding: RS                        (``None`` or ``Off``: no FEC on the link)
    # ethtool-fec end

``ethtool --show-fec`` layout from real outputs quoted on the kernel lists (see tests/fixtures/ethtool/README.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from healthcheck.core.spec import ParseError

HEADER = "# mlxlink "
END = "# mlxlink end"
MISSING = "healthcheck: mlxlink not installed"
_FIELD = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9 ()\[\]/_.-]*?)\s*:\s*(?P<value>.*?)\s*$")
_BER = re.compile(r"^(?P<mantissa>\d{1,20}(?:\.\d{1,20})?)E(?P<exponent>[-+]?\d{1,5})$", re.IGNORECASE)
NO_FEC = ("no fec", "no-fec", "off", "none")
COMMAND = ("if command -v mlxlink >/dev/null 2>&1; then for p in /sys/class/infiniband/*; do "
           '[ -e "$p/device" ] || continue; d=${p##*/}; b=$(basename "$(readlink -f "$p/device")"); '
           'echo "# mlxlink $d"; mlxlink -d "$b" -c 2>&1; done; echo \'# mlxlink end\'; '
           f"else echo '{MISSING}'; fi")


ETH_HEADER = "# ethtool-fec "
ETH_END = "# ethtool-fec end"
ETH_MISSING = "healthcheck: ethtool not installed"
ETH_COMMAND = (
    "if command -v ethtool >/dev/null 2>&1; then for n in /sys/class/infiniband/*/device/net/*; do "
    '[ "$(cat "$n/type" 2>/dev/null)" = 1 ] || continue; d=${n#/sys/class/infiniband/}; d=${d%%/*}; i=${n##*/}; '
    'echo "# ethtool-fec $d $i"; echo "speed:$(cat "/sys/class/net/$i/speed" 2>/dev/null)"; '
    'ethtool --show-fec "$i" 2>&1; done; echo \'# ethtool-fec end\'; '
    f"else echo '{ETH_MISSING}'; fi")
_ACTIVE = re.compile(r"^\s*Active FEC encoding:\s*(?P<active>.*?)\s*$")
_CONFIGURED = re.compile(r"^\s*(?:Supported/)?Configured FEC encodings:\s*(?P<modes>.*?)\s*$")


@dataclass(frozen=True)
class EthFec:
    """One RoCE netdev's FEC from ``ethtool --show-fec``; ``error``: ethtool printed no FEC for it."""

    device: str
    netdev: str
    speed_mbps: int | None = None
    configured: tuple[str, ...] = ()
    active: str | None = None
    error: str | None = None

    @property
    def port(self) -> str:
        return f"{self.device} {self.netdev}"

    @property
    def fec_off(self) -> bool:
        return self.active is not None and self.active.lower() in NO_FEC


@dataclass(frozen=True)
class LinkPhy:
    """One device's physical-layer report; a field mlxlink did not print is None."""

    device: str
    state: str | None = None
    speed: str | None = None
    fec: str | None = None
    effective_ber: float | None = None
    raw_ber: float | None = None
    effective_errors: int | None = None
    link_down: int | None = None
    recommendation: str | None = None
    error: str | None = None  # why mlxlink gave no report for this device (its first line)

    @property
    def fec_off(self) -> bool:
        return self.fec is not None and self.fec.strip().lower() in NO_FEC


def parse_ber(text: str) -> float:
    """``15E-255`` -> 1.5e-254; ParseError on anything else."""
    match = _BER.match(text.strip())
    if match is None:
        raise ParseError(f"not an mlxlink BER value: {text!r}", text)
    try:
        return float(match.group("mantissa")) * 10.0 ** int(match.group("exponent"))
    except (OverflowError, ValueError) as exc:  # an exponent no BER has (1E99999)
        raise ParseError(f"not an mlxlink BER value: {text[:40]!r}", text) from exc


def mlxlink_fields(text: str) -> dict[str, str]:
    """Every ``Key : value`` line of one mlxlink report (section titles and rules are not fields)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        match = _FIELD.match(line.strip())
        if match and match.group("value"):
            fields.setdefault(match.group("key").strip(), match.group("value"))
    return fields


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.strip().isdigit() else None


def parse_mlxlink_report(device: str, text: str) -> LinkPhy:
    """One device's ``mlxlink -c`` (or ``--show_mo``) report; ParseError when it has no Operational Info."""
    fields = mlxlink_fields(text)
    if "State" not in fields and "FEC" not in fields:
        raise ParseError(f"mlxlink output for {device} has no Operational Info (State/FEC lines)", text[-200:])
    bers = {key: parse_ber(fields[key]) for key in ("Effective Physical BER", "Raw Physical BER")
            if key in fields and fields[key].upper() not in ("N/A", "NA")}
    return LinkPhy(device=device, state=fields.get("State"), speed=fields.get("Speed"), fec=fields.get("FEC"),
                   effective_ber=bers.get("Effective Physical BER"), raw_ber=bers.get("Raw Physical BER"),
                   effective_errors=_int(fields.get("Effective Physical Errors")),
                   link_down=_int(fields.get("Link Down Counter")),
                   recommendation=fields.get("Recommendation"))


def parse_mlxlink(text: str) -> tuple[LinkPhy, ...] | None:
    """The ``mlxlink`` command's output: one report per device; None when mlxlink is not installed.
    ParseError when truncated (no closing line) or a device's report is not mlxlink's."""
    if MISSING in text:
        return None
    if END not in text:
        raise ParseError("mlxlink output is truncated (no closing '# mlxlink end' line)", text[-200:])
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.strip() == END:
            break
        if line.startswith(HEADER):
            current = blocks.setdefault(line[len(HEADER):].strip(), [])
        elif current is not None:
            current.append(line)
    return tuple(_device_report(device, "\n".join(lines)) for device, lines in blocks.items() if device)


def _device_report(device: str, text: str) -> LinkPhy:
    """A device mlxlink could not read (``-E- ...``, no permission) keeps its first line as the error."""
    try:
        return parse_mlxlink_report(device, text)
    except ParseError as exc:
        if "State" in mlxlink_fields(text):  # a report with a value that is not mlxlink's
            return LinkPhy(device=device, error=str(exc)[:200])
        first = next((line.strip() for line in text.splitlines() if line.strip()), "no output")
        return LinkPhy(device=device, error=first[:200])


def parse_show_fec(device: str, netdev: str, text: str) -> EthFec:
    """One netdev's block (``speed:`` line, then ``ethtool --show-fec``); a block without the
    ``Active FEC encoding`` line keeps ethtool's first line as the error (``Operation not supported``)."""
    speed: int | None = None
    configured: tuple[str, ...] = ()
    active: str | None = None
    other: list[str] = []
    for line in text.splitlines():
        if line.startswith("speed:"):
            value = line[len("speed:"):].strip()
            speed = int(value) if value.isdigit() else None
        elif (match := _ACTIVE.match(line)) is not None:
            active = match.group("active") or None
        elif (match := _CONFIGURED.match(line)) is not None:
            configured = tuple(match.group("modes").split())
        elif line.strip():
            other.append(line.strip())
    error = None if active is not None else next((o for o in other if not o.startswith("FEC parameters")),
                                                  "no 'Active FEC encoding' line")[:200]
    return EthFec(device=device, netdev=netdev, speed_mbps=speed, configured=configured, active=active, error=error)


def parse_ethtool_fec(text: str) -> tuple[EthFec, ...] | None:
    """The ``ethtool-fec`` command's output; None when ethtool is not installed. ParseError when truncated."""
    if ETH_MISSING in text:
        return None
    if ETH_END not in text:
        raise ParseError("ethtool-fec output is truncated (no closing '# ethtool-fec end' line)", text[-200:])
    blocks: dict[tuple[str, str], list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.strip() == ETH_END:
            break
        if line.startswith(ETH_HEADER):
            names = line[len(ETH_HEADER):].split()
            current = blocks.setdefault((names[0], names[1]), []) if len(names) == 2 else None
        elif current is not None:
            current.append(line)
    return tuple(parse_show_fec(device, netdev, "\n".join(lines)) for (device, netdev), lines in blocks.items())
