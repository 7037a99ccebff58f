"""The node tools that probe commands depend on, and what a hang of each one means.

    TOOLS["nvidia-smi"].hang_check                       # "gpu.tool_hang": a hang is a GPU/driver fault
    tool_hang_findings(host, collection.results, command_tools(probes))
    done, obs = bounded(lambda: collect_nvml(), timeout_s=60)   # an in-process NVML call, bounded

A probe declares per command the tools it depends on (``ProbeSpec.command_tools``). On the node, a
command of a tool that timed out stops later commands of the same tool (the script's NOTRUN
sections). Here, a timed-out command of a tool whose hang says something about the hardware
(``nvidia-smi``, ``dcgmi``, NVML) becomes FAIL ``gpu.tool_hang``; timeouts of the other tools stay
the ``<probe>.collect`` ERROR that every timeout gets.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from healthcheck.core.model import CommandResult, Finding, Status


@dataclass(frozen=True)
class NodeTool:
    """A tool on the node; ``hang_check`` is set when its hang is itself a hardware finding."""

    name: str
    description: str
    hang_check: str | None = None


TOOL_HANG = "gpu.tool_hang"
TOOLS: dict[str, NodeTool] = {t.name: t for t in (
    NodeTool("nvidia-smi", "nvidia-smi, the NVIDIA driver's CLI", TOOL_HANG),
    NodeTool("dcgmi", "dcgmi and its nv-hostengine", TOOL_HANG),
    NodeTool("nvml", "NVML library calls (local mode)", TOOL_HANG),
    NodeTool("infiniband", "ibstat and /sys/class/infiniband (the HCA driver)"),
    NodeTool("journalctl", "the kernel log through journalctl or dmesg"),
    NodeTool("systemctl", "systemd through systemctl"),
)}

TOOL_HANG_REMEDY = ("A GPU tool that does not answer is the classic sign of a GPU fallen off the bus or a wedged "
                    "driver: check the kernel log on the node for Xid 79 and other Xids (journalctl -k | grep -i "
                    "xid, or dmesg), then reset the GPU or reboot the node; drain it until the tool answers again")


def unknown_tools(command_tools: Mapping[str, Sequence[str]]) -> list[str]:
    """Declared tool names missing from ``TOOLS`` (a typo would silently never match)."""
    return sorted({t for tools in command_tools.values() for t in tools if t not in TOOLS})


def command_tools(probes: Iterable[object]) -> dict[str, tuple[str, ...]]:
    """command id -> the tools every probe declares for it."""
    merged: dict[str, tuple[str, ...]] = {}
    for probe in probes:
        for cid, tools in (getattr(probe, "command_tools", None) or {}).items():
            merged[cid] = tuple(dict.fromkeys(merged.get(cid, ()) + tuple(tools)))
    return merged


T = TypeVar("T")


def bounded(fn: Callable[[], T], timeout_s: float) -> tuple[bool, T | None]:
    """``(True, fn())``, or ``(False, None)`` when ``fn`` has not returned within ``timeout_s``: the
    call goes on in a daemon thread (a call stuck in the driver cannot be cancelled). An exception
    of ``fn`` is raised here."""
    outcome: list[tuple[bool, object]] = []

    def call() -> None:
        try:
            outcome.append((True, fn()))
        except BaseException as exc:  # handed to the caller's thread
            outcome.append((False, exc))

    worker = threading.Thread(target=call, name="hc-bounded", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if not outcome:
        return False, None
    ok, value = outcome[0]
    if not ok:
        raise value  # type: ignore[misc]
    return True, value  # type: ignore[return-value]


def hang_finding(host: str, tools: Sequence[str], what: str, timeout_s: float | None, rc: int | None = None,
                 source: str | None = None, consequence: str | None = None) -> Finding:
    """FAIL ``gpu.tool_hang``: ``what`` (a command id, "NVML calls") of ``tools`` did not answer in time;
    ``consequence`` says what the sweep did about it."""
    given = f"{timeout_s:g} s" if timeout_s is not None else "its timeout"
    names = "/".join(tools)
    killed = " and had to be killed (SIGKILL)" if rc == 137 else ""
    return Finding(host=host, check=TOOL_HANG, status=Status.FAIL, component="node", source=source or what,
                   value=timeout_s, unit="s" if timeout_s is not None else None,
                   expected=f"{names} answers within {given}",
                   message=f"{names} hung: {what} did not answer within {given}{killed}; "
                           + (consequence or f"the node did not start its later {names} commands"),
                   remedy=TOOL_HANG_REMEDY)


def tool_hang_findings(host: str, results: Mapping[str, CommandResult],
                       tools_by_command: Mapping[str, Sequence[str]]) -> list[Finding]:
    """FAIL ``gpu.tool_hang`` for every timed-out command of a tool whose hang is a hardware sign."""
    findings = []
    for cid, result in results.items():
        if not result.timed_out or result.transport_error is not None:
            continue  # a host that went silent or dropped is host.reachable's finding, not proof of a hang
        hung = [t for t in tools_by_command.get(cid, ()) if t in TOOLS and TOOLS[t].hang_check]
        if not hung:
            continue
        findings.append(hang_finding(host, hung, cid, result.timeout_s, result.rc))
    return findings
