"""Domain benchmarks over real sshd test hosts: ``healthcheck bench --benchmarks nvloom,mndiag`` plans one
``domain`` job of each over four GB200 trays (one inventory domain), launches nvloom through mpirun (4 ranks
per tray) and ``dcgmi mndiag`` as is on the first tray, grades the outputs per tray and GPU, and replays them
with every sshd stopped.

Only ``mpirun`` and ``dcgmi`` are shims (``SshCluster.add_tool``): each answers exactly the command line we
expect, so a different launch line fails the job. Their outputs are built here in the layouts of our fixtures
(tests/fixtures/nvloom, tests/fixtures/mndiag: the layouts nvloom's and DCGM's sources print) for these four
trays: the GPU pair r07t02 GPU 1 <-> r07t04 GPU 1 is slow in nvloom, r07t03 GPU 2 fails mndiag.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from healthcheck.store.results import expanded_document
from tests.conftest import fixture_text

pytestmark = pytest.mark.sshd

TRAYS = ["r07t01", "r07t02", "r07t03", "r07t04"]
BISECT = "bisect_device_to_device_write_sm"
SLOW = {5, 13}          # rank 5 = r07t02 GPU 1, rank 13 = r07t04 GPU 1: each other's bisect peer (16 ranks)


def nvloom_text() -> str:
    """16 ranks in the layout of tests/fixtures/nvloom (its header lines, Process lines, one bisect matrix)."""
    healthy = fixture_text("nvloom/gb200-nvl72-18trays-healthy.txt").splitlines()
    header = [line for line in healthy if not line.startswith("Process ")][:8]
    gpus = [line.split(": ", 2)[2] for line in healthy if line.startswith("Process ")][:4]
    lines = header + [f"Process {r:>2} ({TRAYS[r // 4]}): device {r % 4}: {gpus[r % 4]}" for r in range(16)] + [""]
    values = [320.5 if r in SLOW else 740.0 + r / 4 for r in range(16)]
    lines += [f"Running {BISECT}", "\t0\t"] + [f"{r}->{(r + 8) % 16}\t{v:.2f}\t" for r, v in enumerate(values)]
    lines += ["", f"Min {BISECT} {min(values):.2f} GB/s", f"Avg {BISECT} {sum(values) / 16:.2f} GB/s",
              f"Max {BISECT} {max(values):.2f} GB/s", f"Total {BISECT} {sum(values):.2f} GB/s", "",
              f"ExecutionTime {BISECT} 1.9 s", f"Done {BISECT}", ""]
    return "\n".join(lines)


def mndiag_text() -> str:
    """The JSON of tests/fixtures/mndiag for these four trays, r07t03 GPU 2 failing."""
    doc = json.loads(fixture_text("mndiag/gb200-nvl72-r07t11-gpu1-fail.json"))
    doc["metadata"] = {"num_entities": 16, "num_hosts": 4}
    doc["hosts"] = [dict(h, hostname=TRAYS[i]) for i, h in enumerate(doc["hosts"][:4])]
    (test,) = doc["test_categories"][0]["tests"]
    error = next(r for r in test["results"] if r["status"] == "Fail")["warnings"]
    test["results"] = [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": g, "host_id": h,
                        "status": "Fail" if (h, g) == (2, 2) else "Pass", **({"warnings": error} if (h, g) == (2, 2)
                                                                            else {})}
                       for h in range(4) for g in range(4)]
    return json.dumps(doc, indent=3, sort_keys=True, separators=(",", " : ")) + "\n"


def healthcheck(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "healthcheck", *map(str, args)], capture_output=True, text=True,
                          timeout=180)


def domain_findings(run_dir: Path) -> Counter:
    hosts = expanded_document(run_dir)["hosts"]
    return Counter((h, f["check"], f["component"], f["status"]) for h, v in hosts.items() for f in v["findings"]
                   if f["check"].startswith(("nvloom", "mndiag")))


def test_nvloom_and_mndiag_name_the_slow_pair_and_the_failing_gpu(ssh_cluster_factory, tmp_path: Path) -> None:
    cluster = ssh_cluster_factory(4, names=TRAYS)
    mpirun = f"--np 16 --hostfile hostfile --map-by ppr:4:node --timeout 1800 nvloom_cli -t {BISECT}"
    dcgmi = f"mndiag --hostList {';'.join(TRAYS)} --run mnubergemm --json"
    for tray in TRAYS:
        cluster.add_tool(tray, "mpirun", {mpirun: (nvloom_text(), 0)})
        cluster.add_tool(tray, "dcgmi", {dcgmi: (mndiag_text(), 0)})
    settings = {"benchmarks": {"nvloom": {"tests": [BISECT]}}}
    inv = cluster.write_inventory(tmp_path / "inv.yaml", profile="gb200-nvl72-tray",
                                  host_vars={h.name: settings for h in cluster.hosts})
    run_dir = tmp_path / "bench"
    proc = healthcheck("bench", "-i", inv, "-F", cluster.ssh_config, "--benchmarks", "nvloom,mndiag",
                       "--plan", "quick", "--run-dir", run_dir)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    jobs = json.loads((run_dir / "raw" / "_jobs" / "manifest.json").read_text())["jobs"]
    assert sorted((e["job"]["job_id"], e["launcher"], e["rc"]) for e in jobs) == [
        ("mndiag-mnubergemm-domain-4nodes-r07t01", "r07t01", 0),
        (f"nvloom-{BISECT}-domain-4nodes-r07t01", "r07t01", 0)]

    found = domain_findings(run_dir)
    not_passing = sorted(k for k in found if k[3] not in ("PASS", "SKIP"))
    assert [k for k in not_passing if k[1] != "nvloom.domain.gpus"] == [
        ("r07t02", f"nvloom.{BISECT}", "gpu1", "FAIL"), ("r07t02", f"nvloom.{BISECT}.domain", "gpu1", "FAIL"),
        ("r07t03", "mndiag.gpu", "gpu2", "FAIL"), ("r07t03", "mndiag.result", "domain (4 nodes)", "FAIL"),
        ("r07t04", f"nvloom.{BISECT}", "gpu1", "FAIL"), ("r07t04", f"nvloom.{BISECT}.domain", "gpu1", "FAIL")]
    # four trays are 16 of the NVL72 domain's 72 GPUs: the rack is short, a WARN on every tray
    assert {k for k in not_passing if k[1] == "nvloom.domain.gpus"} == {
        (t, "nvloom.domain.gpus", "rack 1821025000117", "WARN") for t in TRAYS}
    assert {k[0]: k[3] for k in found if k[1] == "nvloom.ranks"} == {t: "PASS" for t in TRAYS}
    verdicts = {h: v["verdict"] for h, v in expanded_document(run_dir)["hosts"].items()}
    assert verdicts == {"r07t01": "WARN", "r07t02": "FAIL", "r07t03": "FAIL", "r07t04": "FAIL"}

    cluster.stop()
    replay = tmp_path / "replay"
    proc = healthcheck("run", "--replay", run_dir, "--run-dir", replay)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert domain_findings(replay) == found


def test_two_racks_get_one_job_each_on_their_first_tray(ssh_cluster_factory, tmp_path: Path) -> None:
    """Four trays in two inventory groups (two NVLink domains): one nvloom and one mndiag job per rack, each
    launched on the rack's first tray; rack08's nvloom output lacks one tray (r08t02 FAIL, missing)."""
    names = ["r07t01", "r07t02", "r08t01", "r08t02"]
    cluster = ssh_cluster_factory(4, names=names)
    header = [line for line in fixture_text("nvloom/gb200-nvl72-18trays-healthy.txt").splitlines()
              if not line.startswith("Process ")][:8]

    def nvloom(trays: list[str]) -> str:
        ranks = 4 * len(trays)
        lines = header + [f"Process {r} ({trays[r // 4]}): device {r % 4}: NVIDIA GB200 (0000000{8 + r % 2}:01:00); "
                          f"rackGuid: {trays[0][:3]}" for r in range(ranks)] + ["", f"Running {BISECT}", "\t0\t"]
        lines += [f"{r}->{(r + ranks // 2) % ranks}\t{741.0 + r:.2f}\t" for r in range(ranks)]
        return "\n".join([*lines, "", f"Done {BISECT}", ""])

    mpirun = f"--np 8 --hostfile hostfile --map-by ppr:4:node --timeout 1800 nvloom_cli -t {BISECT}"
    cluster.add_tool("r07t01", "mpirun", {mpirun: (nvloom(["r07t01", "r07t02"]), 0)})
    cluster.add_tool("r08t01", "mpirun", {mpirun: (nvloom(["r08t01"]), 0)})
    for first, rack in (("r07t01", ["r07t01", "r07t02"]), ("r08t01", ["r08t01", "r08t02"])):
        doc = json.loads(mndiag_text())
        doc["hosts"] = [dict(h, hostname=rack[i]) for i, h in enumerate(doc["hosts"][:2])]
        (test,) = doc["test_categories"][0]["tests"]
        test["status"] = test["test_summary"]["status"] = "Pass"
        test["results"] = [dict(r, status="Pass") for r in test["results"] if r["host_id"] < 2]
        for r in test["results"]:
            r.pop("warnings", None)
        cluster.add_tool(first, "dcgmi", {f"mndiag --hostList {';'.join(rack)} --run mnubergemm --json":
                                          (json.dumps(doc, indent=3), 0)})
    inv = cluster.write_inventory(tmp_path / "inv.yaml", profile="gb200-nvl72-tray",
                                  host_vars={n: {"nvlink_domain": n[:3], "benchmarks": {"nvloom": {"tests": [BISECT]}}}
                                             for n in names})
    run_dir = tmp_path / "bench"
    proc = healthcheck("bench", "-i", inv, "-F", cluster.ssh_config, "--benchmarks", "nvloom,mndiag",
                       "--plan", "quick", "--run-dir", run_dir)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    jobs = json.loads((run_dir / "raw" / "_jobs" / "manifest.json").read_text())["jobs"]
    assert sorted((e["job"]["job_id"], e["launcher"], tuple(e["job"]["hosts"])) for e in jobs) == [
        ("mndiag-mnubergemm-domain-2nodes-r07t01", "r07t01", ("r07t01", "r07t02")),
        ("mndiag-mnubergemm-domain-2nodes-r08t01", "r08t01", ("r08t01", "r08t02")),
        (f"nvloom-{BISECT}-domain-2nodes-r07t01", "r07t01", ("r07t01", "r07t02")),
        (f"nvloom-{BISECT}-domain-2nodes-r08t01", "r08t01", ("r08t01", "r08t02"))]
    found = domain_findings(run_dir)
    assert sorted(k for k in found if k[3] in ("FAIL", "ERROR")) == [
        ("r08t02", "nvloom.ranks", "domain (2 nodes)", "FAIL")]
    assert {k[0] for k in found if k[1] == "mndiag.result" and k[3] == "PASS"} == set(names)
