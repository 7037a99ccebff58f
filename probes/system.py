"""System probe: who the node says it is, its kernel, OS and uptime.

    hostname            -> "gpu001"
    uname -r            -> "5.15.0-105-generic"
    cat /etc/os-release -> PRETTY_NAME="Ubuntu 22.04.4 LTS"
    cat /proc/uptime    -> "350735.47 234388.90"
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from healthcheck.grading import finding_from_expectation
from healthcheck.model import CommandResult, Finding, Status
from healthcheck.spec import EvalContext, ParseError, ProbeSpec
from probes import register

COMMANDS = {
    "hostname": "hostname",
    "uname-r": "uname -r",
    "os-release": "cat /etc/os-release",
    "uptime": "cat /proc/uptime",
}


@dataclass(frozen=True)
class SystemObservation:
    hostname: str | None = None
    kernel: str | None = None
    os_pretty_name: str | None = None
    os_id: str | None = None
    os_version_id: str | None = None
    uptime_s: float | None = None


def parse_os_release(text: str) -> dict[str, str]:
    """``/etc/os-release`` KEY=value lines (values may be quoted with shell quoting)."""
    fields = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        try:
            parts = shlex.split(value)
        except ValueError:
            parts = [value.strip("\"'")]
        fields[key.strip()] = parts[0] if parts else ""
    return fields


def parse_proc_uptime(text: str) -> float:
    """``/proc/uptime``: seconds since boot (first field)."""
    try:
        return float(text.split()[0])
    except (IndexError, ValueError) as exc:
        raise ParseError("/proc/uptime is not '<seconds> <idle seconds>'", text) from exc


def parse_system(outputs: Mapping[str, CommandResult]) -> SystemObservation:
    def line(cid: str) -> str | None:
        r = outputs.get(cid)
        if r is None or r.rc != 0:
            return None
        return r.text.strip().splitlines()[0].strip() if r.text.strip() else None

    os_fields = parse_os_release(outputs["os-release"].text) if "os-release" in outputs else {}
    uptime = outputs.get("uptime")
    return SystemObservation(
        hostname=line("hostname"), kernel=line("uname-r"),
        os_pretty_name=os_fields.get("PRETTY_NAME"), os_id=os_fields.get("ID"),
        os_version_id=os_fields.get("VERSION_ID"),
        uptime_s=parse_proc_uptime(uptime.text) if uptime is not None and uptime.rc == 0 else None,
    )


def evaluate_system(obs: SystemObservation, ctx: EvalContext) -> list[Finding]:
    host = ctx.host.name
    findings = []
    if obs.hostname is None:
        findings.append(Finding(host=host, check="system.hostname", status=Status.ERROR,
                                message="the node did not report its hostname", source="hostname"))
    else:
        short = obs.hostname.split(".")[0]
        same = short == host.split(".")[0]
        findings.append(Finding(
            host=host, check="system.hostname", status=Status.PASS if same else Status.WARN,
            value=obs.hostname, expected=host, source="hostname",
            message=(f"node reports hostname {obs.hostname}" if same else
                     f"node reports hostname {obs.hostname!r}, inventory calls it {host!r}"),
            remedy=None if same else "Check the inventory address for this host: it may reach another node"))
    for check, value, source in (("system.kernel", obs.kernel, "uname-r"),
                                 ("system.os", obs.os_pretty_name, "os-release")):
        exp = ctx.profile.expect(check)
        if value is None:
            findings.append(Finding(host=host, check=check, status=Status.ERROR, source=source,
                                    message=f"{source} gave no value"))
        elif exp is None:
            findings.append(Finding(host=host, check=check, status=Status.PASS, value=value,
                                    source=source, message=f"{check.split('.')[1]}: {value}"))
        else:
            findings.append(finding_from_expectation(
                host, check, exp, value, source=source, profile=ctx.profile,
                remedy="Reimage the node to the fleet's standard image"))
    if obs.uptime_s is not None:
        findings.append(Finding(host=host, check="system.uptime", status=Status.PASS,
                                value=round(obs.uptime_s), unit="s", source="uptime",
                                message=f"up {obs.uptime_s / 86400:.1f} days"))
    return findings


PROBE = register(ProbeSpec(
    name="system",
    description="hostname, kernel, OS release, uptime",
    command_map=COMMANDS,
    parse_fn=parse_system,
    evaluate_fn=evaluate_system,
))
