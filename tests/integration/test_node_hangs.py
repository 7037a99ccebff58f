"""Hung tools, frozen hosts and escaped children on real sshd test hosts: the host ends near its
command timeout, not the host deadline, and keeps everything that arrived.

Each run is bounded by a generous subprocess timeout far below the host deadline it is given
(``--deadline 600``): waiting for the deadline fails the test; no timing is asserted."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from healthcheck.run.execute import execute_run
from healthcheck.run.options import OutputOptions, RunOptions, SelectionOptions, TargetOptions
from healthcheck.store.bundle import read_host
from healthcheck.store.results import expanded_document, load_results
from tests.conftest import fixture_text

pytestmark = pytest.mark.sshd

NVIDIA = {"nvidia-smi-q-x", "nvidia-smi-topo", "nvidia-smi-nvlink-s", "nvidia-smi-nvlink-e", "dcgmi-dmon"}


def _run(inv: Path, cluster, run_dir: Path, *args: str) -> tuple[int, dict]:
    argv = [sys.executable, "-m", "healthcheck", "run", "-i", str(inv), "-F", str(cluster.ssh_config),
            "--run-dir", str(run_dir), "--deadline", "600", "--connect-timeout", "30", *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=150)
    return proc.returncode, expanded_document(run_dir)


def _meta(run_dir: Path, host: str) -> dict:
    return json.loads((run_dir / "raw" / host / "_host.json").read_text())


def _findings(results: dict, host: str, check: str) -> list[dict]:
    return [f for f in results["hosts"][host]["findings"] if f["check"] == check]


def _write_shim(cluster, host: str, tool: str, body: str) -> None:
    shim = cluster.host(host).bindir / tool
    shim.write_text("#!/bin/sh\n" + body)
    shim.chmod(0o755)


def _session_pids(sid: int) -> list[int]:
    """Processes of one session, from /proc (field 6 of stat is the session id)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:
            pids.append(int(stat.parent.name))
    return pids


def _wait_for(path: Path, limit_s: float = 60) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and not path.exists():
        time.sleep(0.1)
    assert path.exists(), f"{path} never appeared"


def test_hung_nvidia_smi_skips_its_other_commands_and_the_rest_is_collected(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(1)
    cluster.add_tool("node01", "nvidia-smi", {"*": ("", 0, 1000)})  # every call hangs: a wedged driver
    cluster.add_tool("node01", "journalctl", fixture_text("xid/journalctl-k-healthy.txt").split("\n", 1)[1])
    inv = cluster.write_inventory(tmp_path / "inv.yaml")
    run_dir = tmp_path / "run"
    selected = ["system", "gpu", "topology", "nvlink", "xid", "infiniband", "dcgm_fields"]
    rc, results = _run(inv, cluster, run_dir, "--timeout", "10", "--probes", ",".join(selected))
    assert rc == 1
    commands = _meta(run_dir, "node01")["commands"]
    assert commands["nvidia-smi-q-x"]["timed_out"] is True
    assert {cid for cid, c in commands.items() if c["not_run"]} == NVIDIA - {"nvidia-smi-q-x"}
    assert commands["nvidia-smi-topo"]["not_run"] == "not run: nvidia-smi hung for 10 s in nvidia-smi-q-x"
    collected = {cid for cid, r in read_host(run_dir / "raw" / "node01").results.items() if r.rc is not None}
    assert collected - NVIDIA == set(commands) - NVIDIA  # every command not of nvidia-smi ran to the end
    [hang] = _findings(results, "node01", "gpu.tool_hang")
    assert hang["status"] == "FAIL" and hang["value"] == 10.0 and "nvidia-smi hung" in hang["message"]
    assert _findings(results, "node01", "host.reachable")[0]["status"] == "PASS"
    assert [f["status"] for f in _findings(results, "node01", "xid.events")] == ["PASS"]

    replay = execute_run(RunOptions(target=TargetOptions(replay=run_dir),
                                    outputs=OutputOptions(run_dir=tmp_path / "replayed"),
                                    selection=SelectionOptions(probes=selected)))
    original = load_results(run_dir)

    def graded(findings):  # host.reachable's source names the transport (ssh, then replay)
        return [(f.check, f.status, f.component, f.source, f.message) for f in findings if f.check != "host.reachable"]
    assert graded(replay.results.hosts["node01"].findings) == graded(original.hosts["node01"].findings)
    assert replay.results.hosts["node01"].verdict.value == "FAIL"


def test_frozen_host_ends_near_the_timeout_and_keeps_what_arrived(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(2)
    flag = tmp_path / "uname.pid"
    _write_shim(cluster, "node01", "uname", f"echo $$ >{flag}.tmp; mv {flag}.tmp {flag}\nexec sleep 1000\n")
    inv = cluster.write_inventory(tmp_path / "inv.yaml")
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "healthcheck", "run", "-i", str(inv), "-F", str(cluster.ssh_config),
                             "--run-dir", str(run_dir), "--deadline", "600", "--timeout", "10",
                             "--connect-timeout", "30", "--probes", "system"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    frozen: list[int] = []
    try:
        _wait_for(flag)
        frozen = _session_pids(os.getsid(int(flag.read_text())))
        for pid in frozen:  # SIGSTOP the whole remote session: the script, timeout, the tool
            os.kill(pid, signal.SIGSTOP)
        assert proc.wait(timeout=150) == 1
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
    results = expanded_document(run_dir)
    reach = _findings(results, "node01", "host.reachable")[0]
    assert reach["status"] == "ERROR" and "host silent for" in reach["message"]
    assert "while running uname-r" in reach["message"] and "uname-r's 10s timeout" in reach["message"]
    assert _findings(results, "node01", "system.hostname")[0]["status"] == "PASS"  # printed before the freeze
    assert (run_dir / "raw" / "node01" / "hostname.out").read_text() == "node01\n"
    assert results["hosts"]["node02"]["verdict"] == "PASS"


def test_a_child_that_escapes_with_setsid_cannot_hold_the_host(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(1)
    pidfile = tmp_path / "escaped.pid"
    _write_shim(cluster, "node01", "uname", f"setsid sleep 300 </dev/null & echo $! >{pidfile}\necho 6.1.0-hc\n")
    inv = cluster.write_inventory(tmp_path / "inv.yaml")
    try:
        rc, results = _run(inv, cluster, tmp_path / "run", "--timeout", "30", "--probes", "system")
    finally:
        if pidfile.is_file():
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
    assert rc == 0, [f["message"] for f in results["hosts"]["node01"]["findings"] if f["status"] != "PASS"]
    assert _findings(results, "node01", "system.kernel")[0]["value"] == "6.1.0-hc"
    assert (tmp_path / "run" / "raw" / "node01" / "uname-r.out").read_text() == "6.1.0-hc\n"
