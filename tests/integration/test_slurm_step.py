"""One Slurm job step for a whole sweep, on a real slurmctld + 16 ``slurmd -N`` nodes on loopback.

Tool shims first on PATH (srun exports the environment into the step): ``hostname`` prints
``$SLURMD_NODENAME``; ``nvidia-smi -q -x`` prints our own healthy H100 fixture, except on node05, where
it prints every byte value 0-255 plus lines that imitate the framing (binary output must arrive
byte-exact and be a parse ERROR, not a forged section), and on node09, where it hangs past the step
deadline. node16 is drained by an "admin" before the sweep.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from healthcheck.store.results import expanded_document
from tests.conftest import FIXTURES
from tests.slurmd import SlurmdCluster, missing_tools

pytestmark = [pytest.mark.slurm, pytest.mark.skipif(bool(missing_tools()),
                                                    reason=f"slurmd cluster needs: {missing_tools()}")]

NODES = tuple(f"node{i:02d}" for i in range(1, 17))
HEALTHY_XML = FIXTURES / "nvidia-smi-xml" / "h100-8x-healthy.xml"
BINARY = bytes(range(256)) * 4 + b"\n@@HC-0000 END nvidia-smi-q-x\n\x00\n@@HC-0000 BEGIN hostname rc=0 out=3 err=0\n"


def _shims(folder: Path) -> Path:
    folder.mkdir()
    (folder / "binary.out").write_bytes(BINARY)
    tools = {
        "hostname": '#!/bin/sh\necho "$SLURMD_NODENAME"\n',
        "nvidia-smi": ("#!/bin/sh\n# test shim: node05 prints binary, node09 hangs past the step deadline\n"
                       f'case "$SLURMD_NODENAME" in node05) exec cat {folder / "binary.out"};;\n'
                       "  node09) exec sleep 300;;\nesac\n"
                       f'[ "$*" = "-q -x" ] && exec cat {HEALTHY_XML}\nexit 2\n'),
    }
    for name, text in tools.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    return folder


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    base = tmp_path_factory.mktemp("step")
    with SlurmdCluster.start(base / "slurm", names=NODES, cpus=1) as cluster:
        cluster.scontrol("update", "NodeName=node16", "State=DRAIN", "Reason=bios update")
        inv = base / "inv.yaml"
        inv.write_text(yaml.safe_dump({"defaults": {"profile": "h100-sxm5-8x", "transport": "slurm"},
                                       "hosts": {n: {} for n in NODES}}))
        env = {**os.environ, **cluster.env, "PATH": f"{_shims(base / 'bin')}:{os.environ['PATH']}"}
        log = cluster.base / "log" / "slurmctld.log"
        allocations_before = log.read_text().count("_slurm_rpc_allocate_resources JobId=")
        proc = subprocess.run([sys.executable, "-m", "healthcheck", "run", "-i", str(inv), "--run-dir",
                               str(base / "run"), "--probes", "system,gpu", "--timeout", "60", "--deadline", "25",
                               "--connect-timeout", "5"], capture_output=True, text=True, timeout=300, env=env)
        for _ in range(100):  # bounded: the step is cancelled once the deadline passed
            if cluster.tool("squeue", "-h", check=False).stdout.strip() == "":
                break
            time.sleep(0.2)
        allocations = re.findall(r"_slurm_rpc_allocate_resources JobId=(\d+) NodeList=(\S+)",
                                 log.read_text())[allocations_before:]
        yield {"proc": proc, "run": base / "run", "base": base, "cluster": cluster, "allocations": allocations,
               "squeue": cluster.tool("squeue", "-h", check=False).stdout.strip()}


def _results(run: Path) -> dict:
    return expanded_document(run)  # results.json keeps only non-PASS findings; the table has them all


def _finding(results: dict, host: str, check: str) -> dict:
    return next(f for f in results["hosts"][host]["findings"] if f["check"] == check)


def test_one_job_for_the_whole_sweep(sweep: dict) -> None:
    assert len(sweep["allocations"]) == 1, sweep["allocations"]  # the controller saw ONE allocation
    job_id, nodelist = sweep["allocations"][0]
    assert nodelist == "node[01-15]"
    steps = json.loads((sweep["run"] / "slurm-step" / "steps.json").read_text())
    assert [(s["job_ids"], s["nodes"], s["node_count"]) for s in steps] == [([job_id], "node[01-15]", 15)]
    assert "--ntasks-per-node=1" in steps[0]["argv"] and "--nodes=15" in steps[0]["argv"]
    assert sweep["squeue"] == ""  # nothing left running after the deadline
    assert sorted(p.name for p in (sweep["run"] / "slurm-step").iterdir()) == ["steps.json"]


def test_every_node_graded_with_its_own_bytes(sweep: dict) -> None:
    results, raw = _results(sweep["run"]), sweep["run"] / "raw"
    assert sweep["proc"].returncode == 1
    healthy = [n for n in NODES if n not in ("node05", "node09", "node16")]
    for node in healthy:
        assert results["hosts"][node]["verdict"] == "PASS", [
            f for f in results["hosts"][node]["findings"] if f["status"] not in ("PASS", "SKIP")]
        assert _finding(results, node, "system.hostname")["value"] == node
        assert (raw / node / "nvidia-smi-q-x.out").read_bytes() == HEALTHY_XML.read_bytes()
    assert (raw / "node05" / "nvidia-smi-q-x.out").read_bytes() == BINARY
    assert (raw / "node05" / "hostname.out").read_bytes() == b"node05\n"  # the forged header did not count
    assert _finding(results, "node05", "gpu.parse")["status"] == "ERROR"


def test_hung_node_is_error_named_and_the_rest_kept(sweep: dict) -> None:
    results = _results(sweep["run"])
    hung = _finding(results, "node09", "host.reachable")
    assert hung["status"] == "ERROR"
    assert hung["message"].startswith("node09: host deadline of 25s exceeded (while running nvidia-smi-q-x")
    assert _finding(results, "node09", "system.hostname")["value"] == "node09"  # what finished before is kept
    gpu = _finding(results, "node09", "gpu.collect")
    assert gpu["status"] == "ERROR" and "while running nvidia-smi-q-x" in gpu["message"]


def test_drained_node_left_out_before_submission(sweep: dict) -> None:
    drained = _finding(_results(sweep["run"]), "node16", "host.reachable")
    assert (drained["status"], drained["value"]) == (
        "ERROR", "Slurm node node16 left out of the sweep's job step: node state drained (reason: bios update)")
    assert drained["remedy"].startswith("Check the node in Slurm")


def test_replay_gives_the_same_verdicts(sweep: dict) -> None:
    again = sweep["base"] / "replay"
    proc = subprocess.run([sys.executable, "-m", "healthcheck", "run", "--replay", str(sweep["run"]),
                           "--run-dir", str(again), "--probes", "system,gpu"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    first, second = _results(sweep["run"]), _results(again)

    def verdicts(results: dict) -> dict:
        return {h: (r["verdict"], sorted((f["check"], f["component"], f["status"]) for f in r["findings"]
                                         if f["check"] != "host.reachable"))
                for h, r in results["hosts"].items()}

    assert verdicts(second) == verdicts(first)
