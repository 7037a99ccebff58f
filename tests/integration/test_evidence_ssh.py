"""--collect-evidence over real sshd test hosts: nvidia-bug-report.sh runs only on hosts that FAIL GPU checks,
bounded in time, and its report lands in the run directory, listed in results.json and linked in the report.

The nvidia-bug-report.sh on the nodes is a fake written by the test: like the real tool it honours
``--output-file FILE`` and writes ``FILE.gz``.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from healthcheck.core.model import Status
from healthcheck.store.results import load_results
from tests.conftest import fixture_text

pytestmark = pytest.mark.sshd

FAKE = """#!/bin/sh
[ "$1" = --output-file ] || { echo "usage: --output-file FILE" >&2; exit 2; }
{SLEEP}
printf 'Start of NVIDIA bug report log file (fake for healthcheck tests) on %s\\n' "$HC_TEST_HOST" | gzip -c > "$2.gz"
echo "Wrote $2.gz"
"""


def install_fake(cluster, host: str, sleep: str = "") -> None:
    path = cluster.host(host).bindir / "nvidia-bug-report.sh"
    path.write_text(FAKE.replace("{SLEEP}", sleep))
    path.chmod(0o755)


def test_bug_report_collected_from_failing_hosts_only(ssh_cluster_factory, tmp_path: Path):
    cluster = ssh_cluster_factory(3)
    xml = {"node01": "h100-8x-healthy.xml", "node02": "h100-8x-faulty.xml", "node03": "h100-8x-faulty.xml"}
    for host in cluster.hosts:
        cluster.add_tool(host.name, "nvidia-smi", {"-q -x": (fixture_text(f"nvidia-smi-xml/{xml[host.name]}"), 0)})
        install_fake(cluster, host.name, sleep="sleep 60" if host.name == "node03" else "")
    inv = cluster.write_inventory(tmp_path / "inv.yaml", profile="h100-sxm5-8x")
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "healthcheck", "run", "-i", str(inv), "-F", str(cluster.ssh_config),
         "--run-dir", str(run_dir), "--probes", "gpu", "--collect-evidence", "--evidence-timeout", "3"],
        capture_output=True, text=True, timeout=240)
    assert proc.returncode == 1, proc.stderr[-2000:]
    results = json.loads((run_dir / "results.json").read_text())
    entries = {e["host"]: e for e in results["evidence"]}
    assert set(entries) == {"node02", "node03"}                        # node01 passed: nothing collected
    ok = entries["node02"]
    assert (ok["status"], ok["path"]) == ("collected", "evidence/node02/nvidia-bug-report.log.gz")
    assert any(c.startswith("gpu.") for c in ok["checks"])
    text = gzip.decompress((run_dir / ok["path"]).read_bytes()).decode()
    assert "Start of NVIDIA bug report log file" in text and "node02" in text
    assert entries["node03"]["status"] == "failed" and "timed out after 3 s" in entries["node03"]["reason"]
    every = load_results(run_dir).hosts      # results.json keeps non-PASS findings; the table has them all
    finding = {h: [f.status for f in every[h].findings if f.check == "evidence.bug_report"]
               for h in ("node01", "node02", "node03")}
    assert finding == {"node01": [], "node02": [Status.PASS], "node03": [Status.WARN]}
    html = (run_dir / "report.html").read_text()
    assert 'id="evidence"' in html and 'href="evidence/node02/nvidia-bug-report.log.gz"' in html
