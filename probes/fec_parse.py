"""``mlxlink`` link reports: FEC mode and BER of each RDMA device's port (pure parsers).

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
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from healthcheck.core.spec import ParseError

HEADER = "# mlxlink "
END = "# mlxlink end"
MISSING = "healthcheck: mlxlink not installed"
_FIELD = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9 ()\[\]/_.-]*?)\s*:\s*(?P<value>.*?)\s*$")
_BER = re.compile(r"^(?P<mantissa>\d+(?:\.\d+)?)E(?P<exponent>[-+]?\d+)$", re.IGNORECASE)
NO_FEC = ("no fec", "no-fec", "off", "none")
COMMAND = ("if command -v mlxlink >/dev/null 2>&1; then for p in /sys/class/infiniband/*; do "
           '[ -e "$p/device" ] || continue; d=${p##*/}; b=$(basename "$(readlink -f "$p/device")"); '
           'echo "# mlxlink $d"; mlxlink -d "$b" -c 2>&1; done; echo \'# mlxlink end\'; '
           f"else echo '{MISSING}'; fi")


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
    return float(match.group("mantissa")) * 10.0 ** int(match.group("exponent"))


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
    except ParseError:
        first = next((line.strip() for line in text.splitlines() if line.strip()), "no output")
        return LinkPhy(device=device, error=first[:200])
