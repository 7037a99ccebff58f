"""The isolation plan end to end over 64 hosts with a fake transport: every job goes through the real launch
path (argv, launch script, waves, ``raw/_jobs``), its output is rendered in the nccl-tests layout
(``tests/nccl_render.py``) with the busbw the simulator's model gives (bench/isolation_sim.py: a bad node,
a bad link, a leaf with slow uplinks, a job slow by chance), and the stored run is replayed to the
same verdicts."""

from __future__ import annotations

import json
import shlex
from collections import Counter
from pathlib import Path

from healthcheck.core.model import CommandResult, Host, Status
from healthcheck.core.profiles import load_profile
from healthcheck.run.benchmarks import execute_benchmarks, load_outcomes, replay_benchmarks
from tests.nccl_render import render_all_reduce

BAD_NODE, LINK, BAD_LEAF, UNLUCKY = "n0005", ("n0020", "mlx5_3:1"), "L4", "r1-screen-n0025"


def _leaf(host: str) -> str:
    return f"L{(int(host[1:]) - 1) // 16 + 1}"


class ModelTransport:
    """Answers each launch script with an nccl-tests output whose busbw follows the fault model."""

    name = "fake"

    def __init__(self) -> None:
        self.scripts: list[tuple[str, str]] = []

    @staticmethod
    def job(script: str) -> tuple[list[str], str | None, int]:
        """The job's hosts (its hostfile), the rail it is pinned to and the ranks per host (--map-by)."""
        words = shlex.split(script)
        at = next(i for i in range(len(words)) if words[i:i + 2] == ["printf", "%s"] and words[i + 4] == "hostfile")
        hosts = [row.split()[0] for row in words[at + 2].splitlines()]
        rail = next((w.split("==", 1)[1] for w in words if w.startswith("NCCL_IB_HCA==")), None)
        gpus = int(words[words.index("--map-by") + 1].split(":")[1])
        return hosts, rail, gpus

    def run(self, host: Host, command: str, timeout_s: float, command_id: str = "adhoc") -> CommandResult:
        self.scripts.append((command_id, command))
        hosts, rail, gpus = self.job(command)
        ratio = 0.97
        if BAD_NODE in hosts:
            ratio = min(ratio, 0.3)
        if LINK[0] in hosts and rail in (None, LINK[1]):
            ratio = min(ratio, 0.25 if rail else 0.35)
        cells = {_leaf(h) for h in hosts}
        if len(cells) > 1 and BAD_LEAF in cells:
            ratio = min(ratio, 0.3)
        if command_id.startswith(f"nccl-all_reduce_perf-isolate-{UNLUCKY}"):
            ratio = min(ratio, 0.4)  # slow by chance, once
        expected = 47.0 if rail else 380.0
        first_gpu = int(rail.split("_")[1].split(":")[0]) if rail else 0
        text = render_all_reduce(hosts, gpus, expected * ratio, first_gpu=first_gpu)
        return CommandResult(host.name, command_id, stdout=text.encode(), rc=0)


def _run(tmp_path: Path) -> tuple[list, list[Host], dict, list[dict], ModelTransport]:
    hosts = [Host(f"n{i:04d}", profile="h100-sxm5-8x", vars={"leaf": _leaf(f"n{i:04d}")}) for i in range(1, 65)]
    profiles = {"h100-sxm5-8x": load_profile("h100-sxm5-8x")}
    transport = ModelTransport()
    stories: list[dict] = []
    options = {"benchmarks": ["nccl"], "plan": "isolate", "parallel_jobs": 8, "telemetry": False,
               "fabric_counters": False}
    findings, _ = execute_benchmarks(tmp_path, hosts, profiles, transport, options, set(), stories=stories)
    return findings, hosts, profiles, stories, transport


def _key(findings: list) -> Counter:
    return Counter((f.host, f.check, f.component, f.status, f.source) for f in findings)


def test_isolation_names_the_node_the_link_and_the_leaf_and_replays(tmp_path: Path) -> None:
    findings, hosts, profiles, stories, transport = _run(tmp_path)
    (story,) = stories
    assert story["rounds"] <= 4 and story["jobs"] <= 3 * 64 and story["complete"]
    assert [(b["kind"], b["subject"]) for b in story["blamed"]] == \
        [("node", BAD_NODE), ("link", "n0020 mlx5_3:1"), ("leaf", "leaf L4")]
    assert story["suspects"] == []
    node = {f.host: f for f in findings if f.check == "nccl.all_reduce.isolate.node"}
    assert {h for h, f in node.items() if f.status is Status.FAIL} == {BAD_NODE}
    assert {f.status for h, f in node.items() if h != BAD_NODE} == {Status.PASS}
    link = [f for f in findings if f.check == "nccl.all_reduce.isolate.link"]
    assert [(f.host, f.status, f.component) for f in link] == [("n0020", Status.FAIL, "link n0020 mlx5_3:1")]
    assert "passes on its other rails but fails pinned to mlx5_3:1" in link[0].message
    leaf = [f for f in findings if f.check == "nccl.all_reduce.isolate.leaf"]
    assert {f.host for f in leaf} == {f"n{i:04d}" for i in range(49, 65)} and {f.status for f in leaf} == {Status.WARN}
    assert "inside the leaf pass" in leaf[0].message
    # only the blamed node and the node of the blamed link FAIL; the job slow by chance is not blamed on anyone
    failing = {f.host for f in findings if f.status in (Status.FAIL, Status.ERROR)}
    assert failing == {BAD_NODE, "n0020"}
    unlucky = [f for f in findings if f.source.startswith(f"nccl-all_reduce_perf-isolate-{UNLUCKY}")
               and f.check == "nccl.all_reduce.group.busbw"]
    assert {f.status for f in unlucky} == {Status.WARN} and "not reproduced" in unlucky[0].message
    # the round's one-GPU rail jobs run side by side: CUDA_VISIBLE_DEVICES names the rail's GPU
    rail_scripts = [s for cid, s in transport.scripts if "-confirm-n0005-" in cid]
    assert len(rail_scripts) == 8 and all("-x CUDA_VISIBLE_DEVICES=" in s and "--np 2" in s for s in rail_scripts)
    # stored, and replayed to the same findings and story
    trail = json.loads((tmp_path / "raw" / "_jobs" / "isolation.json").read_text())
    assert trail["isolations"][0]["layout"]["cells"]["n0064"] == "L4"
    assert len(load_outcomes(tmp_path)) == story["jobs"]
    replayed_stories: list[dict] = []
    replayed, _ = replay_benchmarks(tmp_path, hosts, profiles, {}, replayed_stories)
    assert _key(replayed) == _key(findings)
    assert replayed_stories == stories
