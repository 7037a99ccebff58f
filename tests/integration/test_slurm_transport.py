"""The slurm transport end to end: ``healthcheck run`` over a real slurmctld + two ``slurmd -N`` nodes.

Both slurmd run on this machine, so the node's real ``hostname`` is this machine's name. A ``hostname``
shim first on PATH (srun exports the environment into the step) prints ``$SLURMD_NODENAME``, the name
slurmd gives the task: a PASS proves the command ran inside a Slurm step on that very node. A ``uname``
shim hangs on node02 only, to show a hung command times out per command while the rest still report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from healthcheck.store.bundle import read_host
from healthcheck.store.results import expanded_document
from tests.slurmd import SlurmdCluster, missing_tools

pytestmark = [pytest.mark.slurm, pytest.mark.skipif(bool(missing_tools()),
                                                    reason=f"slurmd cluster needs: {missing_tools()}")]

_HOSTNAME = '#!/bin/sh\n# test shim: the Slurm node this step runs on\necho "$SLURMD_NODENAME"\n'
_UNAME = ('#!/bin/sh\n# test shim: uname hangs on node02\n'
          '[ "$SLURMD_NODENAME" = node02 ] && exec sleep 600\nexec /bin/uname "$@"\n')


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    with SlurmdCluster.start(tmp_path_factory.mktemp("slurmd"), names=("node01", "node02"), cpus=8) as cluster:
        yield cluster


def _shims(folder: Path) -> Path:
    folder.mkdir()
    for name, text in (("hostname", _HOSTNAME), ("uname", _UNAME)):
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    return folder


def _run(slurm: SlurmdCluster, tmp_path: Path, hosts: dict, *extra: str) -> tuple[int, dict, str]:
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"defaults": {"profile": "h100-sxm5-8x"}, "hosts": hosts}))
    run_dir = tmp_path / "run"
    env = {**os.environ, **slurm.env, "PATH": f"{_shims(tmp_path / 'bin')}:{os.environ['PATH']}"}
    proc = subprocess.run([sys.executable, "-m", "healthcheck", "run", "-i", str(inv), "--run-dir", str(run_dir),
                           "--probes", "system", "--timeout", "3", "--connect-timeout", "3", *extra],
                          capture_output=True, text=True, timeout=180, env=env)
    results_file = run_dir / "results.json"
    assert results_file.is_file(), proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.returncode, expanded_document(run_dir), proc.stdout + proc.stderr


def _finding(results: dict, host: str, check: str) -> dict:
    return next(f for f in results["hosts"][host]["findings"] if f["check"] == check)


@pytest.mark.parametrize("mode", ["step", "per-host"])
def test_system_probe_through_srun_and_a_hung_command_times_out(slurm: SlurmdCluster, tmp_path: Path,
                                                                mode: str) -> None:
    # node01 is reached under another inventory name through slurm_node (srun to that name would fail)
    hosts = {"node01.cluster.example": {"transport": "slurm", "slurm_node": "node01"},
             "node02": {"transport": "slurm"}}
    _, results, out = _run(slurm, tmp_path, hosts, "--slurm-mode", mode)
    for host, node in (("node01.cluster.example", "node01"), ("node02", "node02")):
        hostname = _finding(results, host, "system.hostname")
        assert (hostname["status"], hostname["value"]) == ("PASS", node), out
        reach = _finding(results, host, "host.reachable")
        assert (reach["status"], reach["source"]) == ("PASS", "slurm"), reach
        assert (tmp_path / "run" / "raw" / host / "hostname.out").read_text() == f"{node}\n"
    # uname -r hung on node02: killed by its own 3 s timeout, the host itself stays reachable
    raw = tmp_path / "run" / "raw"
    assert (raw / "node01.cluster.example" / "uname-r.out").read_text() == os.uname().release + "\n"
    assert (raw / "node02" / "uname-r.rc").read_text().strip() == "124"
    assert (raw / "node02" / "uname-r.out").read_text() == ""
    host_json = json.loads((raw / "node02" / "_host.json").read_text())
    assert host_json["transport_error"] is None
    assert host_json["commands"]["uname-r"]["timed_out"] is True, host_json
    assert read_host(raw / "node02").results["os-release"].rc == 0  # the commands after it still ran
    # the allocations were released: no job left behind
    assert slurm.tool("squeue", "-h", check=False).stdout.strip() == ""


DRAINED = {
    "per-host": ("Slurm refused an allocation on node02: node state drained (reason: gpu3 fell off the bus); "
                 "srun: Unable to allocate resources: Requested nodes are busy"),
    "step": "Slurm node node02 left out of the sweep's job step: node state drained (reason: gpu3 fell off the bus)",
}
UNKNOWN = {
    "per-host": ("Slurm does not know node node09 (set the host var slurm_node?); "
                 "srun: Unable to allocate resources: Invalid node name specified"),
    "step": "Slurm does not know node node09 (set the host var slurm_node?)",
}


@pytest.mark.parametrize("mode", ["step", "per-host"])
def test_drained_and_unknown_nodes_are_prompt_reachability_errors(slurm: SlurmdCluster, tmp_path: Path,
                                                                  mode: str) -> None:
    slurm.tool("scontrol", "update", "NodeName=node02", "State=DRAIN", "Reason=gpu3 fell off the bus")
    try:
        # the inventory says ssh; --transport slurm overrides it for every host
        hosts = {"node01": {}, "node02": {}, "node09": {}}
        rc, results, out = _run(slurm, tmp_path, hosts, "--transport", "slurm", "--slurm-mode", mode)
    finally:
        slurm.tool("scontrol", "update", "NodeName=node02", "State=RESUME")
    assert rc == 1, out
    assert _finding(results, "node01", "system.hostname")["value"] == "node01"
    drained = _finding(results, "node02", "host.reachable")
    assert drained["status"] == "ERROR" and drained["source"] == "slurm"
    assert drained["value"] == DRAINED[mode]
    assert drained["remedy"].startswith("Check the node in Slurm")
    unknown = _finding(results, "node09", "host.reachable")
    assert unknown["status"] == "ERROR"
    assert unknown["value"] == UNKNOWN[mode]
    for host in ("node02", "node09"):  # nothing ran there: reachability is the host's only finding
        assert [f["check"] for f in results["hosts"][host]["findings"]] == ["host.reachable"]
    assert slurm.tool("squeue", "-h", check=False).stdout.strip() == ""


@pytest.mark.parametrize("mode", ["step", "per-host"])
def test_node_busy_with_a_job_is_skipped_not_failed(slurm: SlurmdCluster, tmp_path: Path, mode: str) -> None:
    """A nightly sweep leaves nodes running someone's exclusive job alone: SKIP saying why (not a fault, never
    drained), but the node was not checked, so the run does not exit 0 (nothing checked is never PASS)."""
    job = slurm.tool("sbatch", "--parsable", "--exclusive", "-w", "node02", "-J", "someones-training",
                     f"--output={tmp_path / 'job.out'}",
                     "--wrap", "sleep 120").stdout.strip().split(";")[0]
    try:
        for _ in range(100):  # bounded wait for the job to start
            if slurm.tool("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.strip() == "RUNNING":
                break
            time.sleep(0.1)
        rc, results, out = _run(slurm, tmp_path, {"node01": {"transport": "slurm"}, "node02": {"transport": "slurm"}},
                                "--slurm-mode", mode)
    finally:
        slurm.tool("scancel", job, check=False)
    busy = _finding(results, "node02", "host.reachable")
    assert busy["status"] == "SKIP" and "running a job" in busy["message"] and "allocated" in busy["message"]
    assert results["hosts"]["node02"]["verdict"] == "SKIP"
    assert results["hosts"]["node01"]["verdict"] == "PASS"
    assert rc == 1, out
    assert "not checked (SKIP, exit code stays non-zero): node02" in out
