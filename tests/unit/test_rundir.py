"""Run directory = capture bundle: raw outputs round-trip byte for byte, findings append safely."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import subprocess
from pathlib import Path

import pytest

from healthcheck.core.model import CommandResult, Finding, HostCollection, Status
from healthcheck.store.bundle import read_bundle
from healthcheck.store.rundir import FindingsLog, RunDirError, encode_findings, new_run_dir, write_collection


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


def test_every_kind_of_result_reads_back_exactly_with_only_the_files_that_say_something(tmp_path):
    """.err only for stderr that is not empty, .rc only for an exit code that is not 0: every field of every
    result reads back equal, whichever files were left out."""
    run = new_run_dir(None, tmp_path / "run")
    results = [
        CommandResult("n1", "quiet", b"ok\n", b"", 0, 0.25, timeout_s=10.0),
        CommandResult("n1", "empty", b"", b"", 0, 0.0, timeout_s=10.0),
        CommandResult("n1", "warns", b"out\n", b"warning: x\n", 0, 0.5, stderr_truncated=True, timeout_s=10.0),
        CommandResult("n1", "fails", b"", b"no such device\n", 2, 0.1, timeout_s=10.0),
        CommandResult("n1", "fails-quietly", b"partial", b"", 1, 0.1, stdout_truncated=True, timeout_s=10.0),
        CommandResult("n1", "killed", b"half", b"", None, 30.0, timed_out=True, timeout_s=30.0),
        CommandResult("n1", "signal", b"", b"", -9, 1.0, timeout_s=10.0),
        CommandResult("n1", "unreached", transport_error="host silent for 40s", timeout_s=10.0),
        CommandResult("n1", "skipped", not_run="not run: nvidia-smi hung for 20 s in nvidia-smi-q-x", timeout_s=5.0),
    ]
    write_collection(run, HostCollection(host="n1", results={r.command_id: r for r in results},
                                         duration_s=31.5, collected_at="2026-11-22T03:00:00+00:00"))
    assert sorted(p.name for p in (run / "raw" / "n1").iterdir()) == [
        "_host.json", "empty.out", "fails-quietly.out", "fails-quietly.rc", "fails.err", "fails.out", "fails.rc",
        "killed.out", "killed.rc", "quiet.out", "signal.out", "signal.rc", "warns.err", "warns.out"]
    assert [(run / "raw" / "n1" / f).read_bytes() for f in ("fails.rc", "killed.rc", "signal.rc", "fails.err")] \
        == [b"2\n", b"", b"-9\n", b"no such device\n"]
    back = read_bundle(run)["n1"].results
    assert {cid: back[cid] for cid in sorted(back)} == {r.command_id: r for r in sorted(results,
                                                                                        key=lambda r: r.command_id)}


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


def _claim_many(out: str, barrier, rounds: int, queue) -> None:  # runs in a child process
    got = []
    for _ in range(rounds):
        barrier.wait(timeout=30)
        got.append(str(new_run_dir(Path(out), None)))
    queue.put(got)


def test_racing_processes_never_share_a_run_directory(tmp_path):
    """Issue 13.4: 6 processes x 15 rounds, released together by a barrier, all in the same second."""
    ctx = multiprocessing.get_context("fork")
    barrier, queue = ctx.Barrier(6), ctx.Queue()
    procs = [ctx.Process(target=_claim_many, args=(str(tmp_path / "runs"), barrier, 15, queue)) for _ in range(6)]
    for p in procs:
        p.start()
    claimed = [d for _ in procs for d in queue.get(timeout=60)]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    assert len(claimed) == 90 and len(set(claimed)) == 90
    assert all(not any(Path(d, "raw").iterdir()) for d in claimed)


def test_same_run_dir_twice_is_refused(tmp_path):
    first = new_run_dir(None, tmp_path / "run")
    with pytest.raises(RunDirError, match="not empty"):
        new_run_dir(None, first)
    (tmp_path / "empty").mkdir()
    assert new_run_dir(None, tmp_path / "empty") == tmp_path / "empty"  # an empty folder may be given


def test_host_folder_appears_only_complete(tmp_path, monkeypatch):
    """Issue 13.3: written under raw/.partial-*, renamed into place; a failed write leaves nothing."""
    run = new_run_dir(None, tmp_path / "run")
    ok = HostCollection(host="n1", results={"uname-r": CommandResult("n1", "uname-r", b"6.1\n", b"", 0)})
    write_collection(run, ok)
    assert sorted(p.name for p in (run / "raw").iterdir()) == ["n1"]
    assert sorted(p.name for p in (run / "raw" / "n1").iterdir()) == ["_host.json", "uname-r.out"]
    with pytest.raises(OSError) as info:  # ENAMETOOLONG at the rename: nothing half-written stays
        write_collection(run, HostCollection(host="n" * 300, results=ok.results))
    assert info.value.errno == errno.ENAMETOOLONG
    assert sorted(p.name for p in (run / "raw").iterdir()) == ["n1"]


def test_disk_full_mid_host_leaves_no_partial_folder(tmp_path):
    """A real ENOSPC: a 256 KiB tmpfs (root only), one host's output larger than that."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)]).returncode != 0:
        pytest.skip("mount -t tmpfs not permitted here")
    try:
        run = new_run_dir(None, mnt / "run")
        big = HostCollection(host="n2", results={"x": CommandResult("n2", "x", b"y" * 400_000, b"", 0)})
        with pytest.raises(OSError) as info:
            write_collection(run, big)
        assert info.value.errno == errno.ENOSPC
        assert list((run / "raw").iterdir()) == []  # space freed again
        write_collection(run, HostCollection(host="n3", results={"x": CommandResult("n3", "x", b"ok\n", b"", 0)}))
        assert (run / "raw" / "n3" / "x.out").read_bytes() == b"ok\n"
    finally:
        subprocess.run(["umount", str(mnt)], check=True)

def test_latest_symlink_is_relative_replaced_atomically_and_never_clobbers_a_folder(tmp_path):
    from healthcheck.store.rundir import update_latest

    first, second = new_run_dir(tmp_path, tmp_path / "20261122T031500Z"), new_run_dir(tmp_path, tmp_path / "b")
    assert update_latest(first) == tmp_path / "latest"
    assert os.readlink(tmp_path / "latest") == "20261122T031500Z"
    update_latest(second)
    assert os.readlink(tmp_path / "latest") == "b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["20261122T031500Z", "b", "latest"]  # no temp link left
    other = tmp_path / "elsewhere"
    (other / "latest").mkdir(parents=True)
    assert update_latest(new_run_dir(other, other / "r1")) is None
    assert (other / "latest").is_dir() and not (other / "latest").is_symlink()


def test_findings_lines_are_compact_json_with_sorted_keys():
    findings = [Finding(host="gpu001", check="gpu.temp", status=Status.WARN, message="hot: 91 °C \"gpu0\"\n",
                        value=float("nan"), expected=float("inf"), unit="C", observe=True),
                Finding(host="gpu001", check="host.reachable", status=Status.PASS, message="ok", value=1e300,
                        expected=-0.0, source="ssh", remedy=None),
                Finding(host="gpu001", check="ib.port.rate", status=Status.FAIL, message="slow", value=10**20,
                        expected=True)]
    lines = encode_findings(findings).decode("utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [f.to_json() for f in findings]
    assert all(list(json.loads(line)) == sorted(f.to_json()) for line, f in zip(lines, findings, strict=True))
    assert lines[0].startswith('{"check":"gpu.temp","component":"node","expected":null,"host":"gpu001",')
    assert '"message":"hot: 91 °C \\"gpu0\\"\\n"' in lines[0]  # UTF-8, escapes where JSON needs them
    assert json.loads(lines[0])["value"] is None and json.loads(lines[0])["observe"] is True  # NaN: null
    assert json.loads(lines[2])["value"] == 10**20  # past 64 bits: the standard library's line
    with pytest.raises(TypeError):  # not JSON: the worker's grade_one turns this into host.grade ERROR
        encode_findings([Finding(host="h", check="c", status=Status.PASS, message="m", value=object())])
