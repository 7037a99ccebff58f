"""End to end over real sshd test hosts: a GPU that is fine at rest but hits HW Slowdown under load.

``healthcheck run --probes dcgm_fields --benchmarks nccl`` samples the DCGM fields at rest, then launches
single-node nccl-tests through the real benchmark path (launch script, ssh transport, ``mpirun`` shim
that replays our own nccl-tests fixture after a short sleep) while ``run.telemetry`` samples
the same fields on the node. The ``dcgmi`` shim answers the at-rest call (``-c 5``) with a healthy
idle table and the under-load call with our HPL-load fixtures: node02's gpu5 shows the HW Slowdown
clock event bit, node01 and node03 do not. Then the run is re-graded by ``--replay``.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from healthcheck.probes.dmon_parse import DEFAULT_FIELD_IDS
from healthcheck.store.results import expanded_document
from tests.conftest import fixture_text

pytestmark = pytest.mark.sshd

NODE_OK = "nccl-tests/all_reduce-h100-1node-8gpu-healthy-476GBs-8G-16G.txt"
REST = "dcgmi-dmon/h100-8gpu-rest-healthy.txt"
LOAD = {"node01": "dcgmi-dmon/h100-8gpu-hpl-load-healthy.txt",
        "node02": "dcgmi-dmon/h100-8gpu-hpl-load-gpu5-hw-slowdown.txt",
        "node03": "dcgmi-dmon/h100-8gpu-hpl-load-healthy.txt"}


def body(rel: str) -> str:
    return fixture_text(rel).split("\n", 1)[1]


def install_dcgmi(cluster, host: str, load_fixture: str) -> None:
    """``dcgmi`` on ``host``: ``discovery`` succeeds; ``dmon -c 5`` (at rest) replays the idle table, any
    other ``dmon`` (the sampler sized to the job timeout) the load table; anything else fails."""
    target = cluster.host(host)
    rest, load = target.root / "dmon-rest.out", target.root / "dmon-load.out"
    rest.write_text(body(REST))
    load.write_text(body(load_fixture))
    ids = ",".join(map(str, DEFAULT_FIELD_IDS))
    shim = target.bindir / "dcgmi"
    shim.write_text("#!/bin/sh\n"
                    f"printf '%s\\n' \"$*\" >> {shlex.quote(str(target.root / 'dcgmi.log'))}\n"
                    "case \"$*\" in\n"
                    "  'discovery -l') echo '8 GPUs found.'; exit 0;;\n"
                    f"  'dmon -e {ids} -c 5 -d 1000') cat {shlex.quote(str(rest))};;\n"
                    f"  'dmon -e {ids} -c '*) cat {shlex.quote(str(load))};;\n"
                    "  *) echo \"dcgmi shim: unsupported arguments: $*\" >&2; exit 2;;\n"
                    "esac\n")
    shim.chmod(0o755)


def healthcheck(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "healthcheck", *map(str, args)], capture_output=True, text=True,
                          timeout=240)


def findings_of(run_dir: Path, prefix: str) -> dict[str, list[dict]]:
    results = expanded_document(run_dir)
    return {name: [f for f in host["findings"] if f["check"].startswith(prefix)]
            for name, host in results["hosts"].items()}


def test_hw_slowdown_under_load_names_node02_gpu5(ssh_cluster_factory, tmp_path: Path) -> None:
    cluster = ssh_cluster_factory(3)
    for host in cluster.hosts:
        install_dcgmi(cluster, host.name, LOAD[host.name])
        cluster.add_tool(host.name, "mpirun", {"*": (body(NODE_OK), 0, 2)})  # the "benchmark": 2 s, then output
    inv = cluster.write_inventory(tmp_path / "inv.yaml", profile="h100-sxm5-8x")
    run_dir = tmp_path / "run"
    proc = healthcheck("run", "-i", inv, "-F", cluster.ssh_config, "--run-dir", run_dir,
                       "--probes", "dcgm_fields", "--benchmarks", "nccl", "--plan", "quick")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    load = findings_of(run_dir, "telemetry.")
    rest = findings_of(run_dir, "dcgm_fields.")

    # node02's gpu5 throttles under load, and only there: at rest all three nodes pass
    bad = sorted((h, f["check"], f["component"], f["status"], f["value"]) for h, fs in load.items() for f in fs
                 if f["status"] != "PASS")
    assert bad == [("node02", "telemetry.clock_event.hw_slowdown", "gpu5", "FAIL", 10),
                   ("node02", "telemetry.sm_clock.fleet_ratio", "gpu5", "WARN", 0.523),
                   ("node02", "telemetry.sm_clock.node_ratio", "gpu5", "WARN", 0.523)]
    slow = next(f for f in load["node02"] if f["check"] == "telemetry.clock_event.hw_slowdown")
    assert slow["message"].startswith("gpu5: ") and "during nccl-all_reduce_perf-node-node02" in slow["message"]
    assert slow["source"] == "telemetry-nccl-all_reduce_perf-node-node02" and slow["remedy"]
    for h in ("node01", "node03"):
        hw = [f for f in load[h] if f["check"] == "telemetry.clock_event.hw_slowdown"]
        assert [(f["component"], f["status"]) for f in hw] == [("node", "PASS")]
    for h, fs in rest.items():
        assert [f for f in fs if f["status"] != "PASS"] == [], h
        assert any(f["check"] == "dcgm_fields.clock_event.hw_slowdown" and f["status"] == "PASS" for f in fs)

    # the series is kept raw (replayable), summarized in the observations and charted in the report
    raw = (run_dir / "raw" / "_telemetry" / "nccl-all_reduce_perf-node-node02" / "node02.out").read_text()
    assert raw.startswith("healthcheck-sampler: dcgmi interval_ms=") and "#Entity" in raw
    meta = json.loads((run_dir / "raw" / "_telemetry" / "nccl-all_reduce_perf-node-node02" / "node02.json")
                      .read_text())
    assert meta["rc"] == 0 and meta["job"]["hosts"] == ["node02"] and meta["transport_error"] is None
    results = expanded_document(run_dir)
    view = results["hosts"]["node02"]["observations"]["telemetry"]["jobs"][0]
    assert view["gpus"][5]["throttle_s"]["hw_slowdown"] == 10 and view["limits"] == {"gpu_temp_c": 89, "power_w": 700}
    assert results["hosts"]["node02"]["observations"]["dcgm_fields"]["rounds"] == 5
    report = (run_dir / "report.html").read_text()
    assert "telemetry under load (1 job)" in report and "HW throttling on gpu5" in report
    assert '<svg class="chart fixed"' in report and "limit 89" in report  # inline SVG, limit drawn
    log = (cluster.host("node02").root / "dcgmi.log").read_text().splitlines()
    assert sum(line.startswith("dmon ") for line in log) == 2  # once at rest, once under load

    # replay: the same telemetry and at-rest verdicts from raw/ with every sshd stopped
    cluster.stop()
    replay_dir = tmp_path / "replay"
    proc = healthcheck("run", "--replay", run_dir, "--run-dir", replay_dir, "--probes", "dcgm_fields")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]

    def verdicts(run: Path) -> Counter:
        return Counter((h, f["check"], f["component"], f["status"], f["value"])
                       for prefix in ("telemetry.", "dcgm_fields.")
                       for h, fs in findings_of(run, prefix).items() for f in fs)

    assert verdicts(replay_dir) == verdicts(run_dir)
