"""The sdc benchmark end to end over real sshd test hosts with its NumPy implementation: the node program is
shipped with the job, run directly on each node, and node02, made to flip one bit of one result
(``HEALTHCHECK_SDC_INJECT`` set by a ``python-sdc`` wrapper on that node only), is the host named FAIL."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from healthcheck.store.results import load_results

pytestmark = pytest.mark.sshd


def python_wrapper(cluster, host: str, inject: str | None) -> None:
    """``python-sdc`` on the node (the profile setting ``sdc.python``) is the test's interpreter, which has
    NumPy; node02's also flips a bit. (A wrapper named python3 would lose to the login shell's PATH.)"""
    path = cluster.host(host).bindir / "python-sdc"
    env = f"HEALTHCHECK_SDC_INJECT={inject} " if inject else ""
    path.write_text(f"#!/bin/sh\nexec env {env}{sys.executable} \"$@\"\n")
    path.chmod(0o755)


def test_flipped_bit_names_the_host_and_device(ssh_cluster_factory, tmp_path: Path):
    pytest.importorskip("numpy")
    cluster = ssh_cluster_factory(3)
    for host in cluster.hosts:
        python_wrapper(cluster, host.name, "1:4242:7" if host.name == "node02" else None)
    settings = {"benchmarks": {"sdc": {"impl": "numpy", "size": 128, "devices": 2, "python": "python-sdc"}}}
    inv = cluster.write_inventory(tmp_path / "inv.yaml", profile="h100-sxm5-8x",
                                  host_vars={h.name: settings for h in cluster.hosts})
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "healthcheck", "run", "-i", str(inv), "-F", str(cluster.ssh_config),
         "--run-dir", str(run_dir), "--probes", "system", "--benchmarks", "sdc"],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    hosts = load_results(run_dir).hosts      # results.json keeps non-PASS findings; the table has them all
    sdc = {h: [(f.check, f.component, f.status.value) for f in v.findings if f.check.startswith("sdc.")]
           for h, v in hosts.items()}
    assert sdc["node02"] == [("sdc.checksum", "cpu1", "FAIL")]
    assert sdc["node01"] == sdc["node03"] == [("sdc.checksum", "node", "PASS")]
    bad = next(f for f in hosts["node02"].findings if f.check == "sdc.checksum")
    assert "majority of 6 identical devices" in bad.message and "silent data corruption" in bad.message
    out = (run_dir / "raw" / "_jobs" / "sdc-sdc-node-node02.out").read_text()
    assert "impl=numpy" in out and "# healthcheck-sdc end" in out        # the raw job output is kept
