"""Run directory = capture bundle: raw outputs round-trip byte for byte, findings append safely."""

from __future__ import annotations

import json

import pytest

from healthcheck.bundle import read_bundle
from healthcheck.model import CommandResult, Finding, HostCollection, Status
from healthcheck.rundir import FindingsLog, RunDirError, new_run_dir, write_collection


def test_collection_round_trips_exact_bytes_and_flags(tmp_path):
    run = new_run_dir(None, tmp_path / "run")
    collection = HostCollection(host="gpu001", collected_at="2026-11-22T03:00:00+00:00", duration_s=1.5,
                                transport_error="host deadline of 5s exceeded", results={
        "nvidia-smi-l": CommandResult("gpu001", "nvidia-smi-l", b"GPU 0: \xff\n", b"warn\n", 0, 0.2,
                                      stdout_truncated=True),
        "kernel-log": CommandResult("gpu001", "kernel-log", timed_out=True,
                                    transport_error="host deadline of 5s exceeded (while running kernel-log)"),
    })
    write_collection(run, collection)
    back = read_bundle(run)["gpu001"]
    smi = back.results["nvidia-smi-l"]
    assert (smi.stdout, smi.stderr, smi.rc, smi.stdout_truncated) == (b"GPU 0: \xff\n", b"warn\n", 0, True)
    assert back.results["kernel-log"].timed_out and back.results["kernel-log"].rc is None
    assert back.transport_error == "host deadline of 5s exceeded"
    assert back.collected_at == "2026-11-22T03:00:00+00:00"


def test_hand_made_bundle_without_rc_reads_as_success(tmp_path):
    (tmp_path / "raw" / "n1").mkdir(parents=True)
    (tmp_path / "raw" / "n1" / "uname-r.out").write_text("5.15.0\n")
    result = read_bundle(tmp_path)["n1"].results["uname-r"]
    assert (result.rc, result.text, result.ok) == (0, "5.15.0\n", True)


def test_refuses_non_empty_run_dir_and_unsafe_names(tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "results.json").write_text("{}")
    with pytest.raises(RunDirError, match="not empty"):
        new_run_dir(None, tmp_path / "busy")
    run = new_run_dir(None, tmp_path / "ok")
    with pytest.raises(RunDirError, match="unsafe name"):
        write_collection(run, HostCollection(host="../../etc", results={}))
    with pytest.raises(RunDirError, match="no raw/ folder"):
        read_bundle(tmp_path / "nothing")


def test_findings_log_appends_and_tolerates_a_cut_line(tmp_path):
    log = FindingsLog(tmp_path)
    log.append([Finding(host="a", check="gpu.count", status=Status.FAIL, message="7 GPUs", value=7)])
    with open(log.path, "a") as fh:
        fh.write('{"host": "b", "check": "gpu.co')  # SIGKILL mid-write
    log.append([Finding(host="c", check="host.reachable", status=Status.ERROR, message="refused")])
    assert [(f.host, f.status.value) for f in log.read()] == [("a", "FAIL")]
    lines = log.path.read_text().splitlines()
    assert json.loads(lines[0])["value"] == 7
