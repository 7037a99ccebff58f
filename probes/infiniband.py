"""InfiniBand / RoCE probe: HCAs and ports from sysfs (and ``ibstat``), graded against the profile.

    ib-sysfs   -> /sys/class/infiniband/mlx5_0/ports/1/rate:400 Gb/sec (4X NDR)     (one "path:value" line
                  per sysfs file, as ``grep -H``; a closing "# ib-sysfs end" line proves completeness)
    ibstat     -> CA 'mlx5_0' / Port 1: / State: Active / Rate: 400 / Link layer: InfiniBand
    peermem-module -> "nvidia_peermem" (a GPUDirect RDMA module present in /sys/module), then "# peermem end"
    kernel-log -> the xid probe's kernel log over the window: link-down lines of the ports' netdevs (link flaps)
    roce-config -> MTU, trust, PFC, ECN, GID index of each RoCE netdev (``probes/roce_config.py``; fleet.roce)
    mlxlink    -> ``mlxlink -d <pci address> -c`` of each RDMA device, where installed: FEC and BER
    ethtool-fec -> ``ethtool --show-fec`` of each RoCE netdev (and its speed), where installed: active FEC
                  (both parsed in ``probes/fec_parse.py``, graded in ``probes/ib_fec.py``)

sysfs is preferred (it carries width, speed and error counters); ``ibstat`` is the fallback for
capture bundles without sysfs, and its ``ibpanic`` abort is reported naming the device. Error
counters are graded absolutely and by their growth since the previous run (``ctx.previous``).
Parsers live in ``probes/ib_parse.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from healthcheck.core.grading import Grade, Outcome, ValueGrades, fold, grade_value
from healthcheck.core.model import CommandResult, Finding, Status
from healthcheck.core.profiles import Expectation, Profile
from healthcheck.core.spec import EvalContext, ParseError, ProbeSpec
from healthcheck.probes import register
from healthcheck.probes.fec_parse import COMMAND as MLXLINK_COMMAND
from healthcheck.probes.fec_parse import ETH_COMMAND, parse_ethtool_fec, parse_mlxlink
from healthcheck.probes.ib_fec import eth_fec_findings, phy_findings
from healthcheck.probes.ib_flaps import flap_findings, link_log
from healthcheck.probes.ib_parse import (
    COUNTER_BITS,
    IbDevice,
    IbObservation,
    IbPort,
    parse_ib_sysfs,
    parse_ibstat,
    parse_peermem_module,
)
from healthcheck.probes.ib_ports import count_findings, fabric_ports, other_port_findings, type_findings
from healthcheck.probes.roce_config import COMMAND as ROCE_COMMAND
from healthcheck.probes.roce_config import read_roce_config
from healthcheck.probes.xid import LOG_ID, kernel_log_command

_T = TypeVar("_T")
_SYSFS_FILES = ("fw_ver", "hca_type", "board_id", "ports/*/state", "ports/*/phys_state", "ports/*/rate",
                "ports/*/link_layer", "ports/*/counters/*", "ports/*/hw_counters/*", "device/net/*/dev_port")
# Where the fabric commands (ib-sysfs, ethtool-stats, the benchmark snapshots) find sysfs: /sys, or the node's
# own $HEALTHCHECK_SYSFS (a tree laid out like sysfs: the sshd test hosts set one). Set by the node's
# environment only; the lines then carry that prefix, which parse_ib_sysfs accepts before class/infiniband/.
SYSFS = "sysfs=${HEALTHCHECK_SYSFS:-/sys}"
IB_SYSFS = (f'{SYSFS}; if ls -d "$sysfs"/class/infiniband/*/ports >/dev/null 2>&1; then grep -H -s . '
            + " ".join(f'"$sysfs"/class/infiniband/*/{f}' for f in _SYSFS_FILES)
            + "; echo '# ib-sysfs end'; else echo '# ib-sysfs: no /sys/class/infiniband devices'; fi")
COMMANDS = {
    "ib-sysfs": IB_SYSFS,
    "ibstat": "if command -v ibstat >/dev/null 2>&1; then ibstat; "
              "else echo 'healthcheck: ibstat not installed'; fi",
    "peermem-module": "for m in nvidia_peermem nv_peer_mem; do if [ -d /sys/module/$m ]; then echo $m; fi; "
                      "done; echo '# peermem end'",
    "roce-config": ROCE_COMMAND,
    "mlxlink": MLXLINK_COMMAND,
    "ethtool-fec": ETH_COMMAND,
}
COMMAND_TOOLS = {"ib-sysfs": ("infiniband",), "ibstat": ("infiniband",),  # healthcheck/run/nodetools.py
                 LOG_ID: ("journalctl",)}


def ib_commands(options: Mapping[str, Any]) -> dict[str, str]:
    """The commands, with the kernel log over the run's window (shared with the xid probe: run once)."""
    return {**COMMANDS, LOG_ID: kernel_log_command(options)}
PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")
_REMEDY_LINK = ("Check the cable and transceiver of this port (reseat, then swap), the switch port, and "
                "`mlxlink -d <dev> -m`; a Down/Polling port has no peer or a bad cable")
_REMEDY_RATE = ("The link trained below its rated width or speed: reseat or replace the cable/transceiver, "
                "check the switch port, then retrain the link (`mlxlink -d <dev> -a TG`)")
_REMEDY_COUNTER = ("Physical-layer errors point at the cable or transceiver: check `mlxlink -m` BER, "
                   "reseat or replace the cable; clear counters (`perfquery -x -R`) and re-check")


def parse_infiniband(outputs: Mapping[str, CommandResult]) -> IbObservation:
    devices: tuple[IbDevice, ...] = ()
    source = None
    sysfs = outputs.get("ib-sysfs")
    if sysfs is not None and sysfs.rc in (0, 2):
        devices = parse_ib_sysfs(sysfs.text)
        source = "ib-sysfs"
    ibstat_error = None
    ibstat = outputs.get("ibstat")
    if ibstat is not None and "healthcheck: ibstat not installed" not in ibstat.text:
        parsed = parse_ibstat(ibstat.text + ibstat.err_text)
        ibstat_error = parsed.panic
        if not devices and parsed.devices:
            devices, source = parsed.devices, "ibstat"
    if source is None and ibstat_error is None and sysfs is not None:
        raise ParseError(f"ib-sysfs exited {sysfs.rc} and ibstat gave nothing usable", sysfs.err_text)
    roce = outputs.get("roce-config")
    roce_ports, roce_error = read_roce_config(roce.text if roce is not None else None)
    mlxlink = outputs.get("mlxlink")
    phy, phy_error = _read_phy(parse_mlxlink, mlxlink)
    eth_fec_out = outputs.get("ethtool-fec")
    eth_fec, eth_fec_error = _read_phy(parse_ethtool_fec, eth_fec_out)
    modules = outputs.get("peermem-module")
    peermem = parse_peermem_module(modules.text, PEERMEM_MODULES) if modules is not None else None
    return IbObservation(devices=devices, source=source or "ibstat", ibstat_error=ibstat_error,
                         devices_collected=sysfs is not None or ibstat is not None,
                         peermem_modules=peermem, peermem_collected=modules is not None,
                         link_log=link_log(outputs.get(LOG_ID)), roce=roce_ports, roce_error=roce_error,
                         phy=phy, phy_collected=mlxlink is not None and phy_error is None, eth_fec=eth_fec,
                         eth_fec_collected=eth_fec_out is not None and eth_fec_error is None,
                         phy_error="; ".join(e for e in (phy_error, eth_fec_error) if e) or None)


def _read_phy(parse: Callable[[str], _T | None], result: CommandResult | None) -> tuple[_T | None, str | None]:
    """``parse`` of a FEC/BER command's output, or why it could not be read (the rest of the probe is still
    graded); (None, None) when the command did not run."""
    if result is None:
        return None, None
    try:
        return parse(result.text), None
    except ParseError as exc:
        return None, str(exc)



def evaluate_infiniband(obs: IbObservation, ctx: EvalContext) -> list[Finding]:
    host, profile = ctx.host.name, ctx.profile
    source = obs.source
    findings: list[Finding] = []
    if obs.ibstat_error:
        findings.append(Finding(
            host=host, check="ib.ibstat", component=obs.ibstat_error.device or "node", status=Status.FAIL,
            value=obs.ibstat_error.message, source="ibstat",
            message=f"ibstat aborted: {obs.ibstat_error.message}",
            remedy="An HCA listed by the kernel could not be read: check dmesg for mlx5_core errors on "
                   "it, reload the driver (openibd restart) or reseat/replace the adapter"))
    if not obs.devices_collected:
        findings.append(Finding(host=host, check="ib.hca.count", status=Status.SKIP, source="ib-sysfs,ibstat",
                                message="ib-sysfs and ibstat were not collected (not in this bundle): "
                                        "HCAs and ports not graded"))
    elif not obs.devices and not any(k.startswith("ib.") for k in profile.expectations):
        findings.append(Finding(host=host, check="ib.hca.count", status=Status.SKIP, value=0, source=source,
                                message=f"no InfiniBand/RoCE devices, and profile {profile.name} "
                                        "expects none"))
        return findings
    else:
        findings += _port_findings(obs, ctx)
    findings += _gpudirect_findings(host, obs, ctx)
    if obs.devices or obs.phy or obs.eth_fec:  # no RDMA device: no tool-missing SKIP either
        findings += phy_findings(host, obs.phy, obs.phy_collected, profile)
        findings += eth_fec_findings(host, obs.eth_fec, obs.eth_fec_collected)
    if obs.phy_error:
        findings.append(Finding(host=host, check="ib.phy", status=Status.ERROR, source="mlxlink/ethtool-fec",
                                message=f"FEC/BER output could not be read: {obs.phy_error}",
                                remedy="Look at raw/<host>/mlxlink.out and ethtool-fec.out; rerun the collection"))
    if obs.roce_error:
        findings.append(Finding(host=host, check="ib.roce_config", status=Status.ERROR, source="roce-config",
                                message=f"roce-config could not be read: {obs.roce_error}",
                                remedy="Look at raw/<host>/roce-config.out; rerun the collection"))
    return findings


def _port_findings(obs: IbObservation, ctx: EvalContext) -> list[Finding]:
    """The HCA and port counts and types, each fabric port's state, rate and counters, and link flaps."""
    host, profile, source = ctx.host.name, ctx.profile, obs.source
    selection = fabric_ports(obs.devices, profile)
    findings = count_findings(host, selection, profile, source)
    findings += type_findings(host, selection, profile, source)
    findings += other_port_findings(host, selection, source)
    previous = previous_counters(ctx.previous.get("infiniband"))
    rules = _counter_rules(host, profile, source, growth=bool(previous))
    facets = _PortFacets(host, profile, source)
    graded: list[Finding | Outcome] = []
    for port in selection.fabric:
        graded += facets.outcomes(port)
        graded += _counter_findings(port, previous.get(port.name), rules)
    # a port that is not as expected keeps its own finding; the ports that pass a check fold into one
    findings += fold(host, source, [o for o in graded if isinstance(o, Outcome)], total=len(selection.fabric),
                     noun="ports", names=PORT_NAMES)
    findings += [f for f in graded if isinstance(f, Finding)]
    return findings + flap_findings(host, obs.devices, selection.fabric, obs.link_log, previous, ctx)


# How a folded PASS words a port check (``all 8 ports: state ACTIVE / LinkUp, within == ACTIVE, == LinkUp``)
PORT_NAMES = {"ib.port.state": "state", "ib.port.rate": "rate",
              "ib.port.counters": "error-counter checks within thresholds:"}


_Facet = tuple[str, Any, ValueGrades]  # label, the port's value, its grades
_NHC = ("LBNL NHC check_hw_ib (mej/nhc scripts/lbnl_hw.nhc): a port whose State is not ACTIVE or whose PhysState "
        "is not LinkUp is a fault on any hardware; used when the profile sets no ib.port.state, so WARN")
# The rule for a port's state where the profile has none (no profile, or a PCIe profile whose NICs vary):
# a port that is not Active/LinkUp is named, never left SKIP.
PORT_UP_RULE = {"ib.port.state": Expectation(key="ib.port.state", op="eq", value="ACTIVE", severity="WARN",
                                             source=_NHC),
                "ib.port.phys_state": Expectation(key="ib.port.phys_state", op="eq", value="LinkUp",
                                                  severity="WARN", source=_NHC)}


class _PortFacets:
    """A host's ``ib.port.state`` and ``ib.port.rate`` outcomes: one a port for several facets (state +
    physical state; rate + width + speed), each facet's values graded once on the host."""

    def __init__(self, host: str, profile: Profile, source: str) -> None:
        self.source = source
        exps = {key: profile.expect(key) for key in ("ib.port.state", "ib.port.phys_state", "ib.port.rate_gbps",
                                                     "ib.port.width", "ib.port.speed")}
        self.built_in = exps["ib.port.state"] is None and exps["ib.port.phys_state"] is None
        if self.built_in:
            exps.update(PORT_UP_RULE)
        self.grades = {key: ValueGrades(host, key, exp, source=source, remedy="", profile=profile)
                       for key, exp in exps.items()}

    def outcomes(self, port: IbPort) -> list[Outcome]:
        g = self.grades
        state = [("state", port.state, g["ib.port.state"]),
                 ("physical state", port.phys_state, g["ib.port.phys_state"])]
        rate = [("rate", port.rate_gbps, g["ib.port.rate_gbps"]), ("width", port.width, g["ib.port.width"]),
                ("speed", port.speed, g["ib.port.speed"])]
        return [self._outcome("ib.port.state", port.name, _REMEDY_LINK, state),
                self._outcome("ib.port.rate", port.name, _REMEDY_RATE, rate, shown=port.rate_text)]

    def _outcome(self, check: str, component: str, remedy: str, parts: list[_Facet],
                 shown: str | None = None) -> Outcome:
        """One outcome for several facets of a port; a facet the tool does not print is not graded, and
        the message says so."""
        measured = shown or " / ".join(str(v) for _, v, _ in parts if v is not None)
        unprinted: list[str] = []
        expected: list[str] = []
        bad: list[str] = []
        sources: set[str] = set()
        status = Status.PASS
        for label, value, grades in parts:
            if grades.exp is None:
                continue
            if value is None:
                unprinted.append(label)
                continue
            grade = grades.grade(value)
            expected.append(grades.expected or "")
            sources.add(grades.exp.source)
            if grade.status is not Status.PASS:
                bad.append(f"{label} {value} instead of {grades.exp.value}")
                status = max(status, grade.status, key=lambda s: s.rank)
        if not expected:
            why = f"{', '.join(unprinted)} not reported by {self.source}" if unprinted else \
                f"no expectation for {check} in the profile"
            return self._skip(check, component, measured or None if unprinted else measured, why)
        why = f" ({', '.join(unprinted)} not reported by {self.source}: not graded)" if unprinted else ""
        message, note = f"{check.split('.')[-1]} {measured}", ""
        if status is not Status.PASS:
            message += f": {'; '.join(bad)}{why} (source: {'; '.join(sorted(sources))})"
        else:  # a PASS's notes: kept when the ports that pass are folded into one finding
            note = why
            if check == "ib.port.state" and self.built_in:
                note += " (no ib.port.state in the profile: graded by the rule for any hardware, NHC check_hw_ib)"
        return Outcome(component, Grade(check, status, measured, ", ".join(expected), None, message, note,
                                        remedy=None if status is Status.PASS else remedy))

    def _skip(self, check: str, component: str, value: str | None, why: str) -> Outcome:
        return Outcome(component, Grade(check, Status.SKIP, value, None, None, why))


def previous_counters(previous: Any) -> dict[str, dict[str, int]]:
    """Port name -> counters from the previous run's observation (its JSON form)."""
    out: dict[str, dict[str, int]] = {}
    if not isinstance(previous, Mapping):
        return out
    for device in previous.get("devices") or ():
        for port in (device or {}).get("ports") or ():
            name = f"{port.get('device')}/{port.get('port')}"
            out[name] = {k: v for k, v in (port.get("counters") or {}).items() if isinstance(v, int)}
    return out


_COUNTER, _GROWTH = "ib.counter.", "ib.counter_growth."
_MISSING = object()


@dataclass(frozen=True)
class _CounterRule:
    """The profile's grades of one counter name: ``ib.counter.NAME`` and ``ib.counter_growth.NAME``."""

    name: str
    grades: ValueGrades | None
    growth: ValueGrades | None


def _counter_rules(host: str, profile: Profile, source: str, growth: bool = True) -> list[_CounterRule]:
    """The counters the profile grades, by name: looked up once per host, not twice per counter of every port
    (their growth only with ``growth``: a previous run to grow from)."""
    rules: dict[str, list[Expectation | None]] = {}
    for key, exp in profile.expectations.items():
        if not key.startswith("ib.counter"):  # most keys: neither kind
            continue
        if key.startswith(_COUNTER):
            rules.setdefault(key[len(_COUNTER):], [None, None])[0] = exp
        elif key.startswith(_GROWTH):
            rules.setdefault(key[len(_GROWTH):], [None, None])[1] = exp

    def grades(check: str, exp: Expectation | None) -> ValueGrades | None:
        return None if exp is None else ValueGrades(host, check, exp, source=source, remedy=_REMEDY_COUNTER,
                                                    profile=profile)
    return [_CounterRule(name, grades(_COUNTER + name, exp), grades(_GROWTH + name, growth_exp) if growth else None)
            for name, (exp, growth_exp) in sorted(rules.items())]


def _counter_findings(port: IbPort, before: Mapping[str, int] | None,
                      rules: list[_CounterRule]) -> list[Finding | Outcome]:
    """Every counter over its threshold or grown too fast (a Finding is built only for those), else the
    port's PASS outcome (folded with the other ports')."""
    findings: list[Finding | Outcome] = []
    checked, counters = 0, port.counters
    for rule in rules:  # by counter name
        name = rule.name
        value = counters.get(name, _MISSING)
        if value is _MISSING:
            continue
        if rule.grades is not None:
            checked += 1
            if not rule.grades.passes(value):
                findings.append(rule.grades.finding(port.name, value, note=_saturation_note(name, value)))
        if rule.growth is None or before is None or name not in before:
            continue
        checked += 1
        growth = value - before[name] if value >= before[name] else value  # a drop means a counter reset
        if not rule.growth.passes(growth):
            flap = " since the previous run: the link is flapping" if name == "link_downed" else \
                " since the previous run"
            findings.append(rule.growth.finding(port.name, growth, note=flap + _saturation_note(name, value)))
    if checked and not findings:
        return [Outcome(port.name, Grade("ib.port.counters", Status.PASS, checked, None, None,
                                         f"{checked} error-counter checks within thresholds"))]
    return findings


def _saturation_note(name: str, value: int) -> str:
    bits = COUNTER_BITS.get(name)
    if bits is None or value < (1 << bits) - 1:
        return ""
    return f" (saturated at its {bits}-bit maximum: the true count is higher)"


def _gpudirect_findings(host: str, obs: IbObservation, ctx: EvalContext) -> list[Finding]:
    exp = ctx.profile.expect("ib.gpudirect_rdma")
    if exp is None:
        return []
    if not obs.peermem_collected:
        return [Finding(host=host, check="ib.gpudirect_rdma", status=Status.SKIP, source="peermem-module",
                        message="peermem-module was not collected (not in this bundle)")]
    if obs.peermem_modules is None:
        return [Finding(host=host, check="ib.gpudirect_rdma", status=Status.ERROR, source="peermem-module",
                        message="peermem-module output missing or truncated: cannot tell whether "
                                "nvidia_peermem is loaded")]
    loaded = bool(obs.peermem_modules)
    grade = grade_value("ib.gpudirect_rdma", exp, loaded, profile=ctx.profile,
                        remedy="Load the GPUDirect RDMA module: `modprobe nvidia-peermem` (and list it in "
                               "/etc/modules-load.d)")
    detail = ", ".join(obs.peermem_modules) if loaded else "neither nvidia_peermem nor nv_peer_mem loaded"
    return [grade.finding(host, "node", "peermem-module", detail=f" ({detail})")]


PROBE = register(ProbeSpec(
    name="infiniband",
    description="InfiniBand/RoCE HCAs and ports: state, rate/width, link layer, error counters, FEC/BER, peermem",
    command_map=ib_commands({}),
    render_commands=ib_commands,
    command_tools=COMMAND_TOOLS,
    parse_fn=parse_infiniband,
    evaluate_fn=evaluate_infiniband,
))
