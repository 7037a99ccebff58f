"""Resources probe: memory size, CPU count, /dev/shm size and required services, against the profile.

    cat /proc/meminfo -> "MemTotal:       2113692160 kB"
    cpu-sysfs         -> "/sys/devices/system/cpu/online:0-223" and ".../present:0-223"
    df -Pk /dev/shm   -> "tmpfs  1056846080  0  1056846080  0% /dev/shm"
    systemd-units     -> "nvidia-persistenced.service loaded active running NVIDIA Persistence Daemon"

Check ids are in the ``system`` category (``system.memory``, ``system.cpu.count``, ``system.dev_shm``,
``system.service``). Parsers are in ``probes/system_parse.py``.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from healthcheck.core.grading import finding_from_expectation
from healthcheck.core.model import CommandResult, Finding, Status
from healthcheck.core.spec import EvalContext, ProbeSpec
from healthcheck.probes import register
from healthcheck.probes.system_parse import (
    ServiceState,
    active_service,
    parse_cpu_sysfs,
    parse_df_posix,
    parse_meminfo,
    parse_systemctl_units,
)

NO_SYSTEMCTL = "healthcheck: systemctl not installed"
_LIST_UNITS = "systemctl list-units --type=service --all --no-legend --no-pager --plain"


def units_command(services: list[str] | tuple[str, ...] = ()) -> str:
    """Every loaded service unit, then the named ``services`` asked for explicitly: systemd drops a
    stopped, disabled unit from the plain listing, but loads a unit named on the command line (its
    line then says ``loaded inactive dead``, or ``not-found`` when it is not installed)."""
    named = " ".join(shlex.quote(n if n.endswith(".service") else f"{n}.service") for n in services)
    return (f"if command -v systemctl >/dev/null 2>&1; then {_LIST_UNITS}"
            + (f"; {_LIST_UNITS} {named}" if named else "") + f"; else echo '{NO_SYSTEMCTL}'; fi")


COMMANDS = {
    "meminfo": "cat /proc/meminfo",
    "cpu-sysfs": "grep -H . /sys/devices/system/cpu/online /sys/devices/system/cpu/present",
    "dev-shm": "df -Pk /dev/shm",
    "systemd-units": units_command(),
}


def render_commands(options: Mapping[str, Any]) -> dict[str, str]:
    """The commands, with the host profile's ``system.services`` named in the systemd query."""
    profile = options.get("profile")
    exp = profile.expect("system.services") if hasattr(profile, "expect") else None
    wanted = sorted({str(s) for s in exp.value}) if exp is not None and isinstance(exp.value, list | tuple) else []
    return {**COMMANDS, "systemd-units": units_command(wanted)}


@dataclass(frozen=True)
class ResourcesObservation:
    mem_total_kib: int | None = None
    cpus_online: int | None = None
    cpus_present: int | None = None
    dev_shm_kib: int | None = None
    services: Mapping[str, ServiceState] | None = None  # None: systemd could not be asked
    services_error: str | None = None


def parse_resources(outputs: Mapping[str, CommandResult]) -> ResourcesObservation:
    def ok(cid: str) -> str | None:
        r = outputs.get(cid)
        return r.text if r is not None and r.rc == 0 else None

    cpus = parse_cpu_sysfs(ok("cpu-sysfs")) if ok("cpu-sysfs") is not None else {}
    services, services_error = _services(outputs.get("systemd-units"))
    return ResourcesObservation(
        mem_total_kib=parse_meminfo(ok("meminfo")) if ok("meminfo") is not None else None,
        cpus_online=cpus.get("online"), cpus_present=cpus.get("present"),
        dev_shm_kib=parse_df_posix(ok("dev-shm"), "/dev/shm") if ok("dev-shm") is not None else None,
        services=services, services_error=services_error)


def _services(result: CommandResult | None) -> tuple[Mapping[str, ServiceState] | None, str | None]:
    if result is None:
        return None, None
    if NO_SYSTEMCTL in result.text:
        return None, "systemctl is not installed"
    units = parse_systemctl_units(result.text)
    if result.rc != 0 and not units:
        first = (result.err_text or result.text).strip().splitlines()[:1]
        return None, f"systemctl failed (exit code {result.rc}): {first[0] if first else ''}".rstrip(": ")
    return units, None


def evaluate_resources(obs: ResourcesObservation, ctx: EvalContext) -> list[Finding]:
    return _resource_findings(obs, ctx) + _service_findings(obs, ctx)


def _resource_findings(obs: ResourcesObservation, ctx: EvalContext) -> list[Finding]:
    host, profile = ctx.host.name, ctx.profile
    out = []
    if obs.mem_total_kib is not None:
        out.append(finding_from_expectation(
            host, "system.memory", profile.expect("system.memory_gib"), round(obs.mem_total_kib / 2**20, 1),
            source="meminfo", profile=profile,
            remedy="Memory is missing: check dmidecode -t memory and the BMC event log for a failed or "
                   "unseated DIMM, then reseat or replace it"))
    if obs.cpus_online is not None:
        out.append(finding_from_expectation(
            host, "system.cpu.count", profile.expect("system.cpu_count"), obs.cpus_online, source="cpu-sysfs",
            profile=profile, remedy="Check BIOS settings (SMT, cores enabled) and the kernel command line "
                                    "(nr_cpus, maxcpus) against the fleet standard"))
        if obs.cpus_present is not None:
            out.append(finding_from_expectation(
                host, "system.cpu.offline", profile.expect("system.cpu_offline"),
                obs.cpus_present - obs.cpus_online, source="cpu-sysfs", profile=profile,
                remedy="A present CPU is offline: check dmesg for machine-check errors on it and bring it "
                       "back with `echo 1 > /sys/devices/system/cpu/cpuN/online` if healthy"))
    if obs.dev_shm_kib is not None:
        out.append(finding_from_expectation(
            host, "system.dev_shm", profile.expect("system.dev_shm_gib"), round(obs.dev_shm_kib / 2**20, 2),
            source="dev-shm", profile=profile,
            remedy="Enlarge /dev/shm (tmpfs size= in /etc/fstab, or --shm-size for containers): NCCL and "
                   "data loaders put shared-memory segments there"))
    return out


def _service_findings(obs: ResourcesObservation, ctx: EvalContext) -> list[Finding]:
    exp = ctx.profile.expect("system.services")
    if exp is None:
        return []
    host, wanted = ctx.host.name, [str(s) for s in (exp.value or ())]
    if obs.services is None:
        why = obs.services_error or "systemd units were not collected"
        return [Finding(host=host, check="system.service", component=name, status=Status.ERROR,
                        source="systemd-units", message=f"{name}: cannot tell whether it runs: {why}")
                for name in wanted]
    out = []
    for name in wanted:
        state = active_service(obs.services, name)
        active = state is not None and state.active == "active"
        got = "not installed" if state is None or state.load == "not-found" else \
            f"{state.active} ({state.sub}{', masked' if state.load == 'masked' else ''})"
        status = Status.PASS if active else Status(exp.severity)
        out.append(Finding(
            host=host, check="system.service", component=name, status=status, value=got, expected="active",
            source="systemd-units",
            message=f"{name}: {got}" + ("" if active else f", expected active (source: {exp.source})"),
            remedy=None if active else
            f"Install the package that provides {name} (the fleet image lists it), then `systemctl enable "
            f"--now {name}`" if got == "not installed" else
            f"Start and enable it: `systemctl enable --now {name}`; read `journalctl -u {name}` for why it "
            f"stopped"))
    return out


PROBE = register(ProbeSpec(
    name="resources",
    description="memory size, CPU count, /dev/shm size and required services against the profile",
    command_map=COMMANDS,
    render_commands=render_commands,
    command_tools={"systemd-units": ("systemctl",)},
    parse_fn=parse_resources,
    evaluate_fn=evaluate_resources,
))
