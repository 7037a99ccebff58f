"""A benchmark job that cannot start says why, for real: ``healthcheck bench`` over two sshd test hosts
launches the real Open MPI ``mpirun`` on the first one, broken in the ways a new cluster breaks it
(run as root without ``--allow-run-as-root``, mpirun's ssh to the nodes refused, the work dir missing,
the launcher binary missing), and the one console line names the cause, not a row of dashes.

The texts these reproduce are also kept as fixtures (tests/fixtures/launcher/) for the unit tests.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.sshd, pytest.mark.mpi]

if not shutil.which("mpirun"):
    pytest.skip("Open MPI mpirun not installed (apt-get install openmpi-bin)", allow_module_level=True)

ROOT = os.geteuid() == 0


def _bench(cluster, tmp_path: Path, launcher: dict, shapes: list[str]) -> tuple[subprocess.CompletedProcess, dict]:
    tmp_path.mkdir(exist_ok=True)
    settings = {"benchmarks": {"launcher": launcher, "hpl": {"shapes": shapes}}}
    inventory = cluster.write_inventory(tmp_path / "inv.yaml", host_vars={h.name: settings for h in cluster.hosts})
    done = subprocess.run([sys.executable, "-m", "healthcheck", "bench", "-i", str(inventory), "-F",
                           str(cluster.ssh_config), "--benchmarks", "hpl", "--run-dir", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=240, check=False)
    return done, json.loads((tmp_path / "run" / "results.json").read_text())


def _job_line(done: subprocess.CompletedProcess) -> str:
    [line] = [x for x in done.stdout.splitlines() if x.startswith("ERROR hpl.job ")]
    return line


def _remedy(results: dict) -> str:
    return next(f["remedy"] for h in results["hosts"].values() for f in h["findings"] if f["check"] == "hpl.job")


@pytest.mark.skipif(not ROOT, reason="the test hosts log in as the test's user: only root meets mpirun's refusal")
def test_mpirun_as_root_names_the_flag(ssh_cluster_factory, tmp_path: Path) -> None:
    done, results = _bench(ssh_cluster_factory(2), tmp_path, {}, ["node"])
    assert done.returncode == 1, done.stderr
    assert _job_line(done) == ("ERROR hpl.job node[01-02] (2): launch failed: mpirun refuses to run as root: "
                               "--allow-run-as-root not given (launcher setting allow_run_as_root: true)")
    assert "allow_run_as_root: true" in _remedy(results)
    assert "---" not in done.stdout


def _ssh_agent(cluster, *options: str) -> dict:
    agent = " ".join(["ssh", "-o", "BatchMode=yes", *options, "-p", str(cluster.port)])
    return {"allow_run_as_root": ROOT, "mca": {"plm_rsh_agent": agent}, "env": {"HWLOC_COMPONENTS": "-gl"}}


def test_mpiruns_ssh_without_the_nodes_host_keys(ssh_cluster_factory, tmp_path: Path) -> None:
    cluster = ssh_cluster_factory(2)
    launcher = _ssh_agent(cluster, "-o", "UserKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=yes")
    done, results = _bench(cluster, tmp_path, launcher, ["cluster"])
    line = _job_line(done)
    assert re.fullmatch(r"ERROR hpl\.job cluster \(2 nodes\) node\[01-02\] \(2\): cluster \(2 nodes\): launch failed: "
                        r"ssh from the launcher to \[127\.0\.1\.[12]\]:\d+: host key not in the launcher's "
                        r"known_hosts \(Host key verification failed\).*", line), line
    assert "known_hosts" in _remedy(results)


def test_mpiruns_ssh_with_a_key_the_nodes_refuse(ssh_cluster_factory, tmp_path: Path) -> None:
    cluster = ssh_cluster_factory(2)
    stranger = tmp_path / "stranger_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    launcher = _ssh_agent(cluster, "-o", "IdentitiesOnly=yes", "-i", str(stranger),
                          "-o", f"UserKnownHostsFile={cluster.known_hosts}", "-o", "IdentityAgent=none")
    done, results = _bench(cluster, tmp_path, launcher, ["cluster"])
    line = _job_line(done)
    assert re.search(r": launch failed: ssh from the launcher to \S+@127\.0\.1\.[12]: Permission denied \(publickey\)",
                     line), line
    assert "authorized_keys" in _remedy(results)


def test_a_missing_work_dir_and_a_missing_launcher(ssh_cluster_factory, tmp_path: Path) -> None:
    cluster = ssh_cluster_factory(2)
    done, results = _bench(cluster, tmp_path / "a", {"workdir": "/nonexistent/hc-scratch"}, ["node"])
    assert _job_line(done) == ("ERROR hpl.job node[01-02] (2): launch failed: cannot create the job work dir on the "
                               "launcher host: /nonexistent/hc-scratch: No such file or directory")
    assert "workdir" in _remedy(results)
    done, results = _bench(cluster, tmp_path / "b", {"binary": "/nonexistent/bin/mpirun"}, ["node"])
    assert _job_line(done) == ("ERROR hpl.job node[01-02] (2): launch failed: /nonexistent/bin/mpirun: command not "
                               "found on the launcher host")
