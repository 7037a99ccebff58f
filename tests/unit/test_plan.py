"""Planning (rounds of disjoint pairs, stages), launch lines (mpirun/srun argv, the launch script) and
job execution with a fake transport: raw job outputs, hung jobs, replay."""

from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path

import pytest

from healthcheck.benchmarks import Program
from healthcheck.benchmarks.launch import (
    LauncherSettings,
    hostfile_text,
    launch_script,
    merge_launcher_settings,
    mpirun_argv,
    srun_argv,
)
from healthcheck.benchmarks.launcher_errors import parse_launcher_errors
from healthcheck.benchmarks.plan import Job, job_id, pair_rounds, plan_jobs, retest_pairs
from healthcheck.core.model import CommandResult, Host, Status
from healthcheck.core.profiles import Expectation, Profile
from healthcheck.run.benchmarks import execute_benchmarks, load_outcomes, replay_benchmarks
from tests.conftest import corpus_text, fixture_text


@pytest.mark.parametrize("count", [2, 3, 4, 5, 8, 9])
def test_pair_rounds_are_disjoint_and_never_repeat(count: int) -> None:
    hosts = [f"n{i}" for i in range(count)]
    rounds = pair_rounds(hosts, rounds=100)
    seen = set()
    for pairs in rounds:
        used = [h for p in pairs for h in p]
        assert len(used) == len(set(used))  # disjoint within a round
        for pair in pairs:
            assert frozenset(pair) not in seen
            seen.add(frozenset(pair))
    assert seen == {frozenset(p) for p in itertools.combinations(hosts, 2)}  # full round robin
    assert len(pair_rounds(hosts, rounds=2)) == min(2, len(rounds))


def test_plan_jobs_shapes_stages_and_ids() -> None:
    jobs = plan_jobs("nccl", ["all_reduce_perf"], ["node", "pair", "rail", "cluster"], ["a", "b", "c", "d"],
                     {"node": 8, "pair": 8, "rail": 8, "cluster": 8}, pair_round_count=1, rails=["mlx5_0", "mlx5_1"])
    shapes = [j.shape for j in jobs]
    assert shapes == ["node"] * 4 + ["pair"] * 2 + ["rail"] * 4 + ["cluster"]
    assert [j.stage for j in jobs] == sorted(j.stage for j in jobs)
    assert jobs[4].job_id == "nccl-all_reduce_perf-pair-a-d" and jobs[4].component == "pair a-d"
    assert jobs[6].rail == "mlx5_0" and jobs[6].component.startswith("rail mlx5_0 ")
    assert jobs[-1].hosts == ("a", "b", "c", "d") and jobs[-1].ranks == 32
    assert job_id("imb", "IMB-MPI1", "pair", ["x/y", "z"], retest=True) == "imb-IMB-MPI1-retest-x_y-z"
    assert Job.from_json(json.loads(json.dumps(jobs[6].to_json()))) == jobs[6]


def test_retest_pairs_prefer_untried_known_good_partners() -> None:
    stages = retest_pairs(["s1", "s2", "s3"], ["g1", "g2"], tried=[("s1", "g1")])
    assert stages == [[("s1", "g2"), ("s2", "g1")], [("s3", "g1")]]
    assert retest_pairs(["s1"], [], tried=[]) == []


def test_mpirun_and_srun_argv() -> None:
    program = Program(argv=("all_reduce_perf", "-b", "8G"), env={"NCCL_IB_HCA": "mlx5_0:1,mlx5_1:1"})
    settings = LauncherSettings.from_mapping({"mca": {"btl": "tcp,self"}, "allow_run_as_root": True,
                                              "args": ["--bind-to", "none"]})
    assert mpirun_argv(program, ranks=16, ranks_per_host=8, timeout_s=600, settings=settings) == [
        "mpirun", "--allow-run-as-root", "--np", "16", "--hostfile", "hostfile", "--map-by", "ppr:8:node",
        "--timeout", "600", "--mca", "btl", "tcp,self", "-x", "NCCL_IB_HCA=mlx5_0:1,mlx5_1:1",
        "--bind-to", "none", "all_reduce_perf", "-b", "8G"]
    srun = srun_argv(program, nodes=["gpu001", "gpu002"], ranks_per_host=8, timeout_s=601,
                     settings=LauncherSettings(kind="srun", args=("--mpi=pmix",)))
    assert srun == ["srun", "--nodes=2", "--ntasks-per-node=8", "--nodelist=gpu001,gpu002", "--time=11",
                    "--kill-on-bad-exit=1", "--export=ALL", "--mpi=pmix", "all_reduce_perf", "-b", "8G"]
    assert hostfile_text(["10.0.0.1", "10.0.0.2"], 8) == "10.0.0.1 slots=8\n10.0.0.2 slots=8\n"
    with pytest.raises(ValueError):
        LauncherSettings.from_mapping({"kind": "pbsdsh"})


def test_switching_to_srun_drops_the_profiles_mpirun_args() -> None:
    profile = {"kind": "mpirun", "args": ["--bind-to", "none"], "mca": {"btl": "tcp,self"}, "timeout_flag": True,
               "env": {"HWLOC_COMPONENTS": "-gl"}, "grace_s": 30}
    merged = merge_launcher_settings(profile, {"kind": "srun", "host_field": "name"})
    assert merged == {"kind": "srun", "host_field": "name", "env": {"HWLOC_COMPONENTS": "-gl"}, "grace_s": 30}
    # same kind: the override only adds to or replaces the profile's keys
    assert merge_launcher_settings(profile, {"mca": {}})["args"] == ["--bind-to", "none"]
    assert merge_launcher_settings(profile, {"kind": "mpirun", "binary": "/opt/hpcx/bin/mpirun"})["args"] == \
        ["--bind-to", "none"]
    srun = srun_argv(Program(argv=("hpcc",)), nodes=["n1"], ranks_per_host=1, timeout_s=60,
                     settings=LauncherSettings.from_mapping(merged))
    assert "--bind-to" not in srun and srun[-1] == "hpcc"
    error = parse_launcher_errors("srun: error: gpu007: task 9: Exited with exit code 1\n")[0]
    assert error.message == "srun: gpu007 task 9: Exited with exit code 1"


def test_launch_script_quotes_everything(tmp_path: Path) -> None:
    fake = tmp_path / "fake-mpirun"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "[%s]\\n" "$a"; done\ncat hostfile HPL.dat\n'
                    'printf "result\\n" > out.txt\nexit 3\n')
    fake.chmod(0o755)
    settings = LauncherSettings(binary=str(fake), workdir=str(tmp_path), env={"HC_X": "a b"})
    program = Program(argv=("prog", "it's; $(rm -rf /)"), env={"V": "$HOME"}, input_files={"HPL.dat": "N '1'\n"},
                      output_files=("out.txt",))
    argv = mpirun_argv(program, ranks=2, ranks_per_host=1, timeout_s=5, settings=settings)
    script = launch_script(argv, program, hostfile_text(["h1", "h2"], 1), settings)
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 3
    assert "[it's; $(rm -rf /)]" in done.stdout and "[V=$HOME]" in done.stdout
    assert "h1 slots=1\nh2 slots=1\nN '1'\n" in done.stdout and "==> out.txt <==\nresult" in done.stdout
    assert not list(tmp_path.glob("hc-bench.*"))  # scratch dir removed


def test_launcher_errors_from_corpus() -> None:
    slots = parse_launcher_errors(corpus_text("nccl-tests/mpirun-not-enough-slots-abort-gcm.txt"))
    assert [e.message for e in slots] == ["mpirun: not enough slots for the 16 ranks requested"]
    text = ("srun: error: gpu007: task 9: Exited with exit code 1\n"
            "--------------------------------------------------------------------------\n"
            "The user-provided time limit for job execution has been reached:\n")
    errors = parse_launcher_errors(text)
    assert errors[0].timeout and (errors[1].node, errors[1].rank) == ("gpu007", 9)


# --- execution with a fake transport -----------------------------------------------------------

GOOD = "nccl-tests/all_reduce-h100-2node-16gpu-oci-bm-gpu-h100-8-roce-16hca-465GBs-1G-16G.txt"
SLOW = "nccl-tests/all_reduce-h100-2node-16gpu-srun-prefixed-validation0-NA-underperforming-155GBs.txt"


class FakeTransport:
    """Replays corpus outputs: jobs with ``bad`` in them are slow, ``hung`` ones time out."""

    name = "fake"

    def __init__(self, bad: str = "", hung: str = "", unreachable: str = "") -> None:
        self.bad, self.hung, self.unreachable, self.calls = bad, hung, unreachable, []

    def run(self, host: Host, command: str, timeout_s: float, command_id: str = "adhoc") -> CommandResult:
        self.calls.append((host.name, command_id))
        if self.unreachable and host.name == self.unreachable:
            return CommandResult(host.name, command_id, transport_error="connection refused")
        if self.hung and self.hung in command_id:
            return CommandResult(host.name, command_id, stdout=b"# nThread 1 nGpus 1\n", rc=124, timed_out=True)
        text = corpus_text(SLOW if self.bad and self.bad in command_id else GOOD)
        return CommandResult(host.name, command_id, stdout=text.encode(), rc=0)


def _setup(count: int = 5) -> tuple[list[Host], dict[str, Profile]]:
    key = "nccl.all_reduce.pair.busbw_gbps"
    profile = Profile(name="h100", expectations={key: Expectation(key, "test", value=400.0, unit="GB/s")},
                      settings={"benchmarks": {"nccl": {"gpus_per_node": 8}}})
    return [Host(f"node0{i}", address=f"10.0.0.{i}", profile="h100") for i in range(1, count + 1)], {"h100": profile}


def test_execute_pairs_retest_and_replay(tmp_path: Path) -> None:
    hosts, profiles = _setup()
    transport = FakeTransport(bad="node03")
    # fabric counter snapshots around the jobs are tests/unit/test_fabric_jobs.py's: here only the launches
    options = {"benchmarks": ["nccl"], "plan": "acceptance", "nccl.shapes": ["pair"], "fabric_counters": False}
    findings, observations = execute_benchmarks(tmp_path, hosts, profiles, transport, options, set())
    node = {f.host: f for f in findings if f.check == "nccl.all_reduce.pairs.node"}
    assert node["node03"].status is Status.FAIL and "retest with known-good" in node["node03"].message
    assert {h for h, f in node.items() if f.status is Status.PASS} == {"node01", "node02", "node04", "node05"}
    retests = [cid for _, cid in transport.calls if "-retest-" in cid]
    assert retests == ["nccl-all_reduce_perf-retest-node03-node01"]
    cleared = [f for f in findings if f.check == "nccl.all_reduce.pair.busbw" and f.host != "node03"]
    assert cleared and all(f.status is Status.PASS for f in cleared)
    assert any("[attributed to node03" in f.message for f in cleared)
    jobs = tmp_path / "raw" / "_jobs"
    manifest = json.loads((jobs / "manifest.json").read_text())
    assert len(manifest["jobs"]) == len(transport.calls) == 7 and (jobs / f"{retests[0]}.out").is_file()
    assert (jobs / f"{retests[0]}.rc").read_text() == "0\n"
    assert all(e["launcher"] == e["job"]["hosts"][0] for e in manifest["jobs"])  # default launcher host
    retest = manifest["jobs"][-1]
    assert retest["job"]["retest_of"] and "--hostfile" in retest["command"]
    assert "10.0.0.3 slots=8" in retest["command"] and "10.0.0.1 slots=8" in retest["command"]
    assert observations["node03"]["benchmarks"]["nccl"][0]["metric"] == 155.57
    replayed, _ = replay_benchmarks(tmp_path, hosts, profiles, {})
    assert sorted((f.host, f.check, f.status, f.message) for f in replayed) == \
        sorted((f.host, f.check, f.status, f.message) for f in findings)


def test_hung_job_unreachable_launcher_and_skipped_hosts(tmp_path: Path) -> None:
    hosts, profiles = _setup(4)
    options = {"benchmarks": ["nccl"], "plan": "quick", "nccl.shapes": ["node", "cluster"], "nccl.timeout_s": 30}
    findings, _ = execute_benchmarks(tmp_path, hosts, profiles, FakeTransport(hung="cluster", unreachable="node02"),
                                     options, failed_hosts={"node04"})
    hung = [f for f in findings if "cluster" in (f.source or "") and f.check == "nccl.all_reduce.job"]
    assert {f.host for f in hung} == {"node01", "node02", "node03"} and all(f.status is Status.ERROR for f in hung)
    assert "job hung: no result within 30 s" in hung[0].message
    unreachable = [f for f in findings if f.host == "node02" and "node-node02" in (f.source or "")]
    assert unreachable[0].status is Status.ERROR and "connection refused" in unreachable[0].message
    skipped = [f for f in findings if f.host == "node04"]
    assert [(f.check, f.status) for f in skipped] == [("nccl.skipped", Status.SKIP)]
    assert [o.job.shape for o in load_outcomes(tmp_path)] == ["node", "node", "node", "cluster"]


def _graded(findings) -> list[tuple]:
    return sorted((f.host, f.check, f.status, f.message) for f in findings)


def test_replay_without_job_manifest_still_grades_every_job(tmp_path: Path) -> None:
    """Issue 12.3: job outputs without raw/_jobs/manifest.json are graded from their ids (hosts with
    '-' in their names too), never silently dropped; an id naming no known host is an ERROR."""
    hosts, profiles = _setup(4)
    hosts = [Host(f"gpu-{h.name}", profile="h100") for h in hosts]
    options = {"benchmarks": ["nccl"], "plan": "acceptance", "nccl.shapes": ["pair"], "retest": False}
    findings, _ = execute_benchmarks(tmp_path, hosts, profiles, FakeTransport(bad="node03"), options, set())
    (tmp_path / "raw" / "_jobs" / "manifest.json").unlink()
    (tmp_path / "raw" / "_jobs" / "nccl-all_reduce_perf-node-ghost.out").write_text("# nThread 1\n")
    replayed, _ = replay_benchmarks(tmp_path, hosts, profiles, {})
    assert any(f.status is Status.FAIL and f.host == "gpu-node03" for f in replayed)
    graded = [f for f in replayed if f.check != "benchmarks.replay"]
    assert _graded(graded) == _graded(findings)
    unresolved = [f for f in replayed if f.check == "benchmarks.replay"]
    assert {f.host for f in unresolved} == {h.name for h in hosts} and all(f.status is Status.ERROR for f in unresolved)
    assert unresolved[0].message.startswith("raw/_jobs/nccl-all_reduce_perf-node-ghost.out not graded: no "
                                            "raw/_jobs/manifest.json")


def test_job_rc_file_is_read_like_a_probe_rc(tmp_path: Path) -> None:
    """Issue 12.3: a non-zero raw/_jobs/<job>.rc with clean output is an ERROR; a malformed one names the file."""
    hosts, profiles = _setup(4)
    options = {"benchmarks": ["nccl"], "plan": "quick", "nccl.shapes": ["pair"], "retest": False}
    findings, _ = execute_benchmarks(tmp_path, hosts, profiles, FakeTransport(), options, set())
    assert not [f for f in findings if f.check == "nccl.all_reduce.job"]
    first, second = sorted(p.stem for p in (tmp_path / "raw" / "_jobs").glob("*.out"))
    (tmp_path / "raw" / "_jobs" / f"{first}.rc").write_text("3\n")
    (tmp_path / "raw" / "_jobs" / f"{second}.rc").write_text("three\n")
    replayed, _ = replay_benchmarks(tmp_path, hosts, profiles, {})
    job_errors = {f.source: f.message for f in replayed if f.check == "nccl.all_reduce.job"}
    assert job_errors[first].endswith("the launcher exited with rc 3 although the output looked complete")
    assert job_errors[second].endswith(f"malformed raw/_jobs/{second}.rc: 'three' is not an exit code")


class ClusterFake(FakeTransport):
    """Pairs replay the corpus (slow with ``bad``); the 4-node cluster job is slow (our 4-node fixture with
    the degraded node), its rerun without the bad node healthy (our 3-node fixture)."""

    def run(self, host: Host, command: str, timeout_s: float, command_id: str = "adhoc") -> CommandResult:
        outputs = {"cluster-4nodes": "nccl-tests/all_reduce-h100-4node-32gpu-degraded-139GBs-8G-16G.txt",
                   "retest-3nodes": "nccl-tests/all_reduce-h100-3node-24gpu-healthy-373GBs-8G-16G.txt"}
        name = next((v for k, v in outputs.items() if k in command_id), None)
        if name is None:
            return super().run(host, command, timeout_s, command_id)
        self.calls.append((host.name, command_id))
        return CommandResult(host.name, command_id, stdout=fixture_text(name).split("\n", 1)[1].encode(), rc=0)


def test_cluster_job_reruns_without_the_node_the_pairs_prove_bad(tmp_path: Path) -> None:
    hosts, profiles = _setup(4)
    key = "nccl.all_reduce.cluster.busbw_gbps"
    profiles["h100"].expectations[key] = Expectation(key, "test", value=400.0, unit="GB/s")
    transport = ClusterFake(bad="node03")
    options = {"benchmarks": ["nccl"], "plan": "acceptance", "nccl.shapes": ["pair", "cluster"],
               "fabric_counters": False}
    findings, observations = execute_benchmarks(tmp_path, hosts, profiles, transport, options, set())
    assert [cid for _, cid in transport.calls][-3:] == ["nccl-all_reduce_perf-cluster-4nodes-node01",
                                                       "nccl-all_reduce_perf-retest-node03-node01",
                                                       "nccl-all_reduce_perf-retest-3nodes-node01-without-node03"]
    cluster = {(f.host, f.component): f for f in findings if f.check == "nccl.all_reduce.cluster.busbw"}
    rerun_of = "cluster (3 nodes, without node03)"
    assert {k: f.status for k, f in cluster.items()} == {
        **{(h, "cluster (4 nodes)"): Status.SKIP for h in ("node01", "node02", "node04")},
        ("node03", "cluster (4 nodes)"): Status.FAIL,
        **{(h, rerun_of): Status.PASS for h in ("node01", "node02", "node04")}}
    assert cluster[("node01", "cluster (4 nodes)")].message.endswith(
        "[not graded for node01: the job included node03, bad in the pair tests; graded on its rerun cluster "
        "(3 nodes, without node03)]")
    assert cluster[("node01", rerun_of)].value == 372.6
    rerun = load_outcomes(tmp_path)[-1].job
    assert (rerun.hosts, rerun.excluded, rerun.retest_of) == (("node01", "node02", "node04"), ("node03",),
                                                               "nccl-all_reduce_perf-cluster-4nodes-node01")
    assert observations["node01"]["benchmarks"]["nccl"][-1]["excluded"] == ["node03"]
    replayed, _ = replay_benchmarks(tmp_path, hosts, profiles, {})
    assert _graded(replayed) == _graded(findings)
    (tmp_path / "raw" / "_jobs" / "manifest.json").unlink()  # the ids alone name the rerun and its hosts
    assert _graded(replay_benchmarks(tmp_path, hosts, profiles, {})[0]) == _graded(findings)
