"""Link flaps of the fabric ports: the kernel's link-down lines in the window and ``link_downed`` growth.

    flap_findings(host, devices, fabric_ports, log, before, ctx)
    # -> Finding(check="ib.link_flap", component="mlx5_6/1", status=FAIL, value=6,
    #            message="mlx5_6/1 (ib6): 6 link-down lines in the kernel log in the last 24 h ...")

A port's netdevs come from sysfs (``device/net/<netdev>/dev_port``, in the ib-sysfs dump); the lines are
the kernel's ``<netdev>: Link down`` (mlx5) and systemd-networkd's ``<netdev>: lost carrier`` in a full
journal or syslog (``kernel_log.parse_link_downs``). The events of a port are the more of the two
evidences: lines in the kernel-log window, and ``link_downed`` growth since the previous run (a counter
that went backwards counts its new value). Graded against ``ib.link_flap`` (events), or, where the
profile has none, the AzNHC rule for any hardware (5 or more in 24 h fail, any event warns). An IPoIB
netdev (``ib6``, ``ibp26s0``) whose port is not known (no ``device/net`` in the dump) is still named.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.grading import grade_value
from healthcheck.core.model import CommandResult, Finding, Status
from healthcheck.core.profiles import Expectation
from healthcheck.core.spec import EvalContext
from healthcheck.probes.ib_parse import IbDevice, IbPort
from healthcheck.probes.kernel_log import KernelLog, WindowedGroup, in_window, looks_like_kernel_log, parse_link_downs

CHECK = "ib.link_flap"
SOURCE = "kernel-log"
FLAP_RULE = Expectation(key=CHECK, op="le", value=4, warn=0, unit="events",
                        source="Azure/azurehpc-health-checks customTests/azure_ib_link_flapping.nhc: 5 or more "
                               "'lost carrier' events of one device in 24 h fail; any event warns (a rule for any "
                               "hardware, used where the profile sets no ib.link_flap)")
REMEDY = ("The link went down and came back: check the cable and transceiver (`mlxlink -d DEV -m`, reseat or "
          "swap), the switch port's log for the same times, and the port's firmware; a flapping link kills "
          "RDMA jobs, so drain the node until it holds")
_IPOIB = re.compile(r"^ib(?:p\w+|\d+)$")  # IPoIB netdev names: ib0, ib6, ibp26s0


def link_log(result: CommandResult | None) -> KernelLog | None:
    """The link-down lines of the kernel-log output, or None when it was not collected or is not a kernel log
    (the xid probe reports an unreadable log)."""
    if result is None:
        return None
    log = parse_link_downs(result.text)
    return log if log.source is not None or looks_like_kernel_log(result.text) else None


def flap_findings(host: str, devices: Sequence[IbDevice], fabric: Sequence[IbPort], log: KernelLog | None,
                  before: Mapping[str, Mapping[str, int]], ctx: EvalContext) -> list[Finding]:
    """One ``ib.link_flap`` per fabric port with evidence of a flap, named IPoIB netdevs of no known port,
    and one PASS for the host when the kernel log was read and no port flapped."""
    window_h = float(ctx.options.get("kernel_log_window_h", DEFAULTS.kernel_log_window_h))
    lines = {g.group.device: g for g in in_window(log, ctx.now, window_h) if g.count} if log else {}
    netdevs = {f"{d.name}/{port}": [n for n, p in d.netdevs if p == port] for d in devices for port in
               {p for _, p in d.netdevs}}
    exp = ctx.profile.expect(CHECK) or FLAP_RULE
    out: list[Finding] = []
    seen: set[str] = set()
    for port in fabric:
        names = netdevs.get(port.name, [])
        seen.update(names)
        windowed = [lines[n] for n in names if n in lines]
        growth = _growth(port, before.get(port.name))
        count = sum(g.count for g in windowed)
        if count or growth:
            out.append(_finding(host, port.name, names, windowed, growth, exp, window_h, ctx))
    for name, group in sorted(lines.items()):
        if name not in seen and _IPOIB.match(name or ""):
            out.append(_finding(host, name or "?", [], [group], None, exp, window_h, ctx,
                                note=" (an IPoIB netdev whose HCA port is not known: no device/net in ib-sysfs)"))
    if not out and log is not None and fabric:
        mapped = sum(1 for p in fabric if netdevs.get(p.name))
        out.append(Finding(host=host, check=CHECK, status=Status.PASS, value=0, unit="events", source=SOURCE,
                           expected=f"{exp.value} or fewer", message=f"no link-down line in the last {window_h:g} h "
                           f"for the netdevs of {mapped} of {len(fabric)} fabric ports, and no link_downed growth"))
    return out


def _growth(port: IbPort, before: Mapping[str, int] | None) -> int | None:
    now, prior = port.counters.get("link_downed"), (before or {}).get("link_downed")
    if now is None or prior is None:
        return None
    return now - prior if now >= prior else now


def _finding(host: str, component: str, names: list[str], windowed: list[WindowedGroup], growth: int | None,
             exp: Expectation, window_h: float, ctx: EvalContext, note: str = "") -> Finding:
    count = sum(g.count for g in windowed)
    events = max(count, growth or 0)
    grade = grade_value(CHECK, exp, events, remedy=REMEDY, profile=ctx.profile)
    said = [f"{count} link-down line{'s' if count != 1 else ''} in the kernel log in the last {window_h:g} h"
            + _span([t for g in windowed for t in (g.first, g.last) if t is not None])]
    if growth is not None:
        said.append(f"link_downed +{growth} since the previous run")
    sample = next((g.group.sample for g in windowed if g.group.sample), "")
    message = (f"{component}{' (' + ', '.join(names) + ')' if names else ''}: {'; '.join(said)}{note}"
               + (f"; e.g. \"{sample}\"" if sample else "") + f" (expected {exp.value} or fewer, source: "
               f"{exp.source})")
    return Finding(host=host, check=CHECK, component=component, status=grade.status, value=events, unit="events",
                   expected=f"{exp.value} or fewer", source=SOURCE if windowed else "ib-sysfs", message=message,
                   remedy=None if grade.status is Status.PASS else REMEDY)


def _span(times: list[datetime]) -> str:
    if not times:
        return ""
    first, last = min(times), max(times)
    fmt = "%Y-%m-%d %H:%M:%S"
    return f" ({first.strftime(fmt)} .. {last.strftime(fmt)} UTC)" if first != last else f" ({first.strftime(fmt)} UTC)"
