"""Evidence on failure: which hosts get a bug report, and how each outcome is stored and reported."""

from __future__ import annotations

import gzip
from pathlib import Path

from healthcheck.core.model import CommandResult, Finding, Status
from healthcheck.run.evidence import bug_report_command, evidence_wanted, store_evidence
from healthcheck.store.results import HostResult


def host(name: str, *findings: tuple[str, Status, bool]) -> HostResult:
    return HostResult(name=name, findings=[Finding(host=name, check=c, status=s, message=c, observe=o)
                                           for c, s, o in findings])


def test_only_gpu_nvlink_xid_and_pci_gpu_fails_want_evidence():
    wanted = evidence_wanted({
        "a": host("a", ("gpu.row_remap.failure", Status.FAIL, False), ("xid.79", Status.FAIL, False)),
        "b": host("b", ("ib.port.state", Status.FAIL, False), ("gpu.temp_c", Status.WARN, False)),
        "c": host("c", ("pci.gpu.driver", Status.FAIL, False)),
        "d": host("d", ("nvlink.link.active", Status.FAIL, True)),        # observe-only: no
    })
    assert wanted == {"a": ["gpu.row_remap.failure", "xid.79"], "c": ["pci.gpu.driver"]}


def test_command_bounds_time_and_cleans_up():
    line = bug_report_command(300)
    assert "timeout -k 10 300" in line and "--output-file" in line and 'rm -rf "$w"' in line


def result(stdout: bytes = b"", rc: int | None = 0, **kw) -> CommandResult:
    return CommandResult(host="gpu007", command_id="nvidia-bug-report", stdout=stdout, rc=rc, **kw)


def test_outcomes(tmp_path: Path):
    report = gzip.compress(b"Start of NVIDIA bug report log file")
    f, e = store_evidence(tmp_path, "gpu007", result(report), ["xid.79"], 300)
    assert (f.status, e["status"], e["path"]) == (Status.PASS, "collected", "evidence/gpu007/nvidia-bug-report.log.gz")
    assert (tmp_path / e["path"]).read_bytes() == report
    f, e = store_evidence(tmp_path, "gpu008", result(report[:10], stdout_truncated=True), ["xid.79"], 300)
    assert (f.status, e["status"]) == (Status.WARN, "truncated") and e["bytes"] == 10
    f, e = store_evidence(tmp_path, "gpu009", result(rc=127, stderr=b"nvidia-bug-report.sh: not found"), ["x"], 300)
    assert (f.status, e["status"], e["path"]) == (Status.SKIP, "not installed", None)
    assert "sudo nvidia-bug-report.sh" in f.remedy
    f, e = store_evidence(tmp_path, "gpu010", result(rc=None, transport_error="connection refused"), ["x"], 300)
    assert (f.status, e["status"]) == (Status.WARN, "failed") and "connection refused" in e["reason"]
