"""Evidence on failure: ``nvidia-bug-report.sh`` on hosts that FAIL GPU, NVLink or Xid checks, kept in the run.

    wanted = evidence_wanted(host_results)         # {"gpu007": ["gpu.row_remap.failure", "xid.79"]}
    findings, entries = collect_evidence(run_dir, hosts, wanted, transport, timeout_s=300, max_bytes=64 << 20)

Opt-in (``healthcheck run --collect-evidence``): it runs after the probes and before any benchmark, so the
node's state is captured before anyone resets or reboots it. On the node the report is written into a fresh
``mktemp -d`` folder under ``timeout`` (bounded time), streamed back through the usual framed exec capped at
``max_bytes`` (bounded size; a larger report is kept truncated and says so) and the folder removed. It lands
in ``<run dir>/evidence/<host>/nvidia-bug-report.log.gz`` beside ``raw/``, and is listed in results.json::

    "evidence": [{"host": "gpu007", "status": "collected" | "truncated" | "failed" | "not installed",
                  "path": "evidence/gpu007/nvidia-bug-report.log.gz", "bytes": 5242880,
                  "checks": ["gpu.row_remap.failure"], "reason": "..."}]

Each host also gets one ``evidence.bug_report`` finding: PASS when collected, SKIP when the tool is not
installed, WARN when it failed, timed out or was truncated (the host's verdict comes from its checks).
"""

from __future__ import annotations

import fnmatch
import shlex
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from healthcheck.core.model import CommandResult, Finding, Host, Status
from healthcheck.core.spec import Transport
from healthcheck.store.results import HostResult

EVIDENCE_DIR = "evidence"
COMMAND_ID = "nvidia-bug-report"
CATEGORIES = ("gpu", "nvlink", "xid")
CHECKS = ("pci.gpu.*",)          # a GPU missing from the driver is exactly when the report matters
KILL_MARGIN_S = 30.0             # the framed exec's own timeout, beyond the tool's
GZIP_MAGIC = b"\x1f\x8b"


def evidence_wanted(host_results: Mapping[str, HostResult]) -> dict[str, list[str]]:
    """Hosts with a FAIL in a GPU, NVLink or Xid check (observe-only checks aside) and those check ids."""
    out = {}
    for name, result in sorted(host_results.items()):
        checks = sorted({f.check for f in result.findings if f.status is Status.FAIL and not f.observe
                         and (f.category in CATEGORIES or any(fnmatch.fnmatchcase(f.check, g) for g in CHECKS))})
        if checks:
            out[name] = checks
    return out


def bug_report_command(timeout_s: float) -> str:
    """The node-side command: the report into a private temp folder under ``timeout``, printed, removed."""
    t = shlex.quote(f"{timeout_s:g}")
    return ("command -v nvidia-bug-report.sh >/dev/null 2>&1 || { echo 'nvidia-bug-report.sh: not found' >&2; "
            "exit 127; }; w=$(mktemp -d) || exit 70; cd \"$w\" || exit 70; "
            f"if command -v timeout >/dev/null 2>&1; then hc_t=\"timeout -k 10 {t}\"; else hc_t=; fi; "
            "$hc_t nvidia-bug-report.sh --output-file \"$w/nvidia-bug-report.log\" >\"$w/tool.txt\" 2>&1; rc=$?; "
            "f=; for c in \"$w/nvidia-bug-report.log.gz\" \"$w/nvidia-bug-report.log\"; do "
            "if [ -z \"$f\" ] && [ -f \"$c\" ]; then f=$c; fi; done; "
            "if [ -n \"$f\" ]; then cat \"$f\"; else tail -c 2000 \"$w/tool.txt\" >&2; fi; "
            "cd / && rm -rf \"$w\"; exit $rc")


def store_evidence(run_dir: Path, host: str, result: CommandResult, checks: Sequence[str],
                   timeout_s: float) -> tuple[Finding, dict[str, Any]]:
    """Write what came back (if anything) and describe it: one finding and one results.json entry."""
    entry: dict[str, Any] = {"host": host, "checks": list(checks), "path": None, "bytes": 0}
    if result.stdout:
        name = "nvidia-bug-report.log.gz" if result.stdout.startswith(GZIP_MAGIC) else "nvidia-bug-report.log"
        folder = Path(run_dir) / EVIDENCE_DIR / host
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(result.stdout)
        entry.update(path=f"{EVIDENCE_DIR}/{host}/{name}", bytes=len(result.stdout))
    status, reason = _outcome(result, timeout_s)
    entry.update(status=status, reason=reason)
    finding_status = {"collected": Status.PASS, "not installed": Status.SKIP}.get(status, Status.WARN)
    where = f" in {entry['path']} ({entry['bytes']} bytes)" if entry["path"] else ""
    return Finding(
        host=host, check="evidence.bug_report", status=finding_status, value=status, source=COMMAND_ID,
        expected="nvidia-bug-report.log.gz collected", unit=None,
        message=f"nvidia-bug-report.sh {status}{where} for {', '.join(checks)}" + (f": {reason}" if reason else ""),
        remedy=None if finding_status is Status.PASS else
        "Collect it by hand before resetting or rebooting the node: `sudo nvidia-bug-report.sh` (installed with "
        "the NVIDIA driver); attach it to the hardware ticket"), entry


def _outcome(result: CommandResult, timeout_s: float) -> tuple[str, str]:
    err = " ".join(result.err_text.split())[-300:]
    if result.transport_error is not None:
        return "failed", f"could not run: {result.transport_error}"
    if result.rc == 127 or "nvidia-bug-report.sh: not found" in result.err_text:
        return "not installed", "nvidia-bug-report.sh is not on the node's PATH"
    if result.timed_out or result.rc in (124, 137):
        return "failed", f"timed out after {timeout_s:g} s" + (" (partial report kept)" if result.stdout else "")
    if not result.stdout:
        return "failed", f"no report written (rc {result.rc}){': ' + err if err else ''}"
    if result.stdout_truncated:
        return "truncated", "larger than --evidence-max-bytes: the start of the report is kept"
    if result.rc != 0:
        return "failed", f"exit code {result.rc} (report kept){': ' + err if err else ''}"
    return "collected", ""


def collect_evidence(run_dir: Path, hosts: Sequence[Host], wanted: Mapping[str, Sequence[str]],
                     transport: Transport, *, timeout_s: float, parallel: int = 4) -> tuple[list[Finding],
                                                                                          list[dict[str, Any]]]:
    """Run the bug report on every wanted host (``parallel`` at once); never raises for a host."""
    by_name = {h.name: h for h in hosts}
    targets = [by_name[name] for name in wanted if name in by_name]
    command = bug_report_command(timeout_s)

    def one(host: Host) -> tuple[Finding, dict[str, Any]]:
        try:
            result = transport.run(host, command, timeout_s + KILL_MARGIN_S, command_id=COMMAND_ID)
        except Exception as exc:  # a transport bug must not lose the sweep's results
            result = CommandResult(host=host.name, command_id=COMMAND_ID,
                                   transport_error=f"{type(exc).__name__}: {exc}")
        return store_evidence(run_dir, host.name, result, wanted[host.name], timeout_s)

    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(targets) or 1))) as pool:
        done = list(pool.map(one, targets))
    return [f for f, _ in done], [e for _, e in done]
