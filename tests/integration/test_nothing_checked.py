"""Nothing checked is never PASS: one test per entry point (run over sshd, --local, slurm, replay, bench,
sweep) and the empty selection. Each case used to exit 0 with a PASS host although no check ran on
output from it; each now gets ``host.checked`` ERROR naming why, and exit 1 (exit 2 for a selection
that matches no host). Every case is paired with the same entry point where a check did run (exit 0).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from healthcheck.core.model import Finding, Status, host_verdict
from healthcheck.core.verdicts import nothing_checked, run_exit_status
from healthcheck.store.results import HostResult, RunResults

ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def healthcheck(*args: object, env: dict | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "healthcheck", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env or ENV)


def results_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def checked(results: dict, host: str) -> dict:
    return next(f for f in results["hosts"][host]["findings"] if f["check"] == "host.checked")


def bundle(tmp_path: Path) -> Path:
    """A hand-made capture bundle: one host with the system probe's outputs only (no GPU tool output)."""
    host = tmp_path / "bundle" / "raw" / "gpu001"
    host.mkdir(parents=True)
    outputs = {"hostname": "gpu001\n", "uname-r": "5.15.0-1053-nvidia\n", "uptime": "91234.50 2871234.12\n",
               "os-release": 'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\nID=ubuntu\n'}
    for command_id, text in outputs.items():
        (host / f"{command_id}.out").write_text(text)
        (host / f"{command_id}.rc").write_text("0\n")
    return tmp_path / "bundle"


# --- the rule itself --------------------------------------------------------------------------------

def test_reachable_is_not_a_check_and_an_empty_selection_never_exits_0() -> None:
    reach = Finding(host="a", check="host.reachable", status=Status.PASS, message="12 commands collected in 1s")
    skip = Finding(host="a", check="dcgm.collect", status=Status.SKIP, message="dcgmi-diag: command not found")
    graded = Finding(host="a", check="system.hostname", status=Status.PASS, message="hostname a")
    assert host_verdict([reach, skip]) is Status.ERROR
    assert host_verdict([reach, skip, graded]) is Status.PASS
    assert host_verdict([skip]) is Status.SKIP
    hosts = {"a": HostResult(name="a", findings=[reach, skip])}
    [added] = nothing_checked(hosts)
    assert (added.check, added.status) == ("host.checked", Status.ERROR)
    assert added.message.startswith("nothing was checked on a: host.reachable: 12 commands collected in 1s; "
                                    "dcgm.collect: dcgmi-diag: command not found")
    assert run_exit_status(RunResults(run={}, hosts=hosts), strict=False) == 1
    assert run_exit_status(RunResults(run={}, hosts={}), strict=False) == 1
    assert run_exit_status(RunResults(run={}, hosts={"a": HostResult(name="a", findings=[graded])}), False) == 0
    busy = {"b": HostResult(name="b", findings=[Finding(host="b", check="host.reachable", status=Status.SKIP,
                                                         message="not checked, the node is running a job")])}
    assert nothing_checked(busy) == [] and busy["b"].verdict is Status.SKIP
    assert run_exit_status(RunResults(run={}, hosts=busy), strict=False) == 1


# --- run over sshd ------------------------------------------------------------------------------------

@pytest.mark.sshd
def test_run_over_ssh_with_only_absent_tools_is_error(ssh_cluster_factory, tmp_path: Path) -> None:
    cluster = ssh_cluster_factory(1)
    inv = cluster.write_inventory(tmp_path / "inv.yaml")
    proc = healthcheck("run", "-i", inv, "-F", cluster.ssh_config, "--run-dir", tmp_path / "r", "--probes", "dcgm")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    results = results_of(tmp_path / "r")
    assert results["hosts"]["node01"]["verdict"] == "ERROR"
    assert "dcgm.diag skipped: dcgmi is not installed on this node" in checked(results, "node01")["message"]
    ok = healthcheck("run", "-i", inv, "-F", cluster.ssh_config, "--run-dir", tmp_path / "ok", "--probes", "system")
    assert ok.returncode == 0, ok.stdout + ok.stderr


# --- --local ------------------------------------------------------------------------------------------

def test_local_run_with_only_absent_tools_is_error(tmp_path: Path) -> None:
    env = {**ENV, "PATH": "/usr/bin:/bin"}  # no dcgmi here (a CI box, not a GPU node)
    if any((Path(d) / "dcgmi").exists() for d in env["PATH"].split(":")):
        pytest.skip("dcgmi is installed on this machine")
    proc = healthcheck("run", "--local", "--probes", "dcgm", "--run-dir", tmp_path / "r", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    results = results_of(tmp_path / "r")
    [host] = results["hosts"]
    assert results["hosts"][host]["verdict"] == "ERROR"
    assert checked(results, host)["status"] == "ERROR"


# --- replay and sweep ---------------------------------------------------------------------------------

def test_replay_of_a_bundle_without_the_probes_outputs_is_error(tmp_path: Path) -> None:
    source = bundle(tmp_path)
    proc = healthcheck("run", "--replay", source, "--probes", "gpu,nvlink", "--run-dir", tmp_path / "r")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    results = results_of(tmp_path / "r")
    assert results["hosts"]["gpu001"]["verdict"] == "ERROR"
    assert "gpu.collect: no output for nvidia-smi-q-x" in checked(results, "gpu001")["message"]
    ok = healthcheck("run", "--replay", source, "--probes", "system", "--run-dir", tmp_path / "ok")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert results_of(tmp_path / "ok")["hosts"]["gpu001"]["verdict"] == "PASS"


def test_sweep_of_a_bundle_without_the_probes_outputs_is_error(tmp_path: Path) -> None:
    proc = healthcheck("sweep", "--replay", bundle(tmp_path), "--history", tmp_path / "history", "--probes", "gpu")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [run_dir] = [p for p in (tmp_path / "history" / "runs").iterdir() if p.name != "latest"]
    assert results_of(run_dir)["hosts"]["gpu001"]["verdict"] == "ERROR"
    assert "verdict ERROR: 1 hosts" in proc.stdout


# --- bench ----------------------------------------------------------------------------------------------

@pytest.mark.sshd
def test_bench_with_no_job_for_the_host_is_error(ssh_cluster_factory, tmp_path: Path) -> None:
    """IMB needs a partner: a lone host gets no job, only ``imb.skipped``: it was not benchmarked at all."""
    cluster = ssh_cluster_factory(1)
    inv = cluster.write_inventory(tmp_path / "inv.yaml")
    proc = healthcheck("bench", "-i", inv, "-F", cluster.ssh_config, "--run-dir", tmp_path / "r",
                       "--benchmarks", "imb")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    results = results_of(tmp_path / "r")
    assert results["hosts"]["node01"]["verdict"] == "ERROR"
    assert "imb.skipped: imb: no job for this host" in checked(results, "node01")["message"]


# --- slurm transport --------------------------------------------------------------------------------------

@pytest.mark.slurm
def test_slurm_transport_with_only_absent_tools_is_error(tmp_path: Path) -> None:
    from tests.slurmd import SlurmdCluster, missing_tools

    if missing_tools():
        pytest.skip(f"slurmd cluster needs: {missing_tools()}")
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"hosts": {"node01": {"transport": "slurm"}}}))
    with SlurmdCluster.start(tmp_path / "slurmd", names=("node01",), cpus=2) as slurm:
        env = {**ENV, **slurm.env}
        proc = healthcheck("run", "-i", inv, "--run-dir", tmp_path / "r", "--probes", "dcgm", "--timeout", "5",
                           "--connect-timeout", "5", env=env)
        ok = healthcheck("run", "-i", inv, "--run-dir", tmp_path / "ok", "--probes", "system", "--timeout", "5",
                         "--connect-timeout", "5", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    results = results_of(tmp_path / "r")
    assert results["hosts"]["node01"]["verdict"] == "ERROR"
    assert "dcgm.diag skipped: dcgmi is not installed on this node" in checked(results, "node01")["message"]
    assert ok.returncode == 0, ok.stdout + ok.stderr


# --- the selection --------------------------------------------------------------------------------------

def test_limit_takes_a_nodeset_and_an_unmatched_name_is_a_usage_error(tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"groups": {"rack-a": {"hosts": "gpu[001-004]"}}}))
    typo = healthcheck("run", "-i", inv, "--limit", "gpu[001-002],gpu0003", "--run-dir", tmp_path / "a")
    assert typo.returncode == 2
    assert "--limit: 1 name(s) match no host or group of the run: gpu0003 (did you mean 'gpu003'" in typo.stderr
    assert not (tmp_path / "a").exists()
    none = healthcheck("run", "-i", inv, "--limit", "node[1-2]", "--run-dir", tmp_path / "b")
    assert none.returncode == 2 and "node1, node2" in none.stderr
    # a replay selects among the bundle's hosts the same way
    picked = healthcheck("run", "--replay", bundle(tmp_path), "--limit", "gpu[001]", "--probes", "system",
                         "--run-dir", tmp_path / "c")
    assert picked.returncode == 0, picked.stdout + picked.stderr
    assert list(results_of(tmp_path / "c")["hosts"]) == ["gpu001"]


def test_limit_selects_by_nodeset_or_group_and_names_every_unmatched_name() -> None:
    from healthcheck.core.model import Host
    from healthcheck.run.selection import SelectionError, limit_hosts

    hosts = [Host(name=f"gpu{i:03d}", group="rack-a" if i <= 2 else "rack-b") for i in range(1, 5)]
    assert [h.name for h in limit_hosts(hosts, ["gpu[001,004]"])] == ["gpu001", "gpu004"]
    assert [h.name for h in limit_hosts(hosts, ["rack-b", "gpu001"])] == ["gpu001", "gpu003", "gpu004"]
    with pytest.raises(SelectionError, match=r"2 name\(s\) match no host or group of the run: gpu005, gpu006"):
        limit_hosts(hosts, ["gpu[003-006]"])
    with pytest.raises(SelectionError) as typo:  # a mistyped group: the close name and every group
        limit_hosts(hosts, ["rack-z"])
    assert str(typo.value) == ("--limit: 1 name(s) match no host or group of the run: rack-z (did you mean "
                               "'rack-a' or 'rack-b'?); groups: rack-a, rack-b; the run has 4 host(s)")
    with pytest.raises(SelectionError, match="selects no host"):
        limit_hosts(hosts, [" "])
