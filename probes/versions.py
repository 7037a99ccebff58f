"""Versions probe: NVIDIA driver (kernel module and user space), CUDA, VBIOS, NCCL, OFED, HCA firmware.

    nvidia-driver-version -> "550.90.07"                      (/sys/module/nvidia/version)
    nvidia-smi-q-x        -> <driver_version>, <cuda_version>, per GPU <vbios_version>  (the gpu probe's
                             ``nvidia-smi -q -x``, run once per host and parsed once for every reader)
    ofed-info             -> "MLNX_OFED_LINUX-23.10-1.1.9.0:" or "OFED-internal-24.07-0.3.5.0.110:"
    nccl-libs             -> /usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5  (host NCCL only)
    ib-sysfs              -> /sys/class/infiniband/mlx5_0/fw_ver:28.39.1002 (the infiniband probe's dump)

A version pinned in the profile (``version.driver: {op: eq, value: "550.90.07"}``; ``ge``/``lt`` compare
dotted numbers) is graded here; unpinned versions are reported and left to the fleet consistency check
(``probes/fleet.py``), which flags hosts that differ from their peers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from healthcheck.core.grading import expected_text, finding_from_expectation
from healthcheck.core.model import CommandResult, Finding, Status
from healthcheck.core.profiles import Expectation, Profile
from healthcheck.core.spec import EvalContext, ParseError, ProbeSpec
from healthcheck.probes import register
from healthcheck.probes.gpu import BUNDLE_SOURCES, GPU_ID, parse_gpu_sources
from healthcheck.probes.gpu import COMMAND_TOOLS as GPU_TOOLS
from healthcheck.probes.gpu import COMMANDS as GPU_COMMANDS
from healthcheck.probes.gpu_model import GpuObservations
from healthcheck.probes.ib_parse import parse_ib_sysfs
from healthcheck.probes.infiniband import COMMAND_TOOLS as IB_TOOLS
from healthcheck.probes.infiniband import COMMANDS as IB_COMMANDS

IB_ID = "ib-sysfs"
_NO_OFED = "healthcheck: ofed_info not installed"
_NCCL_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/local/lib",
              "/usr/local/cuda/lib64")
COMMANDS = {
    "nvidia-driver-version": "cat /sys/module/nvidia/version",
    GPU_ID: GPU_COMMANDS[GPU_ID],
    "ofed-info": f"if command -v ofed_info >/dev/null 2>&1; then ofed_info -s; else echo '{_NO_OFED}'; fi",
    "nccl-libs": "ls -1 " + " ".join(f"{d}/libnccl.so.*" for d in _NCCL_DIRS)
                 + " 2>/dev/null; echo '# nccl end'",
    IB_ID: IB_COMMANDS[IB_ID],
}
# Facts compared across the fleet, and the profile key that pins each.
PINNED_BY = {"driver": "version.driver", "cuda": "version.cuda", "nccl": "version.nccl",
             "ofed": "version.ofed", "vbios": "version.vbios", "hca_fw": "version.hca_fw"}


@dataclass(frozen=True)
class VersionsObservation:
    driver_module: str | None = None             # loaded kernel module
    driver_userspace: str | None = None          # what nvidia-smi/NVML reports
    cuda: str | None = None                      # highest CUDA version the driver supports
    vbios: Mapping[str, str] = field(default_factory=dict)   # gpu index -> VBIOS
    nccl: str | None = None
    ofed: str | None = None                      # "MLNX_OFED_LINUX-23.10-1.1.9.0"; "inbox" without ofed_info
    hca_fw: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # mlx5_0 -> {type, fw}
    nvidia_smi_error: str | None = None          # nvidia-smi said it failed (no GPU listed): FAIL
    nvidia_smi_unreadable: str | None = None     # its output could not be parsed: ERROR
    nvidia_smi_source: str = GPU_ID              # command id the driver, CUDA and VBIOS came from


def parse_ofed_info(text: str) -> str | None:
    """``ofed_info -s``: ``MLNX_OFED_LINUX-23.10-1.1.9.0:`` or ``OFED-internal-24.07-0.3.5.0.110:``
    (DOCA-OFED), returned without the trailing ':'."""
    m = re.search(r"^((?:MLNX_OFED_LINUX|OFED-internal|OFED)-\S+?):?\s*$", text, re.MULTILINE)
    return m[1] if m else None


def parse_nccl_libs(text: str) -> str | None:
    """Paths of ``libnccl.so.X.Y.Z`` -> highest X.Y.Z (``libnccl.so.2`` symlinks carry no full version)."""
    found = re.findall(r"libnccl\.so\.(\d+\.\d+\.\d+)\s*$", text, re.MULTILINE)
    return max(found, key=version_key) if found else None


def hca_firmware(text: str) -> dict[str, dict[str, str]]:
    """``ib-sysfs`` (``parse_ib_sysfs``) -> {device: {"type": hca_type, "fw": fw_ver}}, present keys only.
    A truncated dump gives {}: the infiniband probe reports it as its parse ERROR."""
    try:
        devices = parse_ib_sysfs(text)
    except ParseError:
        return {}
    return {d.name: {k: v for k, v in (("type", d.hca_type), ("fw", d.fw_ver)) if v} for d in devices}


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


def _nvidia_smi(outputs: Mapping[str, CommandResult]) -> tuple[GpuObservations | None, str | None]:
    try:
        return parse_gpu_sources(outputs), None
    except ParseError as exc:
        return None, str(exc)


def parse_versions(outputs: Mapping[str, CommandResult]) -> VersionsObservation:
    def text(cid: str, ok: tuple[int, ...] = (0,)) -> str | None:
        r = outputs.get(cid)
        return r.text if r is not None and r.rc in ok else None

    gpus, unreadable = _nvidia_smi(outputs)
    failed = gpus.errors[0].message if gpus is not None and gpus.errors and not gpus.gpus else None
    ofed_text = outputs["ofed-info"].text if "ofed-info" in outputs else None
    module = text("nvidia-driver-version")
    return VersionsObservation(
        driver_module=module.strip() if module and module.strip() else None,
        driver_userspace=gpus.driver_version if gpus else None, cuda=gpus.cuda_version if gpus else None,
        vbios={str(g.index): g.vbios for g in gpus.gpus if g.vbios} if gpus else {},
        nccl=parse_nccl_libs(text("nccl-libs") or ""),
        ofed=None if ofed_text is None else
        ("inbox" if _NO_OFED in ofed_text else parse_ofed_info(ofed_text)),
        hca_fw=hca_firmware(text(IB_ID, ok=(0, 2)) or ""), nvidia_smi_error=failed,
        nvidia_smi_unreadable=unreadable, nvidia_smi_source=gpus.source if gpus else GPU_ID)


def version_facts(obs: Mapping[str, Any]) -> dict[str, str]:
    """The comparable facts of one host's observation (JSON form): kind -> value; mixed values joined."""
    facts = {}
    driver = obs.get("driver_module") or obs.get("driver_userspace")
    for kind, value in (("driver", driver), ("cuda", obs.get("cuda")), ("nccl", obs.get("nccl")),
                        ("ofed", obs.get("ofed"))):
        if value:
            facts[kind] = str(value)
    if isinstance(obs.get("vbios"), Mapping) and obs["vbios"]:
        facts["vbios"] = "/".join(sorted({str(v) for v in obs["vbios"].values()}))
    by_type: dict[str, set[str]] = {}
    hcas = obs.get("hca_fw") if isinstance(obs.get("hca_fw"), Mapping) else {}
    for hca in hcas.values():
        if isinstance(hca, Mapping) and hca.get("fw"):
            by_type.setdefault(hca.get("type") or "?", set()).add(hca["fw"])
    for hca_type, fws in by_type.items():
        facts[f"hca_fw {hca_type}"] = "/".join(sorted(fws))
    return facts


def grade_version(host: str, check: str, exp: Expectation | None, value: str, *, source: str, remedy: str,
                  profile: Profile, component: str = "node") -> Finding:
    """Like ``finding_from_expectation``, but ``ge``/``gt``/``le``/``lt`` compare dotted version numbers;
    with no pin the version is reported as a fact (PASS) and left to the fleet consistency check."""
    what = f"{component + ': ' if component != 'node' else ''}{check.split('.', 1)[1].replace('_', ' ')}"
    if exp is None:
        return Finding(host=host, check=check, component=component, status=Status.PASS, value=value,
                       source=source, message=f"{what} {value} (not pinned)")
    if exp.op not in ("ge", "gt", "le", "lt"):
        return finding_from_expectation(host, check, exp, value, source=source, remedy=remedy,
                                        component=component, profile=profile)
    have, want = version_key(value), version_key(str(exp.value))
    ok = {"ge": have >= want, "gt": have > want, "le": have <= want, "lt": have < want}[exp.op]
    status = Status.PASS if ok else Status(exp.severity)
    return Finding(host=host, check=check, component=component, status=status, value=value,
                   expected=expected_text(exp), source=source, remedy=None if ok else remedy,
                   message=f"{what} {value}" + ("" if ok else f", expected {expected_text(exp)} "
                                                               f"(source: {exp.source})"))


# Older profile keys for the same pins (the gpu probe no longer grades them): read as version.*.
LEGACY_PINS = {"gpu.driver_version": "version.driver", "gpu.cuda_version": "version.cuda",
               "gpu.vbios": "version.vbios"}


def with_legacy_pins(profile: Profile) -> Profile:
    """``profile`` with ``gpu.driver_version``/``gpu.cuda_version``/``gpu.vbios`` pins read as version.*."""
    extra = {new: replace(profile.expectations[old], key=new) for old, new in LEGACY_PINS.items()
             if old in profile.expectations and new not in profile.expectations}
    return replace(profile, expectations={**profile.expectations, **extra}) if extra else profile


def evaluate_versions(obs: VersionsObservation, ctx: EvalContext) -> list[Finding]:
    host, profile = ctx.host.name, with_legacy_pins(ctx.profile)
    out = []
    remedy = "Install the fleet's pinned version (see the profile) and reboot if it is a driver or firmware"
    smi = obs.nvidia_smi_source
    if obs.nvidia_smi_error:
        out.append(Finding(host=host, check="version.nvidia_smi", status=Status.FAIL,
                           value=obs.nvidia_smi_error, source=smi,
                           message=f"nvidia-smi failed: {obs.nvidia_smi_error}",
                           remedy="A 'Driver/library version mismatch' means the user-space driver was "
                                  "upgraded without reloading the kernel module: reboot the node"))
    if obs.nvidia_smi_unreadable:
        out.append(Finding(host=host, check="version.nvidia_smi", status=Status.ERROR, source=smi,
                           message=f"user-space driver, CUDA and VBIOS unknown: {obs.nvidia_smi_unreadable}",
                           remedy="Run `nvidia-smi -q -x` on the node by hand; if its output looks valid, "
                                  f"attach raw/{host}/{smi}.out to a healthcheck bug"))
    if obs.driver_module and obs.driver_userspace and obs.driver_module != obs.driver_userspace:
        out.append(Finding(host=host, check="version.driver_mismatch", status=Status.FAIL,
                           value=obs.driver_userspace, expected=obs.driver_module,
                           source=smi,
                           message=f"kernel module {obs.driver_module} but user-space driver "
                                   f"{obs.driver_userspace}",
                           remedy="Reboot (or reload nvidia modules) so kernel and user-space drivers match"))
    driver = obs.driver_module or obs.driver_userspace
    for check, value, source in (("version.driver", driver, "nvidia-driver-version" if obs.driver_module else smi),
                                 ("version.cuda", obs.cuda, smi),
                                 ("version.nccl", obs.nccl, "nccl-libs"),
                                 ("version.ofed", obs.ofed, "ofed-info")):
        if value:
            out.append(grade_version(host, check, profile.expect(check), value, source=source, remedy=remedy,
                                     profile=profile))
        elif profile.expect(check) is not None:
            out.append(Finding(host=host, check=check, status=Status.FAIL, source=source,
                               expected=expected_text(profile.expect(check)), remedy=remedy,
                               message=f"{check.split('.', 1)[1]} not found on the node"))
    out += _per_component(host, "version.vbios", {f"gpu{i}": v for i, v in obs.vbios.items()},
                          smi, profile, remedy)
    by_type: dict[str, dict[str, str]] = {}
    for dev, hca in obs.hca_fw.items():
        by_type.setdefault(hca.get("type") or "?", {})[dev] = hca.get("fw", "")
    for hca_type, values in sorted(by_type.items()):
        out += _per_component(host, "version.hca_fw", values, IB_ID, profile, remedy, label=hca_type)
    return out


def _per_component(host: str, check: str, values: Mapping[str, str], source: str, profile: Profile,
                   remedy: str, label: str = "") -> list[Finding]:
    exp = profile.expect(check)
    out = [grade_version(host, check, exp, v, source=source, remedy=remedy, profile=profile, component=c)
           for c, v in sorted(values.items()) if v and (exp is not None)]
    distinct = sorted(set(v for v in values.values() if v))
    if exp is None and distinct:
        status = Status.PASS if len(distinct) == 1 else Status.WARN
        out.append(Finding(host=host, check=check, component=label or "node", status=status,
                           value="/".join(distinct), source=source,
                           message=f"{label + ' ' if label else ''}"
                                   f"{check.split('.', 1)[1].replace('_', ' ')}: {', '.join(distinct)} on "
                                   f"{len(values)} devices" + ("" if status is Status.PASS else
                                                               " (devices on one node should match)"),
                           remedy=None if status is Status.PASS else remedy))
    return out


PROBE = register(ProbeSpec(
    name="versions",
    description="driver, CUDA, VBIOS, NCCL, OFED and HCA firmware versions (pinned ones graded)",
    command_map=COMMANDS,
    command_tools={**GPU_TOOLS, IB_ID: IB_TOOLS[IB_ID]},
    parse_fn=parse_versions,
    evaluate_fn=evaluate_versions,
    accepts=BUNDLE_SOURCES,
))
