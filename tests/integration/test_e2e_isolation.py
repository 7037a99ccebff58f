"""``healthcheck bench --plan isolate`` end to end over real sshd test hosts: the isolation's group jobs are
planned round by round, launched with the mpirun line and launch script every job gets, over the ssh
transport on each job's first node, graded, and the run replayed to the same verdicts with every sshd
stopped.

Only ``mpirun`` is a stand-in, as in test_e2e_benchmarks.py: a Python shim on each host that checks the line
like Open MPI would (``--np`` against the hostfile's slots, the program path), logs it, and prints an
nccl-tests output in our fixtures' layout (``tests/nccl_render.py``) for the hostfile's nodes, whose busbw
follows the simulator's fault model (bench/isolation_sim.py): node03 is bad (every job with it is slow),
node06's HCA mlx5_1 is bad (every job over all rails with node06, and its jobs pinned to mlx5_1, are slow).
Eight hosts in two leaves (inventory var ``leaf``), two rails.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from healthcheck.store.results import expanded_document, results_schema
from tests.integration.test_e2e_benchmarks import healthcheck, launched

pytestmark = pytest.mark.sshd
ROOT = Path(__file__).resolve().parents[2]
RAILS = ["mlx5_0:1", "mlx5_1:1"]

_MPIRUN = """#!@PYTHON@
# test stand-in for Open MPI mpirun: check and log the line, print nccl-tests output that follows the fault model
import sys
sys.path.insert(0, @ROOT@)
from tests.nccl_render import render_all_reduce

MODEL = @MODEL@
args = sys.argv[1:]
with open(MODEL["log"], "a") as log:
    log.write(" ".join(args) + "\\n")
np, hostfile, env, i = None, None, {}, 0
while i < len(args):
    if args[i] == "--np":
        np, i = int(args[i + 1]), i + 2
    elif args[i] == "--hostfile":
        hostfile, i = args[i + 1], i + 2
    elif args[i] in ("--map-by", "--timeout", "--bind-to"):
        i += 2
    elif args[i] == "-x":
        key, _, value = args[i + 1].partition("=")
        env[key], i = value, i + 2
    else:
        break
if not args[i].endswith("/all_reduce_perf"):
    sys.exit("mpirun was unable to find the specified executable file, and therefore did not launch the job.")
rows = [line.split() for line in open(hostfile)]
slots = sum(int(row[1].split("=")[1]) for row in rows)
if np != slots:
    sys.exit(f"There are not enough slots available in the system to satisfy the {np} slots")
names = [MODEL["names"][row[0]] for row in rows]
rail = env.get("NCCL_IB_HCA", "").lstrip("=") or None
ratio = 0.97
if MODEL["bad"] in names:
    ratio = 0.3
if MODEL["link"][0] in names and rail in (None, MODEL["link"][1]):
    ratio = min(ratio, 0.25 if rail else 0.35)
expected = 47.0 if rail else 380.0
print(render_all_reduce(names, slots // len(rows), expected * ratio, first_gpu=int(env.get("CUDA_VISIBLE_DEVICES", 0))))
"""


def install_mpirun(cluster, bad: str, link: tuple[str, str]) -> None:
    for host in cluster.hosts:
        model = {"log": str(host.root / "mpirun.log"), "bad": bad, "link": list(link),
                 "names": {h.address: h.name for h in cluster.hosts}}
        shim = host.bindir / "mpirun"
        shim.write_text(_MPIRUN.replace("@PYTHON@", sys.executable).replace("@ROOT@", repr(str(ROOT)))
                        .replace("@MODEL@", repr(model)))
        shim.chmod(0o755)


def verdicts(run_dir: Path) -> Counter:
    doc = expanded_document(run_dir)
    return Counter((h, f["check"], f["component"], f["status"], f["source"])
                   for h, host in doc["hosts"].items() for f in host["findings"] if f["check"].startswith("nccl."))


def test_isolate_plan_names_the_node_and_the_link_and_replays(ssh_cluster_factory, tmp_path: Path) -> None:
    cluster = ssh_cluster_factory(8)
    install_mpirun(cluster, bad="node03", link=("node06", "mlx5_1:1"))
    host_vars = {h.name: {"leaf": "A" if i < 4 else "B", "benchmarks": {"nccl": {"rails": RAILS}}}
                 for i, h in enumerate(cluster.hosts)}
    inv = cluster.write_inventory(tmp_path / "inv.yaml", profile="h100-sxm5-8x", host_vars=host_vars)
    run_dir = tmp_path / "run"
    proc = healthcheck("bench", "-i", inv, "-F", cluster.ssh_config, "--benchmarks", "nccl", "--plan", "isolate",
                       "--run-dir", run_dir, timeout=300)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]

    doc = expanded_document(run_dir)
    Draft202012Validator(results_schema()).validate(json.loads((run_dir / "results.json").read_text()))
    (story,) = doc["isolation"]
    assert [(b["kind"], b["subject"]) for b in story["blamed"]] == [("node", "node03"), ("link", "node06 mlx5_1:1")]
    assert story["suspects"] == [] and story["complete"] and story["rounds"] == 4 and story["jobs"] <= 24
    findings = {h: host["findings"] for h, host in doc["hosts"].items()}
    node = {h: [f["status"] for f in fs if f["check"] == "nccl.all_reduce.isolate.node"] for h, fs in findings.items()}
    assert node == {h.name: ["FAIL" if h.name == "node03" else "PASS"] for h in cluster.hosts}
    link = [f for fs in findings.values() for f in fs if f["check"] == "nccl.all_reduce.isolate.link"]
    assert [(f["host"], f["status"], f["component"]) for f in link] == [("node06", "FAIL", "link node06 mlx5_1:1")]
    failing = {h for h, fs in findings.items() if any(f["status"] in ("FAIL", "ERROR") for f in fs)}
    assert failing == {"node03", "node06"}
    # node04 shared the failed screen group with node03: its FAIL there is re-stated, attributed to node03
    screen = [f for f in findings["node04"] if f["source"] == "nccl-all_reduce_perf-isolate-r1-screen-node03-2nodes"
              and f["check"] == "nccl.all_reduce.group.busbw"]
    assert [f["status"] for f in screen] == ["PASS"] and "[attributed to node03: " in screen[0]["message"]

    # every job ran its mpirun on its first node; the rail jobs one GPU per node, pinned, side by side
    jobs = json.loads((run_dir / "raw" / "_jobs" / "manifest.json").read_text())["jobs"]
    assert len(jobs) == story["jobs"] and all(e["launcher"] == e["job"]["hosts"][0] for e in jobs)
    lines = [line for h in cluster.hosts for line in launched(cluster, h.name)]
    assert len(lines) == story["jobs"]
    pinned = [line for line in lines if "NCCL_IB_HCA==mlx5_1:1" in line]
    assert all("--hostfile hostfile --map-by ppr:1:node" in line and "-x CUDA_VISIBLE_DEVICES=1" in line
               and " -g 1 " in line for line in pinned)
    assert {line.split()[1] for line in pinned} == {"2", "4"}  # a suspect and its partner; a fabric group
    assert any("--np 16 --hostfile hostfile --map-by ppr:8:node" in line for line in lines)
    assert (run_dir / "raw" / "_jobs" / "isolation.json").is_file()

    # the report tells the story; summary.md too
    html = (run_dir / "report.html").read_text()
    assert "Isolation: who is to blame" in html and "blamed on node03" in html and "blamed on node06 mlx5_1:1" in html
    summary = (run_dir / "summary.md").read_text()
    assert "- **blamed** link `node06 mlx5_1:1` (`node06`): node06 passes on its other rails" in summary

    # replay, every sshd stopped: the planner runs again over the stored jobs, to the same verdicts and story
    cluster.stop()
    replay_dir = tmp_path / "replay"
    proc = healthcheck("run", "--replay", run_dir, "--run-dir", replay_dir)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert verdicts(replay_dir) == verdicts(run_dir)
    assert expanded_document(replay_dir)["isolation"] == doc["isolation"]
