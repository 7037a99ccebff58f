"""End to end over real sshd test hosts: one host with an inactive NVLink, one with an Xid 79.

Tool shims (``nvidia-smi``, ``systemctl``, ``journalctl``) replay our own fixtures by argv; the
journal's timestamps are moved to an hour ago so the Xid falls inside the 24 h window.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from healthcheck.store.results import expanded_document
from tests.conftest import fixture_text

pytestmark = pytest.mark.sshd

STAMP = re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d", re.M)


def body(rel: str) -> str:
    return fixture_text(rel).split("\n", 1)[1]


def recent_journal(rel: str) -> str:
    """The fixture with every line stamped one hour ago (journalctl -o short --utc layout)."""
    stamp = (datetime.now(timezone.utc) - timedelta(hours=1)).strftime("%b %d %H:%M:%S")
    return STAMP.sub(stamp, body(rel))


def nvidia_smi(status_fixture: str) -> dict[str, tuple[str, int]]:
    """Only these argv are answered (anything else exits 2): fabric state, the Xid PCI map and the
    row-remap state all come from the one ``-q -x`` report (gpu2 at 00000000:4C:00.0)."""
    return {
        "-q -x": (fixture_text("nvidia-smi-xml/h100-8x-healthy.xml"), 0),
        "topo -m": (body("topo/h100-8gpu-nv18-8nic-pxb-healthy.txt"), 0),
        "nvlink -s": (body(status_fixture), 0),
        "nvlink -e": (body("nvlink/h100-8gpu-errors-all-zero.txt"), 0),
    }


def test_inactive_nvlink_and_xid79_named_in_results(ssh_cluster_factory, tmp_path: Path):
    cluster = ssh_cluster_factory(3)
    statuses = {"node01": "nvlink/h100-8gpu-status-18links-healthy.txt",
                "node02": "nvlink/h100-8gpu-status-gpu3-link5-inactive-gpu6-link2-1.562.txt",
                "node03": "nvlink/h100-8gpu-status-18links-healthy.txt"}
    journals = {"node01": "xid/journalctl-k-healthy.txt", "node02": "xid/journalctl-k-healthy.txt",
                "node03": "xid/journalctl-k-xid79-gpu2.txt"}
    for host in cluster.hosts:
        cluster.add_tool(host.name, "nvidia-smi", nvidia_smi(statuses[host.name]))
        cluster.add_tool(host.name, "systemctl", {"is-active nvidia-fabricmanager": ("active\n", 0)})
        cluster.add_tool(host.name, "journalctl", {"*": (recent_journal(journals[host.name]), 0)})
    inv = cluster.write_inventory(tmp_path / "inv.yaml", profile="h100-sxm5-8x")
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "healthcheck", "run", "-i", str(inv), "-F", str(cluster.ssh_config),
         "--run-dir", str(run_dir), "--probes", "topology,nvlink,fabric,xid"],
        capture_output=True, text=True, timeout=180)
    results = expanded_document(run_dir)
    assert proc.returncode == 1, proc.stderr[-2000:]
    hosts = results["hosts"]
    assert hosts["node01"]["verdict"] == "PASS", [f for f in hosts["node01"]["findings"] if f["status"] != "PASS"]
    checks1 = {f["check"] for f in hosts["node01"]["findings"]}
    assert {"topology.gpu_pair.nvlink", "topology.gpu_nic.pcie", "nvlink.links", "nvlink.errors.replay",
            "fabric.manager", "fabric.state", "xid.events"} <= checks1

    bad2 = {(f["check"], f["component"]): f for f in hosts["node02"]["findings"] if f["status"] != "PASS"}
    assert hosts["node02"]["verdict"] == "FAIL"
    assert set(bad2) == {("nvlink.link.active", "gpu3 link 5"), ("nvlink.links", "gpu3"),
                         ("nvlink.link.speed_gbps", "gpu6 link 2")}
    assert bad2[("nvlink.link.active", "gpu3 link 5")]["status"] == "FAIL"
    assert "gpu3 link 5 is <inactive>" in bad2[("nvlink.link.active", "gpu3 link 5")]["message"]
    assert bad2[("nvlink.links", "gpu3")]["value"] == 17

    bad3 = [f for f in hosts["node03"]["findings"] if f["status"] != "PASS"]
    assert hosts["node03"]["verdict"] == "FAIL"
    assert [(f["check"], f["component"], f["status"], f["value"]) for f in bad3] == [("xid.79", "gpu2", "FAIL", 1)]
    assert "PCI 0000:4c:00" in bad3[0]["message"] and "reboot node" in bad3[0]["message"]

    # nvidia-smi -q -x ran once per host, for fabric and xid alike; no other nvidia-smi query
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert sorted(c["id"] for c in manifest["commands"] if c["line"].startswith("nvidia-smi")) == \
        ["nvidia-smi-nvlink-e", "nvidia-smi-nvlink-s", "nvidia-smi-q-x", "nvidia-smi-topo"]
    assert {f["source"] for f in hosts["node01"]["findings"] if f["check"] == "fabric.state"} == {"nvidia-smi-q-x"}

    # the raw capture holds exactly what the node returned, header included
    raw = (run_dir / "raw" / "node03" / "kernel-log.out").read_text()
    assert raw.startswith("# kernel-log source=journalctl uptime_s=")
    assert hosts["node03"]["observations"]["xid"]["log"]["groups"][0]["code"] == 79
