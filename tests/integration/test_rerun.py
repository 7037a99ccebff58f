"""``run --rerun-failed``: only the failing hosts (and probes) again, linked to the old run; ``runs/latest``.

Over real sshd test hosts: node02's ``uname -r`` hangs in the first run (ERROR), ``ghost`` is an
address where nothing listens (ERROR); the rerun goes to those two only and reports per host what
changed. In replay: the sample bundle's failing node, with ``--rerun-checks``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from healthcheck.run.rerun import probe_commands, probes_for
from healthcheck.store.results import load_results

SAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "samples" / "h100-4node"
ROOT = Path(__file__).resolve().parents[2]


def healthcheck(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "healthcheck", *args], capture_output=True, text=True,
                          timeout=180, env=env)


@pytest.mark.sshd
def test_rerun_failed_sweeps_only_failing_hosts_and_says_what_changed(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(3)
    cluster.add_tool("node02", "uname", {"-r": ("", 0, 30)})  # hangs past --timeout
    inv = cluster.write_inventory(tmp_path / "inv.yaml", profile=None,
                                  extra_hosts={"ghost": {"address": "127.0.1.250", "port": cluster.port}})
    out = tmp_path / "runs"
    first = healthcheck("run", "-i", str(inv), "-F", str(cluster.ssh_config), "--out", str(out), "--probes",
                        "system", "--timeout", "2", "--connect-timeout", "3")
    assert first.returncode == 1, first.stderr
    run_a = (out / "latest").resolve()
    verdicts = {n: h.verdict.value for n, h in load_results(run_a).hosts.items()}
    assert verdicts == {"node01": "PASS", "node02": "ERROR", "node03": "PASS", "ghost": "ERROR"}
    assert os.readlink(out / "latest") == run_a.name  # relative: the runs folder can move

    (cluster.host("node02").bindir / "uname").unlink()  # the "fix": node02 answers again
    sessions = {h.name: h.sessions() for h in cluster.hosts}
    again = healthcheck("run", "--rerun-failed", str(out / "latest"), "-F", str(cluster.ssh_config), "--out", str(out),
                        "--probes", "system", "--timeout", "5", "--connect-timeout", "3")
    assert again.returncode == 1  # ghost is still unreachable
    run_b = (out / "latest").resolve()
    assert run_b != run_a
    results = load_results(run_b)
    assert sorted(results.hosts) == ["ghost", "node02"]
    assert results.hosts["node02"].verdict.value == "PASS"
    assert results.run["rerun_of"] == run_a.name
    assert results.extra["rerun"]["hosts"] == {"node02": {"was": "ERROR", "now": "PASS"},
                                               "ghost": {"was": "ERROR", "now": "ERROR"}}
    assert [c["host"] for c in results.extra["changes"]["recovered"]] == ["node02"]
    assert [c["host"] for c in results.extra["changes"]["still_failing"]] == ["ghost"]
    assert "  was ERROR, now PASS: node02 (1)" in again.stdout.splitlines()
    assert "  was ERROR, now ERROR: ghost (1)" in again.stdout.splitlines()
    manifest = json.loads((run_b / "manifest.json").read_text())
    assert manifest["args"]["target"]["rerun_of"] == str(run_a)  # where runs/latest pointed, not the moving link
    assert {h.name: h.sessions() - sessions[h.name] for h in cluster.hosts} == {"node01": 0, "node02": 1, "node03": 0}
    summary = (run_b / "summary.md").read_text()
    assert "`node02`: was ERROR, now PASS" in summary
    assert "node02" in (run_b / "report.html").read_text().split('id="changes"')[1].split("</section>")[0]

    # a rerun of a run where nothing failed: nothing to do, exit 0, no new run directory
    clean = tmp_path / "clean"
    passed = healthcheck("run", "-i", str(inv), "--limit", "node01,node02", "-F", str(cluster.ssh_config),
                         "--run-dir", str(clean), "--probes", "system")
    assert passed.returncode == 0, passed.stdout
    nothing = healthcheck("run", "--rerun-failed", str(clean), "-F", str(cluster.ssh_config), "--out", str(out))
    assert nothing.returncode == 0 and "nothing to rerun" in nothing.stdout
    assert (out / "latest").resolve() == run_b  # --run-dir runs leave latest alone


def test_rerun_checks_in_replay_runs_only_the_probes_behind_the_failures(tmp_path):
    first = healthcheck("run", "--replay", str(SAMPLE), "--run-dir", str(tmp_path / "a"))
    assert first.returncode == 1
    again = healthcheck("run", "--replay", str(SAMPLE), "--rerun-failed", str(tmp_path / "a"), "--rerun-checks",
                        "--run-dir", str(tmp_path / "b"))
    assert again.returncode == 1, again.stderr
    results = load_results(tmp_path / "b")
    assert list(results.hosts) == ["h100-node03"]
    assert results.run["probes"] == ["gpu", "nvlink", "infiniband"]
    assert {f.check.split(".")[0] for f in results.hosts["h100-node03"].findings} >= {"gpu", "nvlink", "ib"}
    assert results.extra["rerun"]["probes"] == ["gpu", "nvlink", "infiniband"]
    assert "  was FAIL, now FAIL: h100-node03 (1)" in again.stdout.splitlines()
    usage = healthcheck("run", "--replay", str(SAMPLE), "--rerun-checks", "--run-dir", str(tmp_path / "c"))
    assert usage.returncode == 2 and "--rerun-checks needs --rerun-failed" in usage.stderr


def test_findings_trace_to_the_probe_that_read_their_command():
    from healthcheck import probes
    from healthcheck.core.model import Finding, Status

    commands = probe_commands(probes.all_probes())

    def f(check: str, source: str | None) -> Finding:
        return Finding(host="n", check=check, status=Status.FAIL, message="x", source=source)

    assert probes_for([f("gpu.pcie.width", "nvidia-smi-q-x")], commands) == ["gpu"]  # four probes read it
    assert probes_for([f("system.memory", "meminfo")], commands) == ["resources"]
    assert probes_for([f("ib.port.state", "ib-sysfs")], commands) == ["infiniband"]
    assert probes_for([f("version.driver", "nvidia-smi-q-x")], commands) == ["versions"]
    assert probes_for([f("fleet.versions", "ofed-info")], commands) == ["versions"]
    assert probes_for([f("dcgm_fields.sample", None)], commands) == ["dcgm_fields"]
    assert probes_for([f("host.reachable", "ssh")], commands) == list(commands)  # never reached: all again


@pytest.mark.sshd
def test_rerun_failed_benchmarks_relaunches_only_the_failed_job(ssh_cluster_factory, tmp_path):
    from tests.integration.test_e2e_benchmarks import NODE_OK, install_mpirun, launched, stored_jobs

    cluster = ssh_cluster_factory(3)
    install_mpirun(cluster, lambda group: (NODE_OK, 0, 30 if group == {"node03"} else 0))  # node03's job hangs
    short = {"benchmarks": {"nccl": {"timeout_s": 2}, "launcher": {"grace_s": 1}}}
    inv = cluster.write_inventory(tmp_path / "inv.yaml", profile="h100-sxm5-8x",
                                  host_vars={h.name: short for h in cluster.hosts})
    first = healthcheck("bench", "-i", str(inv), "-F", str(cluster.ssh_config), "--benchmarks", "nccl",
                        "--run-dir", str(tmp_path / "a"))
    assert first.returncode == 1, first.stdout[-2000:] + first.stderr[-2000:]
    assert {n: h.verdict.value for n, h in load_results(tmp_path / "a").hosts.items()} == \
           {"node01": "PASS", "node02": "PASS", "node03": "ERROR"}

    install_mpirun(cluster, lambda group: (NODE_OK, 0, 0))  # node03 fixed
    before = {h.name: len(launched(cluster, h.name)) for h in cluster.hosts}
    again = healthcheck("run", "--rerun-failed", str(tmp_path / "a"), "--rerun-checks", "-F",
                        str(cluster.ssh_config), "--run-dir", str(tmp_path / "b"))
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert {h.name: len(launched(cluster, h.name)) - before[h.name] for h in cluster.hosts} == \
           {"node01": 0, "node02": 0, "node03": 1}
    assert set(stored_jobs(tmp_path / "b")) == {"nccl-all_reduce_perf-node-node03"}
    results = load_results(tmp_path / "b")
    assert results.run["probes"] == []
    assert results.extra["rerun"]["jobs"] == ["nccl-all_reduce_perf-node-node03"]
    assert results.extra["rerun"]["hosts"] == {"node03": {"was": "ERROR", "now": "PASS"}}
    assert "  was ERROR, now PASS: node03 (1)" in again.stdout.splitlines()
