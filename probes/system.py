"""System probe: who the node is (hostname, kernel, OS, uptime) and whether its mounts answer.

    hostname            -> "gpu001"
    uname -r            -> "5.15.0-105-generic"
    cat /etc/os-release -> PRETTY_NAME="Ubuntu 22.04.4 LTS"
    cat /proc/uptime    -> "350735.47 234388.90"
    cat /proc/mounts    -> "server:/home /home nfs4 rw,relatime 0 0"
    mount-probe         -> "0 /home" / "124 /scratch": a bounded `timeout N stat -f` per real mount, in
                           parallel, so a hung NFS/Lustre mount is reported instead of hanging the sweep

Required mounts (``system.mounts`` in the profile) must be present; every probed mount must answer.
Memory, CPUs, /dev/shm and services are the ``resources`` probe (``probes/resources.py``).
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from healthcheck.core.grading import finding_from_expectation
from healthcheck.core.model import CommandResult, Finding, Status
from healthcheck.core.spec import EvalContext, ParseError, ProbeSpec
from healthcheck.probes import register
from healthcheck.probes.system_parse import MountEntry, parse_mount_probe, parse_proc_mounts

MOUNT_STAT_TIMEOUT_S = 5  # a healthy mount answers statfs in milliseconds; 5 s means it is hung
# Filesystem types that never hang on statfs or are not storage: not probed.
_PSEUDO_FS = ("proc|sysfs|devtmpfs|devpts|tmpfs|ramfs|cgroup|cgroup2|securityfs|pstore|bpf|debugfs|tracefs|"
              "mqueue|hugetlbfs|configfs|fusectl|binfmt_misc|autofs|rpc_pipefs|nsfs|squashfs|overlay|"
              "efivarfs|selinuxfs")
COMMANDS = {
    "hostname": "hostname",
    "uname-r": "uname -r",
    "os-release": "cat /etc/os-release",
    "uptime": "cat /proc/uptime",
    "proc-mounts": "cat /proc/mounts",
}


def mount_probe_command(extra: list[str] | tuple[str, ...] = (),
                        timeout_s: int = MOUNT_STAT_TIMEOUT_S) -> str:
    """All real mounts of /proc/mounts (plus ``extra``), each ``stat -f``'d under ``timeout``, in parallel.

    /proc/mounts escapes spaces as ``\\040``; ``printf %b`` turns them back before ``stat``."""
    paths = " ".join(shlex.quote(p) for p in extra)
    return ("probe_mount() { if command -v timeout >/dev/null 2>&1; then "
            f"timeout -k 1 {int(timeout_s)} stat -f -c %T \"$1\" >/dev/null 2>&1; "
            "else stat -f -c %T \"$1\" >/dev/null 2>&1; fi; echo \"$? $1\"; }; "
            f"for m in $(awk '$3 !~ /^({_PSEUDO_FS})$/ {{print $2}}' /proc/mounts | sort -u) {paths}; "
            "do probe_mount \"$(printf '%b' \"$m\")\" & done; wait; echo '# mount-probe end'")


def render_commands(options: Mapping[str, Any]) -> dict[str, str]:
    """The fixed commands plus a mount probe that also stats ``required_mounts`` (option or profile)."""
    extra = list(options.get("required_mounts") or ())
    profile = options.get("profile")
    exp = profile.expect("system.mounts") if hasattr(profile, "expect") else None
    if exp is not None and isinstance(exp.value, list | tuple):
        extra += [str(p) for p in exp.value]
    return {**COMMANDS, "mount-probe": mount_probe_command(sorted(set(extra)))}


@dataclass(frozen=True)
class SystemObservation:
    hostname: str | None = None
    kernel: str | None = None
    os_pretty_name: str | None = None
    os_id: str | None = None
    os_version_id: str | None = None
    uptime_s: float | None = None
    mounts: tuple[MountEntry, ...] | None = None
    mount_probes: Mapping[str, int] | None = None        # mount point -> exit code of the bounded stat


def parse_os_release(text: str) -> dict[str, str]:
    """``/etc/os-release`` KEY=value lines (values may be quoted with shell quoting)."""
    fields = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        fields[key.strip()] = _shell_word(value)
    return fields


_SHELL_SPECIAL = frozenset(" \t\r\n\"'\\")  # shlex's whitespace, quotes and escape (POSIX mode)


def _shell_word(value: str) -> str:
    """The first word of ``value`` as ``shlex.split`` reads it (an unbalanced quote: the value without
    its quotes). ``ubuntu`` and ``"Ubuntu 22.04.4 LTS"`` are read directly; anything with escapes, other
    quoting or several words goes through shlex."""
    inner = value[1:-1]
    if len(value) >= 2 and value[0] == value[-1] == '"' and '"' not in inner and "\\" not in inner:
        return inner
    if value and _SHELL_SPECIAL.isdisjoint(value):
        return value
    try:
        parts = shlex.split(value)
    except ValueError:
        parts = [value.strip("\"'")]
    return parts[0] if parts else ""


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

    def ok(cid: str) -> str | None:
        r = outputs.get(cid)
        return r.text if r is not None and r.rc == 0 else None

    os_fields = parse_os_release(outputs["os-release"].text) if "os-release" in outputs else {}
    return SystemObservation(
        hostname=line("hostname"), kernel=line("uname-r"),
        os_pretty_name=os_fields.get("PRETTY_NAME"), os_id=os_fields.get("ID"),
        os_version_id=os_fields.get("VERSION_ID"),
        uptime_s=parse_proc_uptime(ok("uptime")) if ok("uptime") is not None else None,
        mounts=parse_proc_mounts(ok("proc-mounts")) if ok("proc-mounts") is not None else None,
        mount_probes=parse_mount_probe(outputs["mount-probe"].text) if "mount-probe" in outputs else None,
    )


def evaluate_system(obs: SystemObservation, ctx: EvalContext) -> list[Finding]:
    return _identity_findings(obs, ctx) + _mount_findings(obs, ctx)


def _identity_findings(obs: SystemObservation, ctx: EvalContext) -> list[Finding]:
    host = ctx.host.name
    findings = []
    if obs.hostname is None:
        findings.append(Finding(host=host, check="system.hostname", status=Status.ERROR, expected=host,
                                message="the node did not report its hostname", source="hostname",
                                remedy="Run `hostname` on the node: it printed nothing"))
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
                                    expected=f"a value from {source}", message=f"{source} gave no value",
                                    remedy=f"Run `{COMMANDS[source]}` on the node: it printed nothing usable"))
        elif exp is None:
            findings.append(Finding(host=host, check=check, status=Status.PASS, value=value,
                                    source=source, message=f"{check.split('.')[1]}: {value}"))
        else:
            findings.append(finding_from_expectation(
                host, check, exp, value, source=source, profile=ctx.profile,
                remedy="Reimage the node to the fleet's standard image"))
    if obs.uptime_s is not None and not math.isfinite(obs.uptime_s):
        findings.append(Finding(host=host, check="system.uptime", status=Status.ERROR, value=str(obs.uptime_s),
                                unit="s", source="uptime", expected="seconds since boot",
                                message=f"/proc/uptime reads {obs.uptime_s}: not a measurement",
                                remedy="Run `cat /proc/uptime` on the node; a kernel printing that needs a look"))
    elif obs.uptime_s is not None:
        findings.append(Finding(host=host, check="system.uptime", status=Status.PASS,
                                value=round(obs.uptime_s), unit="s", source="uptime",
                                message=f"up {obs.uptime_s / 86400:.1f} days"))
    return findings


def _mount_findings(obs: SystemObservation, ctx: EvalContext) -> list[Finding]:
    host = ctx.host.name
    out = []
    exp = ctx.profile.expect("system.mounts")
    mounted = {m.path: m for m in obs.mounts or ()}
    for path in [str(p) for p in (exp.value if exp is not None else None) or ()]:
        entry = mounted.get(path)
        status = Status.PASS if entry else Status(exp.severity)
        out.append(Finding(
            host=host, check="system.mount.present", component=path, status=status,
            value=f"{entry.fstype} from {entry.device}" if entry else "not mounted", expected="mounted",
            source="proc-mounts",
            message=f"{path}: mounted ({entry.fstype} from {entry.device})" if entry else
            f"{path}: not mounted, expected mounted (source: {exp.source})",
            remedy=None if entry else f"Mount it (`mount {path}`) and check /etc/fstab or the automounter"))
    required = {str(p) for p in (exp.value if exp is not None else None) or ()}
    # a required mount point that is not mounted was reported above; its stat failing (no such
    # directory) is the same fault, not a second one
    hung = {p: rc for p, rc in (obs.mount_probes or {}).items()
            if rc != 0 and not (p in required and p not in mounted and rc not in (124, 137))}
    for path, rc in sorted(hung.items()):
        fstype = mounted[path].fstype if path in mounted else "?"
        what = f"did not answer `stat -f` within {MOUNT_STAT_TIMEOUT_S} s (hung)" if rc in (124, 137) \
            else f"`stat -f` failed with exit code {rc}"
        out.append(Finding(
            host=host, check="system.mount.responsive", component=path, status=Status.FAIL, value=rc,
            expected=0, source="mount-probe", message=f"{path} ({fstype}): {what}",
            remedy="A hung network filesystem blocks every job that touches it: check the server and the "
                   "network path, then `umount -f -l` and remount; drain the node until it answers"))
    answered = sum(rc == 0 for rc in (obs.mount_probes or {}).values())
    if obs.mount_probes and not hung:
        out.append(Finding(host=host, check="system.mount.responsive", status=Status.PASS,
                           value=answered, source="mount-probe", message=f"{answered} mounts answered stat -f"))
    return out


PROBE = register(ProbeSpec(
    name="system",
    description="hostname, kernel, OS, uptime, mounts present and responsive",
    command_map=render_commands({}),
    render_commands=render_commands,
    parse_fn=parse_system,
    evaluate_fn=evaluate_system,
))
