"""PCI probe: GPUs and HCAs counted three ways (on the PCI bus, seen by the driver, expected by the profile).

    pci-sysfs      -> /sys/bus/pci/devices/0000:cb:00.0/class:0x030200   (NVIDIA and Mellanox functions only)
                      /sys/class/infiniband/mlx5_0/device:0000:1a:00.0    (the PCI function of each RDMA device)
    nvidia-smi-q-x -> the GPUs the driver sees (the gpu probe's output, run once per host)

A GPU missing from the PCI bus and a GPU present on the bus but missing from the driver are different
faults with different remedies: the first is hardware (slot, baseboard, power; a reboot will not bring it
back), the second is the driver losing or never initialising the GPU (Xid 79, RmInitAdapter failed,
bound to another driver). The same split holds for HCAs: a ConnectX function on the bus without an
RDMA device in ``/sys/class/infiniband`` did not initialise (firmware, mlx5_core). Check ids:

  ``pci.gpu.count``   NVIDIA GPUs on the bus vs the profile's ``gpu.count``
  ``pci.gpu.driver``  each GPU on the bus that nvidia-smi does not list (one PASS when all are listed)
  ``pci.hca.count``   Mellanox IB/Ethernet physical functions on the bus vs at least ``ib.hca.count``
  ``pci.hca.driver``  each of them without an RDMA device (one PASS when all have one)

Parsers are in ``probes/pci_parse.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from healthcheck.core.grading import grade_value
from healthcheck.core.model import CommandResult, Finding, Status
from healthcheck.core.spec import EvalContext, ParseError, ProbeSpec
from healthcheck.probes import register
from healthcheck.probes.gpu import BUNDLE_SOURCES, GPU_ID, GpuObservations, parse_gpu_sources
from healthcheck.probes.gpu import COMMANDS as GPU_COMMANDS
from healthcheck.probes.pci_parse import PciFunction, PciInventory, parse_lspci, parse_pci_sysfs, pci_address

PCI_SYSFS = (
    "for d in /sys/bus/pci/devices/*; do v=; read v < \"$d/vendor\" 2>/dev/null; case \"$v\" in 0x10de|0x15b3) "
    "grep -H -s . \"$d/vendor\" \"$d/device\" \"$d/class\"; "
    "if [ -L \"$d/driver\" ]; then l=$(readlink \"$d/driver\"); echo \"$d/driver:${l##*/}\"; fi; "
    "if [ -e \"$d/physfn\" ]; then l=$(readlink \"$d/physfn\"); echo \"$d/physfn:${l##*/}\"; fi;; esac; done; "
    "for i in /sys/class/infiniband/*; do if [ -e \"$i/device\" ]; then l=$(readlink -f \"$i/device\"); "
    "echo \"$i/device:${l##*/}\"; fi; done; echo '# pci-sysfs end'")
COMMANDS = {"pci-sysfs": PCI_SYSFS, GPU_ID: GPU_COMMANDS[GPU_ID]}
ACCEPTS = ("lspci", *BUNDLE_SOURCES)

_REMEDY_GPU_GONE = ("A GPU is missing from the PCI bus itself, so no driver action can bring it back: read the "
                    "BMC/SEL log for the slot, cold power-cycle the node through the BMC (a warm reboot rarely "
                    "re-enumerates it), reseat the GPU or baseboard cables; if it stays missing, RMA the GPU or "
                    "baseboard")
_REMEDY_GPU_DRIVER = ("The GPU enumerates on PCIe but the driver lost or never initialised it: check `dmesg` for "
                      "Xid 79 / 'fallen off the bus' / 'RmInitAdapter failed' on this address and which driver "
                      "is bound (`lspci -k -s ADDRESS`); reset the GPU or reboot; if it recurs, RMA the GPU")
_REMEDY_HCA_GONE = ("An HCA is missing from the PCI bus: check the BMC/SEL log and the slot/riser, reseat the "
                    "adapter, cold power-cycle; if it stays missing, replace the adapter")
_REMEDY_HCA_DRIVER = ("The adapter enumerates on PCIe but has no RDMA device: check `dmesg` for mlx5_core errors on "
                      "this address (firmware init timeout, 'health poll failed'), `mlxfwmanager` for the firmware, "
                      "that mlx5_ib is loaded; restart the driver (openibd) or reboot; replace the adapter if the "
                      "firmware will not come up")


@dataclasses.dataclass(frozen=True)
class DriverView:
    """The GPUs nvidia-smi listed: addresses (empty for ``nvidia-smi -L``), count and its errors."""

    source: str
    count: int | None
    addresses: tuple[str, ...] = ()
    errors: tuple[tuple[str | None, str], ...] = ()   # (address or None for the node, message)


@dataclasses.dataclass(frozen=True)
class PciObservation:
    bus: PciInventory | None            # None: neither pci-sysfs nor lspci was collected (older bundles)
    driver: DriverView | None = None    # None: no nvidia-smi output


def driver_view(gpus: GpuObservations) -> DriverView:
    return DriverView(source=gpus.source, count=gpus.count if gpus.count is not None else len(gpus.gpus),
                      addresses=tuple(pci_address(g.bus_id) for g in gpus.gpus if g.bus_id),
                      errors=tuple((pci_address(e.bus_id) if e.bus_id else None, e.message) for e in gpus.errors))


def parse_pci(outputs: Mapping[str, CommandResult]) -> PciObservation:
    """The bus view (``pci-sysfs``, else bundle ``lspci``) and the driver's view (nvidia-smi)."""
    sysfs, lspci = outputs.get("pci-sysfs"), outputs.get("lspci")
    bus = parse_pci_sysfs(sysfs.text) if sysfs is not None else parse_lspci(lspci.text) if lspci is not None \
        else None
    try:
        gpus = parse_gpu_sources(outputs)
    except ParseError:
        gpus = None  # the gpu probe reports nvidia-smi's unparsable output itself
    return PciObservation(bus=bus, driver=driver_view(gpus) if gpus is not None else None)


def evaluate_pci(obs: PciObservation, ctx: EvalContext) -> list[Finding]:
    if obs.bus is None:
        return [Finding(host=ctx.host.name, check="pci.gpu.count", status=Status.SKIP, source="pci-sysfs",
                        message="pci-sysfs was not collected (not in this bundle): the PCI bus was not compared")]
    return _gpu_findings(ctx, obs.bus, obs.driver) + _hca_findings(ctx, obs.bus)


def _where(f: PciFunction) -> str:
    return f"pci {f.address}"


def _gpu_findings(ctx: EvalContext, bus: PciInventory, driver: DriverView | None) -> list[Finding]:
    host, profile, source = ctx.host.name, ctx.profile, bus.source
    gpus = bus.gpus
    count_exp = profile.expect("gpu.count")
    if not gpus and count_exp is None:
        return [Finding(host=host, check="pci.gpu.count", status=Status.SKIP, value=0, source=source,
                        message=f"no NVIDIA GPU on the PCI bus, and profile {profile.name} expects none")]
    listed = ", ".join(f"{g.address} ({g.ids})" for g in gpus) or "none"
    unseen = sorted(set(driver.addresses) - {g.address for g in gpus}) if driver is not None else []
    if unseen:  # the bus listing contradicts the driver: it is incomplete, not proof of a missing GPU
        return [Finding(host=host, check="pci.gpu.count", status=Status.ERROR, value=len(gpus), source=source,
                        expected="every GPU nvidia-smi lists on the PCI bus listing",
                        message=f"nvidia-smi lists GPUs the PCI listing lacks ({', '.join(unseen)}): the {source} "
                                "listing is incomplete (container or restricted /sys?), the bus was not compared",
                        remedy="Run the sweep where the host's /sys/bus/pci is visible (not inside a container)")]
    grade = grade_value("pci.gpu.count", count_exp, len(gpus), remedy=_REMEDY_GPU_GONE, profile=profile)
    seen = f" (nvidia-smi lists {driver.count})" if driver is not None and driver.count is not None else ""
    out = [grade.finding(host, "node", source, detail=f"; NVIDIA GPUs on the PCI bus: {listed}{seen}")]
    return out + _driver_findings(host, gpus, driver, source)


def _driver_findings(host: str, gpus: tuple[PciFunction, ...], driver: DriverView | None,
                     source: str) -> list[Finding]:
    sources = f"{source},{driver.source}" if driver is not None else source
    if driver is None:
        return [Finding(host=host, check="pci.gpu.driver", status=Status.SKIP, source=source,
                        message="no nvidia-smi output to compare the PCI bus with")]
    bus_ids = set(driver.addresses)
    listed = driver.count or 0
    if not bus_ids and listed:  # nvidia-smi -L: no addresses, compare the numbers only
        if listed >= len(gpus):
            return [Finding(host=host, check="pci.gpu.driver", status=Status.PASS, value=listed,
                            expected=f">= {len(gpus)}", source=sources,
                            message=f"{len(gpus)} GPUs on the PCI bus, {listed} listed by nvidia-smi")]
        return [Finding(host=host, check="pci.gpu.driver", status=Status.FAIL, value=listed,
                        expected=f"{len(gpus)} (the GPUs on the PCI bus)", unit="GPUs", source=sources,
                        message=f"{len(gpus)} GPUs on the PCI bus but nvidia-smi lists only {listed}",
                        remedy=_REMEDY_GPU_DRIVER)]
    errors = {addr: message for addr, message in driver.errors if addr}
    node_error = next((message for addr, message in driver.errors if not addr), None)
    out = []
    for gpu in gpus:
        if gpu.address in bus_ids:
            continue
        bound = gpu.driver if gpu.driver else ("none" if source == "pci-sysfs" else "unknown")
        said = errors.get(gpu.address) or node_error
        reason = f"; nvidia-smi: {said}" if said else ""
        other = f" (bound to {gpu.driver}, not nvidia: passthrough or a blacklist?)" \
            if gpu.driver and gpu.driver != "nvidia" else ""
        out.append(Finding(
            host=host, check="pci.gpu.driver", component=_where(gpu), status=Status.FAIL,
            value=f"on PCI, not in nvidia-smi (driver: {bound})", expected="listed by nvidia-smi",
            source=sources, remedy=_REMEDY_GPU_DRIVER,
            message=f"GPU {gpu.ids} at {gpu.address} is on the PCI bus but missing from the driver's "
                    f"list{other}{reason}"))
    if not out and gpus:
        out.append(Finding(host=host, check="pci.gpu.driver", status=Status.PASS, value=len(gpus), unit="GPUs",
                           expected="every GPU on the PCI bus listed by nvidia-smi", source=sources,
                           message=f"all {len(gpus)} GPUs on the PCI bus are listed by nvidia-smi"))
    return out


def _hca_findings(ctx: EvalContext, bus: PciInventory) -> list[Finding]:
    host, profile, source = ctx.host.name, ctx.profile, bus.source
    hcas = bus.hcas
    exp = profile.expect("ib.hca.count")
    if exp is None:
        if not hcas:
            return []
        return [Finding(host=host, check="pci.hca.count", status=Status.SKIP, value=len(hcas), source=source,
                        message=f"{len(hcas)} Mellanox/NVIDIA network functions on the PCI bus; no ib.hca.count "
                                f"in profile {profile.name} to compare with",
                        remedy=f"Set ib.hca.count in profile {profile.name} to grade the adapter count")]
    if not hcas and not bus.drivers_known:
        return [Finding(host=host, check="pci.hca.count", status=Status.SKIP, value=0, source=source,
                        message="the lspci listing holds no Mellanox function (filtered with -d 10de:?): "
                                "HCAs not compared",
                        remedy="Capture lspci without a vendor filter (healthcheck's own pci-sysfs command lists "
                               "both) to compare the HCAs")]
    # The bus also carries storage/management ports of the same family: at least the fabric HCAs must be there.
    floor = dataclasses.replace(exp, op="ge")
    grade = grade_value("pci.hca.count", floor, len(hcas), remedy=_REMEDY_HCA_GONE, profile=profile)
    listed = ", ".join(f"{h.address} ({h.ids})" for h in hcas) or "none"
    out = [grade.finding(host, "node", source, detail=f"; on the PCI bus: {listed}")]
    if not bus.drivers_known:
        return [*out, Finding(host=host, check="pci.hca.driver", status=Status.SKIP, source=source,
                              message="lspci output carries no RDMA device mapping: not compared",
                              remedy="Capture the pci-sysfs command (it maps functions to /sys/class/infiniband) "
                                     "to check every adapter has its RDMA device")]
    with_rdma = {addr: name for name, addr in bus.rdma_devices.items()}
    missing = [h for h in hcas if h.address not in with_rdma]
    for hca in missing:
        bound = hca.driver or "none"
        out.append(Finding(
            host=host, check="pci.hca.driver", component=_where(hca), status=Status.FAIL,
            value=f"on PCI, no RDMA device (driver: {bound})", expected="an RDMA device in /sys/class/infiniband",
            source=source, remedy=_REMEDY_HCA_DRIVER,
            message=f"adapter {hca.ids} at {hca.address} is on the PCI bus but has no RDMA device in "
                    f"/sys/class/infiniband (bound driver: {bound})"))
    if hcas and not missing:
        out.append(Finding(host=host, check="pci.hca.driver", status=Status.PASS, value=len(hcas), source=source,
                           expected="an RDMA device for every adapter function on the PCI bus",
                           message=f"all {len(hcas)} adapter functions on the PCI bus have an RDMA device"))
    return out


PROBE = register(ProbeSpec(
    name="pci",
    description="GPUs and HCAs on the PCI bus vs the driver (nvidia-smi, /sys/class/infiniband) vs the profile",
    command_map=COMMANDS,
    parse_fn=parse_pci,
    evaluate_fn=evaluate_pci,
    accepts=ACCEPTS,
))
