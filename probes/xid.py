"""Xid probe: NVRM Xid, NVSwitch SXid and GPU-lost events in the kernel log over a window,
graded per GPU and Xid with the catalog's meaning and action (probes/xid_catalog.yaml).

    kernel-log       journalctl -k over the window (dmesg -T, then raw dmesg, without journalctl)
    nvidia-smi-q-x   the gpu probe's ``nvidia-smi -q -x`` (run once per host for every probe that reads
                     it): PCI bus id -> GPU index, and each GPU's row-remap pending/failure (Xid 63/64)

    -> Finding(check="xid.79", component="gpu3", status=FAIL, value=1, unit="events",
               message="gpu3 (PCI 0000:a1:00): Xid 79 GPU_HAS_FALLEN_OFF_THE_BUS x1 in the last 24 h ...")
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.model import CommandResult, Finding, Status
from healthcheck.core.spec import EvalContext, ParseError, ProbeSpec
from healthcheck.probes import register
from healthcheck.probes.gpu import BUNDLE_SOURCES, GPU_ID, parse_gpu_sources
from healthcheck.probes.gpu import COMMAND_TOOLS as GPU_TOOLS
from healthcheck.probes.gpu import COMMANDS as GPU_COMMANDS
from healthcheck.probes.gpu_model import GpuObservations
from healthcheck.probes.kernel_log import (
    KernelLog,
    WindowedGroup,
    in_window,
    looks_like_kernel_log,
    normalize_pci,
    parse_kernel_log,
)
from healthcheck.probes.parse_memo import memoized

LOG_ID = "kernel-log"
CATALOG_PATH = Path(str(files("healthcheck.probes") / "xid_catalog.yaml"))
NVLINK5 = range(144, 151)


def kernel_log_command(options: Mapping[str, Any]) -> str:
    """One POSIX sh line: a header with the node's uptime (to place raw dmesg times), then the
    kernel log of the current boot over the window, from journalctl or else dmesg -T or raw dmesg.
    ``LC_ALL=C TZ=UTC`` make the timestamps English and UTC."""
    hours = float(options.get("kernel_log_window_h", DEFAULTS.kernel_log_window_h))
    since = shlex.quote(f"-{max(1, round(hours * 3600))}s")
    return ("export LC_ALL=C TZ=UTC; up=$(cut -d' ' -f1 /proc/uptime 2>/dev/null); "
            "if command -v journalctl >/dev/null 2>&1; then "
            'echo "# kernel-log source=journalctl uptime_s=$up"; '
            f"journalctl -k --utc --no-pager -o short --since {since}; "
            'else echo "# kernel-log source=dmesg uptime_s=$up"; dmesg -T 2>/dev/null || dmesg; fi')


def xid_commands(options: Mapping[str, Any]) -> dict[str, str]:
    return {LOG_ID: kernel_log_command(options), GPU_ID: GPU_COMMANDS[GPU_ID]}


@dataclass(frozen=True)
class GpuAddress:
    """One GPU as the kernel log names it (``0000:4c:00``), with its row-remap state."""

    index: int | None                      # None: from a subset (``-i``) whose order is not the index
    pci: str
    remap_pending: bool | None = None
    remap_failure: bool | None = None


@dataclass(frozen=True)
class XidObservation:
    log: KernelLog | None                  # None: no kernel-log output (a bundle without one)
    gpus: tuple[GpuAddress, ...] = ()


def gpu_addresses(gpus: GpuObservations | None) -> tuple[GpuAddress, ...]:
    """The GPUs of the nvidia-smi report by kernel-log PCI address; () without a report. GPUs are
    numbered in report order, which is the index only when the report lists every GPU."""
    if gpus is None:
        return ()
    complete = len(gpus.gpus) >= (gpus.count or 0)
    found = (_gpu_address(gpu.index if complete else None, gpu.bus_id, gpu.remap.pending if gpu.remap else None,
                          gpu.remap.failure if gpu.remap else None)
             for gpu in gpus.gpus if gpu.bus_id)
    return tuple(address for address in found if address is not None)


@memoized(maxsize=256)  # GPU N of every node of a type sits at the same PCI address
def _gpu_address(index: int | None, bus_id: str, pending: bool | None, failure: bool | None) -> GpuAddress | None:
    pci = normalize_pci(bus_id)
    return GpuAddress(index, pci, pending, failure) if pci else None


def parse_xid(outputs: Mapping[str, CommandResult]) -> XidObservation:
    """The kernel log (required to grade), plus the GPU map from nvidia-smi when it parses: the
    mapping is best effort, an unreadable nvidia-smi report is the gpu probe's ERROR to give."""
    try:
        gpus = gpu_addresses(parse_gpu_sources(outputs))
    except ParseError:
        gpus = ()
    result = outputs.get(LOG_ID)
    if result is None:
        return XidObservation(log=None, gpus=gpus)
    log = parse_kernel_log(result.text + "\n" + result.err_text)
    if result.rc != 0 and not log.groups and log.unreadable is None:
        raise ParseError(f"kernel log command failed (rc {result.rc})", result.err_text or result.text)
    if log.source is None and log.unreadable is None and not log.groups and not looks_like_kernel_log(result.text):
        # Our command always prints its '# kernel-log source=...' header; a bundle's own dmesg or
        # journal has timestamped lines. Neither: garbage, which must not read as "no Xid".
        raise ParseError("kernel-log output has neither our header nor any kernel-log line", result.text)
    return XidObservation(log=log, gpus=gpus)


@functools.cache
def load_catalog(path: Path = CATALOG_PATH) -> dict[str, Any]:
    """The Xid catalog, once per process: libyaml's safe loader where PyYAML has it (the same values as
    ``yaml.safe_load``, much faster, in every grading worker)."""
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _ignored(ctx: EvalContext) -> tuple[set[int], list[str]]:
    """Xid numbers to ignore (profile ``settings.xid.ignore``, host var ``xid_ignore`` or
    ``xid: {ignore: ...}``), and the entries that are not Xid numbers. Each source may be a list,
    one number, or a comma-separated string (``"13,43"``)."""
    host_vars = ctx.host.vars or {}
    nested = host_vars.get("xid")
    sources = [ctx.profile.setting("xid.ignore", None), host_vars.get("xid_ignore"),
               nested.get("ignore") if isinstance(nested, Mapping) else None]
    codes: set[int] = set()
    bad: list[str] = []
    for raw in sources:
        if raw is None:
            continue
        items = raw.split(",") if isinstance(raw, str) else raw if isinstance(raw, (list, tuple, set)) else [raw]
        for item in items:
            text = str(item).strip()
            if text.isdecimal():
                codes.add(int(text))
            elif text:
                bad.append(text)
    return codes, bad


def _when(wg: WindowedGroup) -> str:
    def iso(t: datetime | None) -> str:
        return t.strftime("%Y-%m-%dT%H:%M:%SZ") if t else "?"
    span = f"first {iso(wg.first)}, last {iso(wg.last)}" if wg.first else "time unknown"
    return span + ("; some lines had no timestamp" if wg.untimed and wg.first else "")


class _Grader:
    """Grades the windowed groups of one host; holds the lookups they share."""

    def __init__(self, obs: XidObservation, ctx: EvalContext, window_h: float) -> None:
        self.obs, self.ctx, self.window_h = obs, ctx, window_h
        self.catalog = load_catalog()
        self.index = {g.pci: g.index for g in obs.gpus if g.index is not None}
        self.remap = {g.pci: g for g in obs.gpus}
        self.groups = [wg for wg in in_window(obs.log, ctx.now, window_h) if wg.count]
        self.recovery = {wg.group.pci: wg.group.actions[-1] for wg in self.groups
                         if wg.group.code == 154 and wg.group.actions}

    def component(self, pci: str | None) -> str:
        if pci in self.index:
            return f"gpu{self.index[pci]}"
        return f"gpu {pci}" if pci else "node"

    def finding(self, wg: WindowedGroup, check: str, status: Status, action: str, what: str,
                remedy: str, component: str | None = None) -> Finding:
        g = wg.group
        comp = component or self.component(g.pci)
        where = f"{comp} (PCI {g.pci})" if g.pci and g.pci not in comp else comp
        links = f" link {', '.join(map(str, g.links))}" if g.links else ""
        return Finding(
            host=self.ctx.host.name, check=check, component=comp, status=status, value=wg.count,
            unit="events", expected=f"none in {self.window_h:g} h", source=LOG_ID, remedy=remedy,
            message=f"{where}{links}: {what} x{wg.count} in the last {self.window_h:g} h ({_when(wg)}); "
                    f"action: {action}. e.g. {g.sample}")

    def xid(self, wg: WindowedGroup) -> Finding:
        g = wg.group
        entry = self.catalog["xids"].get(g.code)
        if entry is None:
            return self.finding(wg, f"xid.{g.code}", Status.WARN, "contact support",
                                f"Xid {g.code} (not in the catalog)",
                                "Look the Xid up in NVIDIA's Xid catalog and collect nvidia-bug-report.sh")
        status, action = Status(entry["severity"]), entry["action"]
        what = f"Xid {g.code} {entry['mnemonic']} ({entry['meaning']}; {entry['class']})"
        remedy = entry["remedy"]
        status, action, what, remedy = _reset_fields(g, status, action, what, remedy)
        state = self.remap.get(g.pci)
        if g.code in (63, 64) and state is not None:
            if state.remap_failure:
                status, action, what = Status.FAIL, "drain and RMA", what + "; row remapping FAILED"
            elif state.remap_pending:
                status, what = Status.FAIL, what + "; row remap pending until the GPU is reset"
            elif g.code == 63 and state.remap_pending is False:
                status, action, what = Status.WARN, "none", what + "; remap already applied (pending No)"
        if g.code in NVLINK5 and "Fatal" not in g.severities and g.pci not in self.recovery:
            status, action, what = Status.WARN, "restart app", what + "; driver says Nonfatal, no Xid 154"
        if g.code == 154:
            named = g.actions[-1] if g.actions else "unknown"
            action = self.catalog["recovery_actions"].get(named, "reset GPU")
            status = Status.WARN if action == "none" else Status.FAIL
            what += f"; recovery action now {named!r}"
        elif g.pci in self.recovery:
            what += f"; driver recovery action {self.recovery[g.pci]!r} (Xid 154)"
        return self.finding(wg, f"xid.{g.code}", status, action, what, remedy)

    def sxid(self, wg: WindowedGroup) -> Finding:
        g = wg.group
        fatal = "Fatal" in g.severities
        return self.finding(
            wg, f"fabric.sxid.{g.code}", Status.FAIL if fatal else Status.WARN,
            "reboot node" if fatal else "none",
            f"NVSwitch SXid {g.code} ({'/'.join(g.severities) or 'severity unknown'})",
            "Fatal NVSwitch error: drain and reboot the node (resets the NVSwitch fabric), check "
            "/var/log/fabricmanager.log; contact the vendor if it recurs" if fatal else
            "Non-fatal NVSwitch error: watch for repeats on the same link; check /var/log/fabricmanager.log",
            component=g.device)

    def gpu_lost(self, wg: WindowedGroup, with_79: set[str | None]) -> Finding | None:
        if wg.group.pci in with_79 or (wg.group.pci is None and with_79):
            return None  # the Xid 79 finding already covers it
        return self.finding(wg, "xid.gpu_lost", Status.FAIL, "reboot node",
                            "GPU lost from the bus, no Xid line (fallen off the bus / NV_ERR_GPU_IS_LOST)",
                            self.catalog["xids"][79]["remedy"])


REMEDY_CONTAINED = ("The driver contained the error and needs no GPU reset (RST: No, D-RST: No): restart the "
                    "affected application (NVIDIA Xid catalog, docs.nvidia.com/deploy/xid-errors: immediate action "
                    "RESTART_APP); if it repeats on this GPU, check row remapping and plan a reset")


def _reset_fields(g: Any, status: Status, action: str, what: str, remedy: str) -> tuple[Status, str, str, str]:
    """The driver's own RST / D-RST fields (Xid 48, 63, 64, 94, 95, 154 on recent drivers) decide whether a
    reset or a drain is needed: any Yes -> FAIL with that action; every event No -> WARN, restart the app."""
    if not g.resets:
        return status, action, what, remedy
    fields = "; ".join(dict.fromkeys(g.resets))
    if any("D-RST: Yes" in r for r in g.resets):
        return Status.FAIL, "drain and reset", f"{what}; driver says {fields}", remedy
    if any(r.startswith("RST: Yes") for r in g.resets):
        return Status.FAIL, "reset GPU", f"{what}; driver says {fields}", remedy
    if all(r == "RST: No, D-RST: No" for r in g.resets):
        return Status.WARN, "restart app", f"{what}; driver says {fields}: contained, no reset needed", \
            REMEDY_CONTAINED
    return status, action, f"{what}; driver says {fields}", remedy


def evaluate_xid(obs: XidObservation, ctx: EvalContext) -> list[Finding]:
    """One finding per GPU and Xid (per NVSwitch and SXid) in the window; ignored Xids SKIP."""
    host = ctx.host.name
    window_h = float(ctx.options.get("kernel_log_window_h", DEFAULTS.kernel_log_window_h))
    if obs.log is None:
        return [Finding(host=host, check="xid.kernel_log", status=Status.SKIP, source=LOG_ID,
                        message=f"no {LOG_ID} output (not collected or not in the bundle): Xids not graded")]
    if obs.log.unreadable:
        return [Finding(host=host, check="xid.kernel_log", status=Status.ERROR, source=LOG_ID,
                        message=f"kernel log not readable: {obs.log.unreadable}",
                        remedy="Run the sweep as root or a user in the adm/systemd-journal group")]
    (ignored, bad_ignores), grader = _ignored(ctx), _Grader(obs, ctx, window_h)
    with_79 = {wg.group.pci for wg in grader.groups if wg.group.kind == "xid" and wg.group.code == 79}
    out: list[Finding] = [Finding(
        host=host, check="xid.ignore", status=Status.WARN, value=", ".join(bad_ignores), expected="Xid numbers",
        source=LOG_ID, message=f"Xid ignore list has entries that are not Xid numbers: {', '.join(bad_ignores)} "
                               "(they ignore nothing)",
        remedy="Fix settings.xid.ignore in the profile or xid_ignore in the inventory: a list of numbers, "
               "e.g. [13, 43]")] if bad_ignores else []
    for wg in grader.groups:
        g = wg.group
        if g.kind == "xid" and g.code in ignored:
            out.append(Finding(host=host, check=f"xid.{g.code}", component=grader.component(g.pci),
                               status=Status.SKIP, value=wg.count, unit="events", source=LOG_ID,
                               message=f"Xid {g.code} x{wg.count} ignored "
                                       f"(settings.xid.ignore / host var xid_ignore)"))
        elif g.kind == "xid":
            out.append(grader.xid(wg))
        elif g.kind == "sxid":
            out.append(grader.sxid(wg))
        elif (f := grader.gpu_lost(wg, with_79)) is not None:
            out.append(f)
    if not [f for f in out if f.check != "xid.ignore"]:
        older = sum(wg.older for wg in in_window(obs.log, ctx.now, window_h))
        note = f" ({older} older events outside the window)" if older else ""
        out.append(Finding(host=host, check="xid.events", status=Status.PASS, value=0, unit="events",
                           expected=f"none in {window_h:g} h", source=LOG_ID,
                           message=f"no Xid, SXid or GPU-lost event in the last {window_h:g} h{note}"))
    return out


PROBE = register(ProbeSpec(
    name="xid",
    description="Xid / SXid / GPU-lost events in the kernel log over a window, with the catalog's action",
    command_map=xid_commands({}),
    render_commands=xid_commands,
    command_tools={LOG_ID: ("journalctl",), **GPU_TOOLS},
    parse_fn=parse_xid,
    evaluate_fn=evaluate_xid,
    accepts=BUNDLE_SOURCES,
))
