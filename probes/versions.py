"""Versions probe: NVIDIA driver (kernel module and user space), CUDA, VBIOS, NCCL, OFED, HCA firmware.

    nvidia-driver-version -> "550.90.07"                      (/sys/module/nvidia/version)
    nvidia-smi-versions   -> "index, pci.bus_id, driver_version, vbios_version" CSV, one row per GPU
    nvidia-smi-cuda       -> nvidia-smi -q -d COMPUTE header lines "Driver Version : 550.90.07" and
                             "CUDA Version : 12.4"
    ofed-info             -> "MLNX_OFED_LINUX-23.10-1.1.9.0:" or "OFED-internal-24.07-0.3.5.0.110:"
    nccl-libs             -> /usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5  (host NCCL only)
    hca-fw                -> /sys/class/infiniband/mlx5_0/fw_ver:28.39.1002

A version pinned in the profile (``version.driver: {op: eq, value: "550.90.07"}``; ``ge``/``lt`` compare
dotted numbers) is graded here; unpinned versions are reported and left to the fleet consistency check
(``probes/fleet.py``), which flags hosts that differ from their peers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from healthcheck.grading import expected_text, finding_from_expectation
from healthcheck.model import CommandResult, Finding, Status
from healthcheck.profiles import Expectation, Profile
from healthcheck.spec import EvalContext, ProbeSpec
from probes import register

_NO_SMI = "healthcheck: nvidia-smi not installed"
_NO_OFED = "healthcheck: ofed_info not installed"
_NCCL_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/local/lib",
              "/usr/local/cuda/lib64")
COMMANDS = {
    "nvidia-driver-version": "cat /sys/module/nvidia/version",
    "nvidia-smi-versions": f"if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi "
                           f"--query-gpu=index,pci.bus_id,driver_version,vbios_version --format=csv; "
                           f"else echo '{_NO_SMI}'; fi",
    "nvidia-smi-cuda": f"if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -q -d COMPUTE; "
                       f"else echo '{_NO_SMI}'; fi",
    "ofed-info": f"if command -v ofed_info >/dev/null 2>&1; then ofed_info -s; else echo '{_NO_OFED}'; fi",
    "nccl-libs": "ls -1 " + " ".join(f"{d}/libnccl.so.*" for d in _NCCL_DIRS)
                 + " 2>/dev/null; echo '# nccl end'",
    "hca-fw": "grep -H -s . /sys/class/infiniband/*/fw_ver /sys/class/infiniband/*/hca_type; "
              "echo '# hca-fw end'",
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
    nvidia_smi_error: str | None = None


def parse_nvidia_smi_csv(text: str) -> dict[str, dict[str, str]]:
    """``nvidia-smi --query-gpu=...,--format=csv``: header row names the columns (corpus
    ``nvidia-smi/h100-query-gpu-name-busid-vbios-csv-elided``); rows keyed by ``index``; ``[...]`` elisions
    are skipped."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("[")]
    if not lines or "," not in lines[0]:
        return {}
    header = [h.strip() for h in lines[0].split(",")]
    rows = {}
    for n, line in enumerate(lines[1:]):
        values = [v.strip() for v in line.split(",")]
        if len(values) == len(header):
            row = dict(zip(header, values, strict=True))
            rows[row.get("index", str(n))] = row
    return rows


def parse_nvidia_smi_q_header(text: str) -> dict[str, str]:
    """``nvidia-smi -q`` header: ``Driver Version : 550.90.07`` and ``CUDA Version : 12.4``."""
    out = {}
    for key in ("Driver Version", "CUDA Version"):
        m = re.search(rf"^{key}\s*:\s*(\S+)", text, re.MULTILINE)
        if m:
            out[key] = m[1]
    return out


def parse_ofed_info(text: str) -> str | None:
    """``ofed_info -s``: ``MLNX_OFED_LINUX-23.10-1.1.9.0:`` or ``OFED-internal-24.07-0.3.5.0.110:``
    (DOCA-OFED), returned without the trailing ':'."""
    m = re.search(r"^((?:MLNX_OFED_LINUX|OFED-internal|OFED)-\S+?):?\s*$", text, re.MULTILINE)
    return m[1] if m else None


def parse_nccl_libs(text: str) -> str | None:
    """Paths of ``libnccl.so.X.Y.Z`` -> highest X.Y.Z (``libnccl.so.2`` symlinks carry no full version)."""
    found = re.findall(r"libnccl\.so\.(\d+\.\d+\.\d+)\s*$", text, re.MULTILINE)
    return max(found, key=version_key) if found else None


def parse_hca_fw(text: str) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for m in re.finditer(r"class/infiniband/(?P<dev>[^/]+)/(?P<attr>fw_ver|hca_type):(?P<value>.*)$", text,
                         re.MULTILINE):
        out.setdefault(m["dev"], {})["fw" if m["attr"] == "fw_ver" else "type"] = m["value"].strip()
    return out


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


def parse_versions(outputs: Mapping[str, CommandResult]) -> VersionsObservation:
    def text(cid: str) -> str | None:
        r = outputs.get(cid)
        return r.text if r is not None and r.rc == 0 else None

    smi = outputs.get("nvidia-smi-versions")
    smi_error = None
    rows: dict[str, dict[str, str]] = {}
    if smi is not None and _NO_SMI not in smi.text:
        rows = parse_nvidia_smi_csv(smi.text)
        if smi.rc != 0 or not rows:
            said = (smi.text + smi.err_text).strip()
            smi_error = said.splitlines()[0] if said else f"exit code {smi.rc}"
    header = parse_nvidia_smi_q_header(text("nvidia-smi-cuda") or "")
    userspace = next((r.get("driver_version") for r in rows.values() if r.get("driver_version")), None)
    ofed_text = outputs["ofed-info"].text if "ofed-info" in outputs else None
    module = text("nvidia-driver-version")
    return VersionsObservation(
        driver_module=module.strip() if module and module.strip() else None,
        driver_userspace=userspace or header.get("Driver Version"), cuda=header.get("CUDA Version"),
        vbios={i: r["vbios_version"] for i, r in rows.items() if r.get("vbios_version")},
        nccl=parse_nccl_libs(text("nccl-libs") or ""),
        ofed=None if ofed_text is None else
        ("inbox" if _NO_OFED in ofed_text else parse_ofed_info(ofed_text)),
        hca_fw=parse_hca_fw(text("hca-fw") or ""), nvidia_smi_error=smi_error)


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


def evaluate_versions(obs: VersionsObservation, ctx: EvalContext) -> list[Finding]:
    host, profile = ctx.host.name, ctx.profile
    out = []
    remedy = "Install the fleet's pinned version (see the profile) and reboot if it is a driver or firmware"
    if obs.nvidia_smi_error:
        out.append(Finding(host=host, check="version.nvidia_smi", status=Status.FAIL,
                           value=obs.nvidia_smi_error, source="nvidia-smi-versions",
                           message=f"nvidia-smi failed: {obs.nvidia_smi_error}",
                           remedy="A 'Driver/library version mismatch' means the user-space driver was "
                                  "upgraded without reloading the kernel module: reboot the node"))
    if obs.driver_module and obs.driver_userspace and obs.driver_module != obs.driver_userspace:
        out.append(Finding(host=host, check="version.driver_mismatch", status=Status.FAIL,
                           value=obs.driver_userspace, expected=obs.driver_module,
                           source="nvidia-smi-versions",
                           message=f"kernel module {obs.driver_module} but user-space driver "
                                   f"{obs.driver_userspace}",
                           remedy="Reboot (or reload nvidia modules) so kernel and user-space drivers match"))
    driver = obs.driver_module or obs.driver_userspace
    for check, value, source in (("version.driver", driver, "nvidia-driver-version"),
                                 ("version.cuda", obs.cuda, "nvidia-smi-cuda"),
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
                          "nvidia-smi-versions", profile, remedy)
    by_type: dict[str, dict[str, str]] = {}
    for dev, hca in obs.hca_fw.items():
        by_type.setdefault(hca.get("type") or "?", {})[dev] = hca.get("fw", "")
    for hca_type, values in sorted(by_type.items()):
        out += _per_component(host, "version.hca_fw", values, "hca-fw", profile, remedy, label=hca_type)
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
    parse_fn=parse_versions,
    evaluate_fn=evaluate_versions,
))
