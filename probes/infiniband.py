"""InfiniBand / RoCE probe: HCAs and ports from sysfs (and ``ibstat``), graded against the profile.

    ib-sysfs   -> /sys/class/infiniband/mlx5_0/ports/1/rate:400 Gb/sec (4X NDR)     (one "path:value" line
                  per sysfs file, as ``grep -H``; a closing "# ib-sysfs end" line proves completeness)
    ibstat     -> CA 'mlx5_0' / Port 1: / State: Active / Rate: 400 / Link layer: InfiniBand
    peermem-module -> "nvidia_peermem" (a GPUDirect RDMA module present in /sys/module), then "# peermem end"

sysfs is preferred (it carries width, speed and error counters); ``ibstat`` is the fallback for
capture bundles without sysfs, and its ``ibpanic`` abort is reported naming the device. Error
counters are graded absolutely and by their growth since the previous run (``ctx.previous``).
Parsers live in ``probes/ib_parse.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from healthcheck.probes import register
from healthcheck.probes.ib_parse import (
    COUNTER_BITS,
    IbDevice,
    IbObservation,
    IbPort,
    parse_ib_sysfs,
    parse_ibstat,
    parse_peermem_module,
)

from healthcheck.core.grading import expected_text, finding_from_expectation, grade, passes
from healthcheck.core.model import CommandResult, Finding, Status
from healthcheck.core.profiles import Expectation, Profile
from healthcheck.core.spec import EvalContext, ParseError, ProbeSpec

_SYSFS_FILES = ("fw_ver", "hca_type", "board_id", "ports/*/state", "ports/*/phys_state", "ports/*/rate",
                "ports/*/link_layer", "ports/*/counters/*", "ports/*/hw_counters/*")
IB_SYSFS = ("if ls -d /sys/class/infiniband/*/ports >/dev/null 2>&1; then grep -H -s . "
            + " ".join(f"/sys/class/infiniband/*/{f}" for f in _SYSFS_FILES)
            + "; echo '# ib-sysfs end'; else echo '# ib-sysfs: no /sys/class/infiniband devices'; fi")
COMMANDS = {
    "ib-sysfs": IB_SYSFS,
    "ibstat": "if command -v ibstat >/dev/null 2>&1; then ibstat; "
              "else echo 'healthcheck: ibstat not installed'; fi",
    "peermem-module": "for m in nvidia_peermem nv_peer_mem; do if [ -d /sys/module/$m ]; then echo $m; fi; "
                      "done; echo '# peermem end'",
}
COMMAND_TOOLS = {"ib-sysfs": ("infiniband",), "ibstat": ("infiniband",)}  # healthcheck/run/nodetools.py
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
    modules = outputs.get("peermem-module")
    peermem = parse_peermem_module(modules.text, PEERMEM_MODULES) if modules is not None else None
    return IbObservation(devices=devices, source=source or "ibstat", ibstat_error=ibstat_error,
                         peermem_modules=peermem, peermem_collected=modules is not None)


@dataclass(frozen=True)
class PortSelection:
    """The profile's fabric ports, and everything else the node has (named in findings, never dropped)."""

    fabric: list[IbPort]
    other_layer: list[IbPort]       # fabric-type HCAs whose port runs another link layer (storage, frontend)
    other_hcas: list[IbDevice]      # HCAs whose type or name the profile does not select


def fabric_ports(devices: tuple[IbDevice, ...], profile: Profile) -> PortSelection:
    """Fabric ports by the profile's selectors: HCAs whose type is in ``ib.hca.type`` and name in
    ``ib.hca.names`` (each optional), ports whose link layer is ``ib.port.link_layer`` (storage and
    management NICs of the same type run Ethernet)."""
    def wanted(key: str) -> set[str] | None:
        exp = profile.expect(key)
        if exp is None:
            return None
        values = exp.value if isinstance(exp.value, list | tuple) else [exp.value]
        return {str(v).lower() for v in values}

    types, names, layer = wanted("ib.hca.type"), wanted("ib.hca.names"), wanted("ib.port.link_layer")
    selection = PortSelection([], [], [])
    for device in devices:
        if (types and (device.hca_type or "").lower() not in types) or (names and device.name.lower() not in names):
            selection.other_hcas.append(device)
            continue
        for port in device.ports:
            if layer and port.link_layer and port.link_layer.lower() not in layer:
                selection.other_layer.append(port)
            else:
                selection.fabric.append(port)
    return selection


_REMEDY_COUNT = ("An HCA or port is missing: check lspci for the adapter, dmesg for mlx5_core, the firmware, and "
                 "the port's link type (mlxconfig LINK_TYPE_P1: 1 = InfiniBand, 2 = Ethernet)")
_REMEDY_TYPES = ("None of the node's HCAs is of a type the profile selects: if these are the compute HCAs (e.g. "
                 "virtual functions, another ConnectX generation), add their CA type to ib.hca.type in the "
                 "profile; otherwise the node has the wrong adapters")
_REMEDY_OTHER_DOWN = ("Not a fabric port of this profile, so not graded: if it should carry traffic (frontend, "
                      "storage), check its cable, transceiver and switch port; if it is unused, disable it")


def _left_out_note(selection: PortSelection, profile: Profile) -> str:
    """``9 HCAs seen, 0 of type MT4123/MT4124: mlx5_0 MT4126, ...`` and the ports of another link layer."""
    parts = []
    if selection.other_hcas:
        exp = profile.expect("ib.hca.type")
        values = exp.value if exp is not None and isinstance(exp.value, list | tuple) else [exp.value if exp else "any"]
        fabric_hcas = len({p.device for p in selection.fabric} | {p.device for p in selection.other_layer})
        listed = ", ".join(f"{d.name} {d.hca_type or 'type unknown'}" for d in selection.other_hcas[:12])
        more = f" ... {len(selection.other_hcas) - 12} more" if len(selection.other_hcas) > 12 else ""
        parts.append(f"{fabric_hcas + len(selection.other_hcas)} HCAs seen, {fabric_hcas} of type "
                     f"{'/'.join(map(str, values))}; not counted: {listed}{more}")
    if selection.other_layer:
        parts.append("not counted, other link layer: "
                     + ", ".join(f"{p.name} {p.link_layer}" for p in selection.other_layer))
    return f" ({'; '.join(parts)})" if parts else ""


def _count_findings(host: str, selection: PortSelection, profile: Profile, source: str) -> list[Finding]:
    hcas = sorted({p.device for p in selection.fabric})
    note = _left_out_note(selection, profile)
    out = []
    for check, value in (("ib.hca.count", len(hcas)), ("ib.port.count", len(selection.fabric))):
        f = finding_from_expectation(host, check, profile.expect(check), value, source=source,
                                     remedy=_REMEDY_COUNT, profile=profile)
        if f.status is not Status.PASS and not selection.fabric and not selection.other_layer \
                and selection.other_hcas:
            # every HCA is of an unselected type: the profile's selector, not the node, is the likely fault
            f = replace(f, status=Status.ERROR, remedy=_REMEDY_TYPES)
        out.append(_with_note(f, note) if f.status is not Status.PASS else f)
    return out


def _other_port_findings(host: str, selection: PortSelection, source: str) -> list[Finding]:
    """Ports outside the fabric that are not Active: WARN naming them (they must not vanish from the report)."""
    ports = [(p, "other link layer") for p in selection.other_layer]
    ports += [(p, f"HCA type {d.hca_type or 'unknown'} not in the profile") for d in selection.other_hcas
              for p in d.ports]
    out = []
    for port, why in ports:
        if port.state is None or port.state == "ACTIVE":
            continue
        state = " / ".join(v for v in (port.state, port.phys_state) if v)
        out.append(Finding(host=host, check="ib.port.other", component=port.name, status=Status.WARN, value=state,
                           expected="ACTIVE, or disabled on purpose", source=source, remedy=_REMEDY_OTHER_DOWN,
                           message=f"{port.name} ({port.link_layer or 'link layer unknown'}, {why}): {state}"))
    return out


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
    if not obs.devices and not any(k.startswith("ib.") for k in profile.expectations):
        findings.append(Finding(host=host, check="ib.hca.count", status=Status.SKIP, value=0, source=source,
                                message=f"no InfiniBand/RoCE devices, and profile {profile.name} "
                                        "expects none"))
        return findings
    selection = fabric_ports(obs.devices, profile)
    findings += _count_findings(host, selection, profile, source)
    findings += _other_port_findings(host, selection, source)
    previous = previous_counters(ctx.previous.get("infiniband"))
    rules, verdicts = _counter_rules(profile), {}
    facets = _PortFacets(profile)
    for port in selection.fabric:
        findings += facets.findings(host, port, source)
        findings += _counter_findings(host, port, ctx, source, previous.get(port.name), rules, verdicts)
    findings += _gpudirect_findings(host, obs, ctx)
    return findings


class _PortFacets:
    """A host's ``ib.port.state`` and ``ib.port.rate`` findings: the profile's five expectations looked up once,
    and each distinct set of port values graded once (a node's ports print the same state and rate: only
    the component differs between their findings)."""

    def __init__(self, profile: Profile) -> None:
        self.state = (profile.expect("ib.port.state"), profile.expect("ib.port.phys_state"))
        self.rate = (profile.expect("ib.port.rate_gbps"), profile.expect("ib.port.width"),
                     profile.expect("ib.port.speed"))
        self.graded: dict[tuple[Any, ...], _Outcome] = {}

    def findings(self, host: str, port: IbPort, source: str) -> list[Finding]:
        state, phys = self.state
        rate, width, speed = self.rate
        return [
            self._finding(host, "ib.port.state", port.name, source, _REMEDY_LINK, [
                ("state", port.state, state), ("physical state", port.phys_state, phys)]),
            self._finding(host, "ib.port.rate", port.name, source, _REMEDY_RATE, [
                ("rate", port.rate_gbps, rate), ("width", port.width, width), ("speed", port.speed, speed)],
                shown=port.rate_text)]

    def _finding(self, host: str, check: str, component: str, source: str, remedy: str,
                 parts: list[tuple[str, Any, Expectation | None]], shown: str | None = None) -> Finding:
        # the values with their types: 400 and 400.0 grade alike but print differently
        key = (check, source, shown, *[(value.__class__, value) for _, value, _ in parts])
        try:
            outcome = self.graded.get(key)
        except TypeError:  # an unhashable value: graded on its own
            return _combined(host, check, component, source, remedy, parts, shown)
        if outcome is None:
            outcome = self.graded[key] = _combined_outcome(check, source, remedy, parts, shown)
        status, value, expected, message, remedy_out = outcome
        return Finding(host=host, check=check, component=component, status=status, value=value,
                       expected=expected, message=component + message, source=source, remedy=remedy_out)


# status, value, expected, message without its leading component, remedy
_Outcome = tuple[Status, Any, Any, str, str | None]


def _combined(host: str, check: str, component: str, source: str, remedy: str,
              parts: list[tuple[str, Any, Expectation | None]], shown: str | None = None) -> Finding:
    """One finding for several facets of a port (state + physical state; rate + width + speed)."""
    status, value, expected, message, remedy_out = _combined_outcome(check, source, remedy, parts, shown)
    return Finding(host=host, check=check, component=component, status=status, value=value,
                   expected=expected, message=component + message, source=source, remedy=remedy_out)


def _combined_outcome(check: str, source: str, remedy: str, parts: list[tuple[str, Any, Expectation | None]],
                      shown: str | None) -> _Outcome:
    """``_combined``'s grading of ``parts``, which does not depend on the port's name."""
    expected_parts = [(label, value, exp) for label, value, exp in parts if exp is not None]
    measured = shown or " / ".join(str(v) for _, v, _ in parts if v is not None)
    if not expected_parts:
        return Status.SKIP, measured, None, f": no expectation for {check} in the profile", None
    # a value the tool does not print (ibstat has no width or speed) is not graded, and says so
    unprinted = [label for label, value, _ in expected_parts if value is None]
    graded = [(label, value, exp) for label, value, exp in expected_parts if value is not None]
    why = f" ({', '.join(unprinted)} not reported by {source}: not graded)" if unprinted else ""
    if not graded:
        return Status.SKIP, measured or None, None, f": {', '.join(unprinted)} not reported by {source}", None
    statuses, bad, expected = [], [], []
    for label, value, exp in graded:
        status = grade(exp, value)
        statuses.append(status)
        expected.append(expected_text(exp))
        if status is not Status.PASS:
            bad.append(f"{label} {value if value is not None else 'unknown'} instead of {exp.value}")
    status = max(statuses, key=lambda s: s.rank)
    what = check.split(".")[-1]
    if status is Status.PASS:
        message = f": {what} {measured}{why}"
    else:
        sources = sorted({exp.source for _, _, exp in graded})
        message = f": {what} {measured}: {'; '.join(bad)}{why} (source: {'; '.join(sources)})"
    return status, measured, ", ".join(expected), message, None if status is Status.PASS else remedy


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
    """The profile's expectations for one counter name, with their check ids."""

    name: str
    exp: Expectation | None         # ib.counter.NAME
    growth_exp: Expectation | None  # ib.counter_growth.NAME

    @property
    def check(self) -> str:
        return _COUNTER + self.name

    @property
    def growth_check(self) -> str:
        return _GROWTH + self.name


def _counter_rules(profile: Profile) -> list[_CounterRule]:
    """The counters the profile grades (``ib.counter.NAME``, ``ib.counter_growth.NAME``), by name: looked up
    once per host, not twice per counter of every port."""
    rules: dict[str, list[Expectation | None]] = {}
    for key, exp in profile.expectations.items():
        if not key.startswith("ib.counter"):  # one test for the ~100 keys that are neither
            continue
        if key.startswith(_COUNTER):
            rules.setdefault(key[len(_COUNTER):], [None, None])[0] = exp
        elif key.startswith(_GROWTH):
            rules.setdefault(key[len(_GROWTH):], [None, None])[1] = exp
    return [_CounterRule(name, exp, growth) for name, (exp, growth) in sorted(rules.items())]


def _counter_findings(host: str, port: IbPort, ctx: EvalContext, source: str,
                      before: Mapping[str, int] | None, rules: list[_CounterRule],
                      verdicts: dict[tuple[str, type, int], bool]) -> list[Finding]:
    """Every counter over its threshold or grown too fast (a Finding is built only for those), else one
    PASS for the port. ``verdicts`` remembers ``passes`` per check and value across the host's ports."""
    findings, checked, profile, counters = [], 0, ctx.profile, port.counters
    for rule in rules:  # by counter name
        value = counters.get(rule.name, _MISSING)
        if value is _MISSING:
            continue
        name, exp, growth_exp = rule.name, rule.exp, rule.growth_exp
        if exp is not None:
            checked += 1
            key = (value.__class__, value, name)  # never a growth check's key (check, type, value)
            ok = verdicts.get(key)
            if ok is None:
                ok = verdicts[key] = passes(exp, value)
            if not ok:
                f = finding_from_expectation(host, rule.check, exp, value, source=source,
                                             component=port.name, remedy=_REMEDY_COUNTER, profile=profile)
                if f.status is not Status.PASS:
                    findings.append(_with_note(f, _saturation_note(name, value)))
        if growth_exp is None or before is None or name not in before:
            continue
        checked += 1
        growth = value - before[name] if value >= before[name] else value  # a drop means a counter reset
        if _passes(verdicts, rule.growth_check, growth_exp, growth):
            continue
        f = finding_from_expectation(host, rule.growth_check, growth_exp, growth, source=source,
                                     component=port.name, remedy=_REMEDY_COUNTER, profile=profile)
        if f.status is not Status.PASS:
            flap = " since the previous run: the link is flapping" if name == "link_downed" else \
                " since the previous run"
            findings.append(_with_note(f, flap + _saturation_note(name, value)))
    if checked and not findings:
        findings.append(Finding(host=host, check="ib.port.counters", component=port.name, status=Status.PASS,
                                value=checked, source=source,
                                message=f"{port.name}: {checked} error-counter checks within thresholds"))
    return findings


def _passes(verdicts: dict[tuple[str, type, int], bool], check: str, exp: Expectation, value: int) -> bool:
    key = (check, value.__class__, value)
    ok = verdicts.get(key)
    if ok is None:
        ok = verdicts[key] = passes(exp, value)
    return ok


def _saturation_note(name: str, value: int) -> str:
    bits = COUNTER_BITS.get(name)
    if bits is None or value < (1 << bits) - 1:
        return ""
    return f" (saturated at its {bits}-bit maximum: the true count is higher)"


def _with_note(f: Finding, note: str) -> Finding:
    if not note:
        return f
    head, sep, tail = f.message.partition(" (source:")
    return replace(f, message=head + note + sep + tail)


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
    f = finding_from_expectation(
        host, "ib.gpudirect_rdma", exp, loaded, source="peermem-module", profile=ctx.profile,
        remedy="Load the GPUDirect RDMA module: `modprobe nvidia-peermem` (and list it in "
               "/etc/modules-load.d)")
    detail = ", ".join(obs.peermem_modules) if loaded else "neither nvidia_peermem nor nv_peer_mem loaded"
    return [replace(f, message=f"{f.message} ({detail})")]


PROBE = register(ProbeSpec(
    name="infiniband",
    description="InfiniBand/RoCE HCAs and ports: state, rate/width, link layer, error counters, peermem",
    command_map=COMMANDS,
    command_tools=COMMAND_TOOLS,
    parse_fn=parse_infiniband,
    evaluate_fn=evaluate_infiniband,
))
