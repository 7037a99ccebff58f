"""Fault injection on real sshd test hosts (issue 13.2, 13.3): SIGTERM, a second Ctrl-C, SIGKILL,
a disk that fills up mid-sweep (a real tmpfs), and host names that must be refused before any
connection. The sweep always finishes, writes its results and says why."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from healthcheck.store.rundir import FindingsLog

pytestmark = pytest.mark.sshd
ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _start(inv: Path, cluster, run_dir: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "healthcheck", "run", "-i", str(inv), "-F", str(cluster.ssh_config),
                             "--run-dir", str(run_dir), "--probes", "system", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)


def _wait_for_hosts(run_dir: Path, count: int, limit_s: float = 60) -> set[str]:
    log = FindingsLog(run_dir)
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and len({f.host for f in log.read()}) < count:
        time.sleep(0.1)
    return {f.host for f in log.read()}


def _checks(results: dict, host: str) -> list[tuple[str, str]]:
    return [(f["check"], f["status"]) for f in results["hosts"][host]["findings"]]


def _slow_four(ssh_cluster_factory, tmp_path: Path):
    """Four sshd hosts whose ``uname -r`` takes 2 s (time to signal a sweep mid-way), and their inventory."""
    cluster = ssh_cluster_factory(4)
    for h in cluster.hosts:
        cluster.add_tool(h.name, "uname", {"-r": ("6.1.0\n", 0, 2)})
    return cluster, cluster.write_inventory(tmp_path / "inv.yaml")


def _node02_in_flight(ssh_cluster_factory, tmp_path: Path):
    """Two sshd hosts, node02's ``uname -r`` in flight for two minutes, and their inventory."""
    cluster = ssh_cluster_factory(2)
    cluster.add_tool("node02", "uname", {"-r": ("6.1.0\n", 0, 120)})
    return cluster, cluster.write_inventory(tmp_path / "inv.yaml")


def _interrupted_twice(proc, run_dir: Path) -> tuple[str, dict]:
    """Ctrl-C twice (the second ends node02's grace): exit 130, node01 PASS, node02 not swept, results and
    report written; returns stderr and results.json."""
    proc.send_signal(signal.SIGINT)
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    results = json.loads((run_dir / "results.json").read_text())
    assert results["hosts"]["node01"]["verdict"] == "PASS"
    [swept] = results["hosts"]["node02"]["findings"]
    assert (swept["check"], swept["status"]) == ("host.swept", "ERROR")
    assert swept["message"] == ("not swept: the run was interrupted (SIGINT) while this host was in flight; "
                                "its outputs were not kept")
    assert sorted(p.name for p in (run_dir / "raw").iterdir()) == ["node01"]
    assert (run_dir / "report.html").is_file()
    return stderr, results


def _interrupted(run_dir: Path, signame: str) -> tuple[dict, list[str]]:
    """results.json of a run stopped by ``signame``: some hosts PASS, the rest only ``host.swept`` ERROR."""
    results = json.loads((run_dir / "results.json").read_text())
    assert results["run"]["interrupted"] is True and results["run"]["signal"] == signame
    swept = sorted(n for n, h in results["hosts"].items() if h["verdict"] == "PASS")
    not_swept = sorted(n for n, h in results["hosts"].items() if _checks(results, n) == [("host.swept", "ERROR")])
    assert swept and not_swept and sorted(swept + not_swept) == ["node01", "node02", "node03", "node04"]
    return results, not_swept


def test_sigterm_ends_like_ctrl_c_with_results_and_exit_143(ssh_cluster_factory, tmp_path):
    cluster, inv = _slow_four(ssh_cluster_factory, tmp_path)
    run_dir = tmp_path / "run"
    proc = _start(inv, cluster, run_dir, "--forks", "1")
    assert _wait_for_hosts(run_dir, 1)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    assert "interrupted (SIGTERM)" in stderr
    results, not_swept = _interrupted(run_dir, "SIGTERM")
    message = results["hosts"][not_swept[-1]]["findings"][0]["message"]
    assert message == "not swept: the run was interrupted (SIGTERM) before this host started"
    assert (run_dir / "report.html").is_file() and (run_dir / "junit.xml").is_file()


def test_second_ctrl_c_ends_the_grace_and_still_writes_results(ssh_cluster_factory, tmp_path):
    cluster, inv = _node02_in_flight(ssh_cluster_factory, tmp_path)
    run_dir = tmp_path / "run"
    proc = _start(inv, cluster, run_dir, "--forks", "2", "--timeout", "300")
    assert _wait_for_hosts(run_dir, 1) == {"node01"}
    _interrupted_twice(proc, run_dir)


def test_results_and_report_rebuild_after_sigkill(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(3)
    cluster.add_tool("node03", "uname", {"-r": ("", 0, 120)})
    inv = cluster.write_inventory(tmp_path / "inv.yaml")
    run_dir = tmp_path / "run"
    proc = _start(inv, cluster, run_dir, "--timeout", "300")
    assert _wait_for_hosts(run_dir, 2) == {"node01", "node02"}
    proc.kill()
    proc.communicate(timeout=30)
    assert not (run_dir / "results.json").exists()
    shown = subprocess.run([sys.executable, "-m", "healthcheck", "results", str(run_dir)], capture_output=True,
                           text=True, timeout=120, env=ENV)
    assert shown.returncode == 1, shown.stderr
    assert "results.json missing: rebuilt from findings.jsonl (3 hosts" in shown.stderr
    assert shown.stdout.startswith("verdict ERROR: 3 hosts  PASS 2  ERROR 1")
    assert "ERROR host.swept node03 (1): not graded: the run ended (killed)" in shown.stdout
    report = subprocess.run([sys.executable, "-m", "healthcheck", "report", str(run_dir)], capture_output=True,
                            text=True, timeout=120, env=ENV)
    assert report.returncode == 0, report.stderr
    assert (run_dir / "report.html").is_file()
    assert json.loads((run_dir / "results.json").read_text())["run"]["rebuilt_from"] == "findings.jsonl"
    # a replay of the killed run: node03 never finished, so it is ERROR, not PASS
    replay = subprocess.run([sys.executable, "-m", "healthcheck", "run", "--replay", str(run_dir), "--out",
                             str(tmp_path / "again")], capture_output=True, text=True, timeout=120, env=ENV)
    assert replay.returncode == 1, replay.stderr
    again = (tmp_path / "again" / "latest").resolve()
    verdicts = {n: h["verdict"] for n, h in json.loads((again / "results.json").read_text())["hosts"].items()}
    assert verdicts == {"node01": "PASS", "node02": "PASS", "node03": "ERROR"}


@pytest.fixture
def small_tmpfs(tmp_path):
    """A real 2 MiB tmpfs for the run directory (root only): disk full is a real ENOSPC."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)]).returncode != 0:
        pytest.skip("mount -t tmpfs not permitted here")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=True)


def test_disk_full_mid_sweep_is_an_error_for_that_host_only(ssh_cluster_factory, tmp_path, small_tmpfs):
    """node02 writes 3 MB to stderr (under the 4 MiB cap): its raw folder does not fit, the others do."""
    cluster = ssh_cluster_factory(3)
    shim = cluster.host("node02").bindir / "uname"
    shim.write_text("#!/bin/sh\nhead -c 3000000 /dev/zero >&2\necho 6.1.0\n")
    shim.chmod(0o755)
    inv = cluster.write_inventory(tmp_path / "inv.yaml")
    proc = _start(inv, cluster, small_tmpfs / "run", "--forks", "1")
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, stderr
    results = json.loads((small_tmpfs / "run" / "results.json").read_text())
    assert {n: h["verdict"] for n, h in results["hosts"].items()} == \
           {"node01": "PASS", "node02": "ERROR", "node03": "PASS"}
    [write] = [f for f in results["hosts"]["node02"]["findings"] if f["check"] == "host.raw_write"]
    assert write["status"] == "ERROR" and write["value"] == "No space left on device"
    assert sorted(p.name for p in (small_tmpfs / "run" / "raw").iterdir()) == ["node01", "node03"]
    assert "ERROR host.raw_write node02 (1): node02: raw outputs not written (No space left on device)" in stdout


def test_run_directory_full_at_the_end_is_a_clean_stop(ssh_cluster_factory, tmp_path, small_tmpfs):
    """node02 prints 3 MB on stdout: its raw folder fails, and results.json (which holds that
    output as an observation) cannot be written either: exit 2, one clear line, findings.jsonl kept."""
    cluster = ssh_cluster_factory(3)
    cluster.add_tool("node02", "uname", {"-r": ("6.1.0 " * 500_000 + "\n", 0)})
    inv = cluster.write_inventory(tmp_path / "inv.yaml")
    run_dir = small_tmpfs / "run"
    proc = _start(inv, cluster, run_dir, "--forks", "1")
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert stderr == (f"healthcheck: cannot write results.json in {run_dir}: No space left on device; what is "
                      f"already on disk (raw/, findings.jsonl) is kept: free space and run `healthcheck results "
                      f"{run_dir}`\n")
    assert not (run_dir / "results.json").exists() and not list(run_dir.glob("*.tmp"))
    assert {"node01", "node02"} <= {f.host for f in FindingsLog(run_dir).read()}  # node03's may not fit


def test_bad_host_names_are_refused_before_any_connection(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(2)
    for bad in ("node[01-02],.bad", "node[01-02],a" + "b" * 300):
        proc = subprocess.run([sys.executable, "-m", "healthcheck", "run", "--hosts", bad, "-F",
                               str(cluster.ssh_config), "--out", str(tmp_path / "runs"), "--probes", "system"],
                              capture_output=True, text=True, timeout=120, env=ENV)
        assert proc.returncode == 2
        assert proc.stderr.startswith("healthcheck: --hosts: host name ")
    assert [h.connections() for h in cluster.hosts] == [0, 0]
    assert not (tmp_path / "runs").exists()


def _start_sweep(inv: Path, cluster, history: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "healthcheck", "sweep", "-i", str(inv), "-F",
                             str(cluster.ssh_config), "--history", str(history), "--probes", "system", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)


def _sweep_run_dir(history: Path, limit_s: float = 60) -> Path:
    """The run directory the sweep is writing (HISTORY/runs/<stamp>), once it exists."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        found = [p for p in (history / "runs").glob("*") if p.is_dir() and not p.is_symlink()] \
            if (history / "runs").is_dir() else []
        if found:
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f"no run directory under {history / 'runs'} after {limit_s} s")


def _recorded_runs(history: Path) -> list[str]:
    from healthcheck.ops.history import HistoryIndex

    if not (history / "history.sqlite").is_file():
        return []
    with HistoryIndex.open(history) as index:
        return [r.run_id for r in index.runs()]


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sweep_sigterm_or_sighup_writes_results_and_records_nothing(ssh_cluster_factory, tmp_path, signum, code):
    """SIGHUP (the terminal or ssh session of a sweep started by hand went away) ends it as SIGTERM does."""
    name = signal.Signals(signum).name
    cluster, inv = _slow_four(ssh_cluster_factory, tmp_path)
    history = tmp_path / "history"
    proc = _start_sweep(inv, cluster, history, "--forks", "1")
    run_dir = _sweep_run_dir(history)
    assert _wait_for_hosts(run_dir, 1)
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    assert f"interrupted ({name}): hosts not swept are marked ERROR (host.swept); not recorded in the history " \
           f"{history}" in stderr
    results, not_swept = _interrupted(run_dir, name)
    assert results["hosts"][not_swept[-1]]["findings"][0]["message"] == \
        f"not swept: the run was interrupted ({name}) before this host started"
    assert (run_dir / "report.html").is_file() and (run_dir / "junit.xml").is_file()
    assert _recorded_runs(history) == []  # an interrupted sweep is not history: no "new failures" next night
    again = _start_sweep(inv, cluster, history, "--forks", "4")  # the lock was released
    out, stderr = again.communicate(timeout=120)
    assert again.returncode == 0, stderr
    assert "since (no earlier run): 0 new failure(s)" in out
    assert len(_recorded_runs(history)) == 1


def test_sweep_second_ctrl_c_ends_the_grace_and_exits_130(ssh_cluster_factory, tmp_path):
    cluster, inv = _node02_in_flight(ssh_cluster_factory, tmp_path)
    history = tmp_path / "history"
    proc = _start_sweep(inv, cluster, history, "--forks", "2", "--timeout", "300")
    run_dir = _sweep_run_dir(history)
    assert _wait_for_hosts(run_dir, 1) == {"node01"}
    stderr, results = _interrupted_twice(proc, run_dir)
    assert "interrupted (SIGINT): hosts not swept are marked ERROR (host.swept)" in stderr
    assert results["run"]["signal"] == "SIGINT"
    assert _recorded_runs(history) == []
