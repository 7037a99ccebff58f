"""End to end over three real sshd test hosts: IB ports, DCGM, mounts and fleet version consistency.

node02 has a port at 2X width, one at HDR speed and one Down, older HCA firmware and another driver
than node01/node03; node03 has a mount whose ``stat`` blocks and no dcgmi. The sweep must name the
ports, the majority version and the outlier host in results.json, and skip DCGM on node03.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from healthcheck.store.results import expanded_document
from tests.conftest import fixture_text
from tests.sshhosts import BASE_PATH

pytestmark = pytest.mark.sshd
PROBES = "system,infiniband,versions,dcgm"


def own(rel: str) -> str:
    return fixture_text(rel).split("\n", 1)[1]


def real(tool: str) -> str:
    return shutil.which(tool, path=BASE_PATH) or f"/usr/bin/{tool}"


def shim(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def fake_sysfs(host, sysfs_text: str) -> None:
    """ib-sysfs (read by infiniband, and by versions for the HCA firmware) greps /sys/class/infiniband
    after an ls: answer both from a fixture."""
    dump = host.root / "sysfs-infiniband.txt"
    dump.write_text(sysfs_text)
    grep, ls = real("grep"), real("ls")
    shim(host.bindir / "grep", f"""case "$*" in
  *"/sys/class/infiniband/"*) exec {grep} -v '^#' {dump};;
  *) exec {grep} "$@";;
esac
""")
    shim(host.bindir / "ls", f"""case "$*" in
  "-d /sys/class/infiniband/*/ports") exit 0;;
  *) exec {ls} "$@";;
esac
""")


def nvidia_smi(cluster, host: str, driver: str) -> None:
    """The one nvidia-smi call of these probes: ``-q -x`` (driver, CUDA, VBIOS); anything else exits 2."""
    xml = fixture_text("nvidia-smi-xml/h100-8x-healthy.xml").replace("535.183.01", driver)
    cluster.add_tool(host, "nvidia-smi", {"-q -x": (xml, 0)})


def dcgmi(cluster, host: str) -> None:
    cluster.add_tool(host, "dcgmi", {
        "discovery -l": (own("dcgmi/discovery-l-8x-h100.txt"), 0),
        "diag -r 1 -j": (own("dcgmi/diag-r1-j-dcgm4.2-8x-h100-pass.json"), 0),
        "health -c -j": (own("dcgmi/health-c-j-healthy.json"), 0)})


def findings(results: dict, host: str, check: str) -> list[dict]:
    return [f for f in results["hosts"][host]["findings"] if f["check"] == check]


def test_ib_degraded_host_hung_mount_no_dcgmi_and_fleet_outliers(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(3)
    healthy = own("ib/sysfs-h100-8x-ndr-healthy.txt").replace("fw_ver:28.39.1002", "fw_ver:28.41.1000")
    fake_sysfs(cluster.host("node01"), healthy)
    fake_sysfs(cluster.host("node02"), own("ib/sysfs-h100-degraded-2x-hdr-down-symbol-errors.txt"))
    fake_sysfs(cluster.host("node03"), healthy)
    for name, driver in (("node01", "550.90.07"), ("node02", "550.54.15"), ("node03", "550.90.07")):
        nvidia_smi(cluster, name, driver)
    dcgmi(cluster, "node01")
    dcgmi(cluster, "node02")
    shim(cluster.host("node03").bindir / "stat",
         f'case "$*" in\n  "-f -c %T /") sleep 30;;\n  *) exec {real("stat")} "$@";;\nesac\n')
    inv = cluster.write_inventory(tmp_path / "inv.yaml", profile="h100-sxm5-8x")
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "healthcheck", "run", "-i", str(inv), "-F", str(cluster.ssh_config),
                           "--run-dir", str(run_dir), "--probes", PROBES], capture_output=True, text=True,
                          timeout=180)
    assert (run_dir / "results.json").is_file(), proc.stderr
    results = expanded_document(run_dir)
    assert proc.returncode == 1

    # node02: every bad port is named, with its measured rate
    rate = {f["component"]: f for f in findings(results, "node02", "ib.port.rate") if f["status"] == "FAIL"}
    assert set(rate) == {"mlx5_4/1", "mlx5_9/1", "mlx5_10/1"}
    assert rate["mlx5_4/1"]["value"] == "200 Gb/sec (2X NDR)"
    assert "width 2X instead of 4X" in rate["mlx5_4/1"]["message"]
    assert "speed HDR instead of NDR" in rate["mlx5_9/1"]["message"]
    down = [f for f in findings(results, "node02", "ib.port.state") if f["status"] == "FAIL"]
    assert [(f["component"], f["value"]) for f in down] == [("mlx5_10/1", "DOWN / Disabled")]
    assert {f["status"] for f in findings(results, "node01", "ib.port.rate")} == {"PASS"}
    # node01 is otherwise clean (these containers have no nvidia_peermem to find in /sys/module, and no
    # mlxlink: FEC/BER not read, said as a SKIP)
    noisy = {f["check"] for f in results["hosts"]["node01"]["findings"] if f["status"] != "PASS"}
    assert noisy <= {"ib.gpudirect_rdma", "ib.phy", "ib.phy.fec"}, noisy
    phy = [f for f in results["hosts"]["node01"]["findings"] if f["check"] == "ib.phy"]
    assert [(f["status"], f["message"].split(" (")[0]) for f in phy] == [("SKIP", "mlxlink not installed on the node")]
    assert {f["status"] for f in findings(results, "node01", "ib.phy.fec")} <= {"SKIP"}

    # fleet: node02's firmware and driver differ from the majority of the other two
    fw = next(f for f in findings(results, "node02", "fleet.version.hca_fw") if f["component"] == "MT4129")
    assert (fw["status"], fw["value"], fw["expected"]) == ("WARN", "28.39.1002", "28.41.1000")
    assert "differing: node02" in fw["message"] and "2 of 3 hosts" in fw["message"]
    driver = findings(results, "node02", "fleet.version.driver")[0]
    assert (driver["status"], driver["value"], driver["expected"]) == ("WARN", "550.54.15", "550.90.07")
    assert {(f["status"], f["value"], f["source"]) for f in findings(results, "node02", "version.cuda")} == \
        {("PASS", "12.2", "nvidia-smi-q-x")}
    assert {f["source"] for f in findings(results, "node02", "fleet.version.hca_fw")} == {"ib-sysfs"}
    for host in ("node01", "node03"):
        assert {f["status"] for f in findings(results, host, "fleet.version.hca_fw")} == {"PASS"}

    # node03: the blocking stat is cut off and reported; DCGM is skipped because dcgmi is absent
    hung = [f for f in findings(results, "node03", "system.mount.responsive") if f["status"] == "FAIL"]
    assert [(f["component"], f["value"]) for f in hung] == [("/", 124)]
    dcgm = [f for f in results["hosts"]["node03"]["findings"] if f["check"].startswith("dcgm.")]
    assert {f["status"] for f in dcgm} == {"SKIP"} and len(dcgm) == 3
    assert all("not installed" in f["message"] for f in dcgm)
    assert findings(results, "node01", "dcgm.diag")[0]["status"] == "PASS"
    assert findings(results, "node01", "dcgm.discovery.gpu_count")[0]["value"] == 8

    # the run directory is a capture bundle: replaying it re-grades to the same findings
    replay = subprocess.run([sys.executable, "-m", "healthcheck", "run", "--replay", str(run_dir),
                             "--run-dir", str(tmp_path / "replay"), "--probes", PROBES],
                            capture_output=True, text=True, timeout=120)
    again = expanded_document(tmp_path / "replay")
    assert replay.returncode == 1
    for host in ("node01", "node02", "node03"):
        def bad(doc: dict, host: str = host) -> list[tuple[str, str, str]]:
            return sorted((f["check"], f["component"], f["status"]) for f in doc["hosts"][host]["findings"]
                          if f["status"] != "PASS" and f["check"] != "host.reachable")
        assert bad(again) == bad(results)
