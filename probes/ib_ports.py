"""Which InfiniBand/RoCE ports are the profile's fabric, and the node-level findings of that choice.

    selection = fabric_ports(devices, profile)    # PortSelection(fabric=[...], other_layer=[...], ...)
    count_findings(host, selection, profile, "ib-sysfs")   # ib.hca.count, ib.port.count
    type_findings(host, selection, profile, "ib-sysfs")    # ib.hca.type: PASS, or WARN naming the HCAs

A profile is about a fabric: its link layer (``ib.port.link_layer``), its rate (``ib.port.rate_gbps``) and
its port count. The HCA types it lists (``ib.hca.type``) prefer the compute adapters where a node has
several kinds, but never empty the fabric on their own: an HCA of another type whose ports run the
profile's link layer at the profile's rate (an SR-IOV virtual function reports another PCI device id, a
newer ConnectX runs at the same rate) is graded as a fabric port with every HCA of its type (a down port
of it too), and the type difference is its own ``ib.hca.type`` WARN. When no HCA of a listed type or at
the rate is on the fabric's link layer, every port on that link layer is graded (a node with the wrong
adapters fails on their rate, not on a count of zero).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from healthcheck.core.grading import expected_text, grade_value, passes, short_source
from healthcheck.core.model import Finding, Status
from healthcheck.core.profiles import Expectation, Profile
from healthcheck.probes.ib_parse import IbDevice, IbPort

REMEDY_COUNT = ("An HCA or port is missing: check lspci for the adapter, dmesg for mlx5_core, the firmware, and "
                "the port's link type (mlxconfig LINK_TYPE_P1: 1 = InfiniBand, 2 = Ethernet)")
REMEDY_SELECTOR = ("None of the node's HCAs has a name listed in the profile's ib.hca.names: if these are the compute "
                   "HCAs (named differently on this kernel or site), fix ib.hca.names; otherwise the node has the "
                   "wrong adapters")
REMEDY_TYPE = ("If these are the intended adapters (SR-IOV virtual functions report another PCI device id; a newer "
               "ConnectX at the same rate), add their CA type to ib.hca.type in the profile; otherwise check that "
               "the right adapter is installed (a part swapped for another model)")
REMEDY_OTHER_DOWN = ("Not a fabric port of this profile, so not graded: if it should carry traffic (frontend, "
                     "storage), check its cable, transceiver and switch port; if it is unused, disable it")
LISTED = 12  # HCAs named in one message before "... N more"


@dataclass(frozen=True)
class PortSelection:
    """The profile's fabric ports, and everything else the node has (named in findings, never dropped)."""

    fabric: list[IbPort] = field(default_factory=list)
    other_layer: list[IbPort] = field(default_factory=list)   # fabric HCAs' ports on another link layer
    other_hcas: list[IbDevice] = field(default_factory=list)  # HCAs the profile's selectors leave out
    off_type: list[IbDevice] = field(default_factory=list)    # graded as fabric although not of a listed type
    fabric_hcas: list[IbDevice] = field(default_factory=list)  # every HCA with a port in ``fabric``
    layer_only: bool = False  # no HCA of a listed type, or at the rate, on the link layer: all of it is fabric
    unnamed: int = 0  # HCAs left out by ``ib.hca.names`` (the first entries of ``other_hcas``)


def _wanted(profile: Profile, key: str) -> set[str] | None:
    exp = profile.expect(key)
    if exp is None:
        return None
    values = exp.value if isinstance(exp.value, list | tuple) else [exp.value]
    return {str(v).lower() for v in values}


def _split_layer(device: IbDevice, layer: set[str] | None) -> tuple[list[IbPort], list[IbPort]]:
    """The device's ports on the profile's link layer (or of unknown layer), and the others."""
    on: list[IbPort] = []
    off: list[IbPort] = []
    for port in device.ports:
        (off if layer and port.link_layer and port.link_layer.lower() not in layer else on).append(port)
    return on, off


def fabric_ports(devices: Sequence[IbDevice], profile: Profile) -> PortSelection:
    """Fabric ports by what the profile is about: HCAs named in ``ib.hca.names`` (when set), ports on
    ``ib.port.link_layer``, HCAs of a type in ``ib.hca.type`` or of a type that runs a port on that link
    layer at ``ib.port.rate_gbps`` (a VF id, another ConnectX at the same rate: its down ports too); when
    no such HCA is on the link layer, every port on it (they fail on their rate, not on a count of zero)."""
    types, names, layer = _wanted(profile, "ib.hca.type"), _wanted(profile, "ib.hca.names"), \
        _wanted(profile, "ib.port.link_layer")
    rate = profile.expect("ib.port.rate_gbps")
    unnamed = [d for d in devices if names and d.name.lower() not in names]
    candidates = [(device, *_split_layer(device, layer)) for device in devices if device not in unnamed]

    def kind(device: IbDevice) -> str:
        return (device.hca_type or "").lower()

    at_rate = {kind(d) for d, on, _ in candidates if rate is not None and any(_at_rate(p, rate) for p in on)}
    accepted = {kind(d) for d, _, _ in candidates if not types or kind(d) in types or kind(d) in at_rate}
    layer_only = not any(on for d, on, _ in candidates if kind(d) in accepted)
    selection = PortSelection(other_hcas=unnamed, layer_only=bool(types) and layer_only, unnamed=len(unnamed))
    for device, on, off in candidates:
        if kind(device) not in accepted and not (layer_only and on):
            selection.other_hcas.append(device)
            continue
        if types and kind(device) not in types and on:
            selection.off_type.append(device)
        if on:
            selection.fabric_hcas.append(device)
        selection.fabric.extend(on)
        selection.other_layer.extend(off)
    return selection


def _at_rate(port: IbPort, rate: Expectation | None) -> bool:
    """Whether the port runs at the profile's rate (any rate when the profile sets none)."""
    return rate is None or (port.rate_gbps is not None and passes(rate, port.rate_gbps))


def _named(devices: Sequence[IbDevice]) -> str:
    listed = ", ".join(f"{d.name} {d.hca_type or 'type unknown'}" for d in devices[:LISTED])
    return listed + (f" ... {len(devices) - LISTED} more" if len(devices) > LISTED else "")


def left_out_note(selection: PortSelection, profile: Profile) -> str:
    """`` (12 HCAs seen, 8 selected (types MT4129); not counted: mlx5_1 MT4125; not counted, other link
    layer: mlx5_0/1 Ethernet)``: what the count leaves out, so nothing vanishes from the report."""
    parts = []
    if selection.other_hcas:
        graded = len({p.device for p in selection.fabric} | {p.device for p in selection.other_layer})
        exp = profile.expect("ib.hca.type")
        kinds = f" (types {'/'.join(map(str, exp.value if isinstance(exp.value, list | tuple) else [exp.value]))})" \
            if exp is not None else ""
        parts.append(f"{graded + len(selection.other_hcas)} HCAs seen, {graded} selected{kinds}; not counted: "
                     f"{_named(selection.other_hcas)}")
    if selection.other_layer:
        parts.append("not counted, other link layer: "
                     + ", ".join(f"{p.name} {p.link_layer}" for p in selection.other_layer))
    return f" ({'; '.join(parts)})" if parts else ""


def count_findings(host: str, selection: PortSelection, profile: Profile, source: str) -> list[Finding]:
    """``ib.hca.count`` and ``ib.port.count`` of the fabric; a count of zero where the profile's name selector
    left every HCA out is the profile's fault (ERROR), not the node's."""
    hcas = {p.device for p in selection.fabric}
    note = left_out_note(selection, profile)
    out = []
    for check, value in (("ib.hca.count", len(hcas)), ("ib.port.count", len(selection.fabric))):
        grade = grade_value(check, profile.expect(check), value, remedy=REMEDY_COUNT, profile=profile)
        if grade.status is Status.PASS:
            out.append(grade.finding(host, "node", source))
            continue
        if not (selection.fabric or selection.other_layer) and 0 < len(selection.other_hcas) == selection.unnamed:
            grade = grade._replace(status=Status.ERROR, remedy=REMEDY_SELECTOR)
        out.append(grade.finding(host, "node", source, note=note))
    return out


def type_findings(host: str, selection: PortSelection, profile: Profile, source: str) -> list[Finding]:
    """``ib.hca.type``: PASS when every fabric HCA is of a listed type, WARN naming the others (graded as
    fabric all the same); nothing when the profile lists no type or the node has no fabric port."""
    exp = profile.expect("ib.hca.type")
    if exp is None or not selection.fabric:
        return []
    fabric_hcas = selection.fabric_hcas
    odd = selection.off_type  # each joined the fabric with a port on it
    if not odd:
        kinds = "/".join(sorted({d.hca_type or "type unknown" for d in fabric_hcas}))
        return [Finding(host=host, check="ib.hca.type", status=Status.PASS, value=kinds, expected=expected_text(exp),
                        source=source, message=f"{len(fabric_hcas)} fabric HCAs of type {kinds}")]
    kinds = "/".join(sorted({d.hca_type or "type unknown" for d in odd}))
    layer = profile.expect("ib.port.link_layer")
    rate = profile.expect("ib.port.rate_gbps")
    on_layer = f"link layer {layer.value}" if layer else "link layer"
    how = f"{on_layer} at the profile's rate ({expected_text(rate)})" if rate is not None else on_layer
    if selection.layer_only:
        how = f"{on_layer} (no HCA of a listed type{' or at the profile rate' if rate is not None else ''} on it)"
    return [Finding(host=host, check="ib.hca.type", status=Status.WARN, value=kinds, expected=expected_text(exp),
                    source=source, remedy=REMEDY_TYPE,
                    message=f"{len(odd)} of {len(fabric_hcas)} fabric HCAs are of a type the profile does not list "
                            f"({_named(odd)}; expected {expected_text(exp)}): graded as fabric ports by {how} "
                            f"(source: {short_source(exp.source)})")]


def other_port_findings(host: str, selection: PortSelection, source: str) -> list[Finding]:
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
                           expected="ACTIVE, or disabled on purpose", source=source, remedy=REMEDY_OTHER_DOWN,
                           message=f"{port.name} ({port.link_layer or 'link layer unknown'}, {why}): {state}"))
    return out
