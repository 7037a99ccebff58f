"""End to end over real sshd test hosts: nccl-tests planned, launched with mpirun on a launcher host over
SSH, graded, attributed to the bad node, and re-graded from ``raw/_jobs`` by replay.

The launch path is the real one (``benchmarks.launch`` builds the mpirun line and the sh script, the
ssh transport runs it on the job's first node); only ``mpirun`` is a shim. It checks the line like
Open MPI would (``--np`` against the hostfile's slots, the program path), logs it, and replays our own
nccl-tests fixture chosen by the set of hosts in the job's hostfile, with the fixture's placeholder
host names replaced by the hostfile's nodes in rank order.
"""

from __future__ import annotations

import itertools
import json
import shlex
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from healthcheck.store.results import expanded_document
from tests.conftest import fixture_text

pytestmark = pytest.mark.sshd

IMB_OK = "imb/imb-pingpong-ndr-healthy-1.1us-47.6GBs.txt"
IMB_SLOW = "imb/imb-pingpong-degraded-link-4.8us.txt"
NODE_OK = "nccl-tests/all_reduce-h100-1node-8gpu-healthy-476GBs-8G-16G.txt"
PAIR_OK = "nccl-tests/all_reduce-h100-2node-16gpu-healthy-388GBs-8G-16G.txt"
PAIR_SLOW = "nccl-tests/all_reduce-h100-2node-16gpu-degraded-141GBs-8G-16G.txt"
PAIR_WRONG = "nccl-tests/all_reduce-h100-2node-16gpu-wrong-healthy-bw-8G-16G.txt"
CLUSTER_OK = "nccl-tests/all_reduce-h100-4node-32gpu-healthy-371GBs-8G-16G.txt"
CLUSTER_OK_3 = "nccl-tests/all_reduce-h100-3node-24gpu-healthy-373GBs-8G-16G.txt"
CLUSTER_SLOW = "nccl-tests/all_reduce-h100-4node-32gpu-degraded-139GBs-8G-16G.txt"

Response = tuple[str, int, float]  # fixture, exit code, seconds to sleep first

_MPIRUN = r"""#!/bin/sh
# test shim for Open MPI mpirun: check and log the launch line, replay the job's output by hostfile
printf '%s\n' "$*" >> @LOG@
np=; hf=
while [ $# -gt 0 ]; do
  case "$1" in
    --np) np=$2; shift 2;;
    --hostfile) hf=$2; shift 2;;
    --map-by|--timeout|--bind-to) shift 2;;
    --mca) shift 3;;
    -x) case "$2" in *=*) export "$2";; esac; shift 2;;
    *) break;;
  esac
done
case "$1" in
  @PROGRAM@) ;;
  *) echo "mpirun was unable to find the specified executable file, and therefore did not launch the job." >&2
     exit 1;;
esac
[ -r "$hf" ] || { echo "mpirun: hostfile '$hf' not found" >&2; exit 1; }
slots=$(awk '{ split($2, s, "="); n += s[2] } END { print n }' "$hf")
if [ "$np" != "$slots" ]; then
  echo "There are not enough slots available in the system to satisfy the $np slots" >&2; exit 1
fi
i=0
names=
set --
for a in $(awk '{ print $1 }' "$hf"); do
  i=$((i + 1))
  case "$a" in
@NAMES@
  esac
  names="$names $n"
  set -- "$@" -e "s/gpu-h100-0$i /$n /g"
done
case "$(awk '{ print $1 }' "$hf" | sort | tr '\n' ' ')" in
@CASES@
  *) echo "mpirun shim: no response for these hosts" >&2; exit 2;;
esac
@DURING@
[ "$delay" = 0 ] || sleep "$delay"
sed "$@" "$f"
exit "$rc"
"""


def install_mpirun(cluster, respond: Callable[[frozenset[str]], Response], program: str = "*/all_reduce_perf",
                   during: str = "") -> None:
    """The mpirun shim on every host; ``respond(names in the job)`` picks the replayed output; ``program``
    is the shell pattern the launched program must match; ``during`` is shell run by the job once it is
    accepted (``$names``: the job's host names), as the job's own effects on the nodes."""
    store = cluster.base / "mpirun-responses"
    store.mkdir(exist_ok=True)
    address = {h.name: h.address for h in cluster.hosts}
    names = "\n".join(f"    {a}) n={n};;" for n, a in address.items())
    cases = []
    for size in range(1, len(address) + 1):
        for group in itertools.combinations(sorted(address), size):
            fixture, rc, delay = respond(frozenset(group))
            out = store / Path(fixture).name
            out.write_text(fixture_text(fixture).split("\n", 1)[1])  # line 1 says it is our fixture
            key = "".join(f"{a} " for a in sorted(address[n] for n in group))
            cases.append(f"  {shlex.quote(key)}) f={shlex.quote(str(out))}; rc={rc}; delay={delay:g};;")
    for host in cluster.hosts:
        shim = host.bindir / "mpirun"
        shim.write_text(_MPIRUN.replace("@LOG@", shlex.quote(str(host.root / "mpirun.log")))
                        .replace("@NAMES@", names).replace("@CASES@", "\n".join(cases))
                        .replace("@PROGRAM@", program).replace("@DURING@", during))
        shim.chmod(0o755)


def launched(cluster, name: str) -> list[str]:
    log = cluster.host(name).root / "mpirun.log"
    return log.read_text().splitlines() if log.is_file() else []


def healthcheck(*args: object, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "healthcheck", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def bench_findings(run_dir: Path) -> dict[str, list[dict]]:
    results = expanded_document(run_dir)
    return {name: [f for f in host["findings"] if f["check"].startswith("nccl.")]
            for name, host in results["hosts"].items()}


def verdicts_of(run_dir: Path) -> Counter:
    return Counter((h, f["check"], f["component"], f["status"], f["source"])
                   for h, fs in bench_findings(run_dir).items() for f in fs)


def pick(findings: list[dict], check: str, component: str | None = None) -> list[dict]:
    return [f for f in findings if f["check"] == check and (component is None or f["component"] == component)]


def stored_jobs(run_dir: Path) -> dict[str, dict]:
    manifest = json.loads((run_dir / "raw" / "_jobs" / "manifest.json").read_text())
    return {entry["job"]["job_id"]: entry for entry in manifest["jobs"]}


def test_acceptance_run_names_node03_and_replays_without_ssh(ssh_cluster_factory, tmp_path: Path) -> None:
    cluster = ssh_cluster_factory(4)

    def respond(group: frozenset[str]) -> Response:
        if len(group) == 1:
            return NODE_OK, 0, 0
        slow = "node03" in group  # node03's network is degraded: every job with it is slow
        if len(group) == 2:
            return (PAIR_SLOW if slow else PAIR_OK), 0, 0
        if len(group) == 3:  # the 4-node job's rerun without node03
            return CLUSTER_OK_3, 0, 0
        return (CLUSTER_SLOW if slow else CLUSTER_OK), 0, 0

    install_mpirun(cluster, respond)
    # node05 is in the inventory but down: its probes fail hard, so it is not benchmarked
    inv = cluster.write_inventory(tmp_path / "inv.yaml", profile="h100-sxm5-8x",
                                  extra_hosts={"node05": {"address": "127.0.1.5", "port": cluster.port}})
    run_dir = tmp_path / "run"
    proc = healthcheck("run", "-i", inv, "-F", cluster.ssh_config, "--run-dir", run_dir, "--probes", "system",
                       "--benchmarks", "nccl", "--plan", "acceptance")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    found = bench_findings(run_dir)
    assert [(f["check"], f["status"]) for f in found.pop("node05")] == [("nccl.skipped", "SKIP")]

    # attribution: node03 failed with all three partners and again in the retest with known-good node01
    verdicts = {h: pick(found[h], "nccl.all_reduce.pairs.node") for h in found}
    assert {h: [f["status"] for f in v] for h, v in verdicts.items()} == \
        {"node01": ["PASS"], "node02": ["PASS"], "node03": ["FAIL"], "node04": ["PASS"]}
    assert verdicts["node03"][0]["message"] \
        == "node03: bad: failed with node01, node02, node04; the retest with known-good node01 failed too"
    assert not any(pick(found[h], "nccl.all_reduce.pairs.link") for h in found)

    # per pair: node03's pairs FAIL on node03 (37 % of 380 GB/s), its partners' are re-stated as PASS
    pair_busbw = {(h, f["component"]): f for h in found for f in pick(found[h], "nccl.all_reduce.pair.busbw")}
    assert {k: f["status"] for k, f in pair_busbw.items() if k[0] == "node03"} == {
        ("node03", "pair node01-node03"): "FAIL", ("node03", "pair node02-node03"): "FAIL",
        ("node03", "pair node03-node04"): "FAIL", ("node03", "retest pair node03-node01"): "FAIL"}
    assert pair_busbw[("node03", "pair node03-node04")]["value"] == pytest.approx(141.18)
    for key, f in pair_busbw.items():
        if key[0] != "node03":
            assert f["status"] == "PASS", f
            assert ("[attributed to node03: " in f["message"]) == ("node03" in key[1]), f
    assert {k for k in pair_busbw if k[0] == "node01"} == {
        ("node01", "pair node01-node02"), ("node01", "pair node01-node03"), ("node01", "pair node01-node04"),
        ("node01", "retest pair node03-node01")}
    # per node: NVLink all-reduce is fine everywhere; the slow 4-node job is blamed on node03 and run again
    # without it, which grades the others (PASS), so node03 is the only node with a benchmark FAIL
    for h in found:
        assert [f["status"] for f in pick(found[h], "nccl.all_reduce.node.busbw", "node")] == ["PASS"]
        assert {f["status"] for f in pick(found[h], "nccl.all_reduce.data")} == {"PASS"}
        cluster_busbw = pick(found[h], "nccl.all_reduce.cluster.busbw", "cluster (4 nodes)")
        assert [f["status"] for f in cluster_busbw] == ["FAIL" if h == "node03" else "SKIP"]
        assert ("the job included node03, bad in the pair tests" in cluster_busbw[0]["message"]) == (h != "node03")
        rerun = pick(found[h], "nccl.all_reduce.cluster.busbw", "cluster (3 nodes, without node03)")
        assert [(f["status"], f["value"]) for f in rerun] == ([] if h == "node03" else [("PASS", 372.6)])
    worst = {h: {f["status"] for f in fs} for h, fs in found.items()}
    assert [h for h, statuses in worst.items() if "FAIL" in statuses or "ERROR" in statuses] == ["node03"]

    # every job's raw output is kept, and each ran on its first node through the mpirun line we built
    jobs = stored_jobs(run_dir)
    pairs = {"node01-node04", "node02-node03", "node01-node03", "node04-node02", "node01-node02", "node03-node04"}
    assert set(jobs) == ({f"nccl-all_reduce_perf-node-node0{i}" for i in range(1, 5)}
                         | {f"nccl-all_reduce_perf-pair-{p}" for p in pairs}
                         | {"nccl-all_reduce_perf-retest-node03-node01", "nccl-all_reduce_perf-cluster-4nodes-node01",
                            "nccl-all_reduce_perf-retest-3nodes-node01-without-node03"})
    for job_id, entry in jobs.items():
        stem = run_dir / "raw" / "_jobs" / job_id
        assert "# Avg bus bandwidth" in stem.with_suffix(".out").read_text(), job_id
        assert stem.with_suffix(".rc").read_text() == "0\n" and entry["rc"] == 0
        assert entry["launcher"] == entry["job"]["hosts"][0]
    assert jobs["nccl-all_reduce_perf-retest-node03-node01"]["job"]["retest_of"] == \
        "nccl-all_reduce_perf-pair-node03-node04"
    retest_out = (run_dir / "raw" / "_jobs" / "nccl-all_reduce_perf-retest-node03-node01.out").read_text()
    assert "Rank  0 Group  0 Pid   1274 on node03 device" in retest_out  # rank order = hostfile order
    assert "Rank  8 Group  0 Pid   2315 on node01 device" in retest_out
    assert Counter(h for h in found for _ in launched(cluster, h)) == {"node01": 6, "node02": 2, "node03": 3,
                                                                      "node04": 2}
    assert ("--np 16 --hostfile hostfile --map-by ppr:8:node --timeout 1800 -x NCCL_DEBUG=INFO "
            "-x NCCL_DEBUG_SUBSYS=INIT,NET --bind-to none /opt/nccl-tests/build/all_reduce_perf -b 8G -e 16G -f 2 "
            "-g 1 -c 1 -n 20 -w 5") in launched(cluster, "node03")

    # replay: the same benchmark verdicts from raw/_jobs, with every sshd stopped
    cluster.stop()
    replay_dir = tmp_path / "replay"
    proc = healthcheck("run", "--replay", run_dir, "--run-dir", replay_dir)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert verdicts_of(replay_dir) == verdicts_of(run_dir)
    assert json.loads((replay_dir / "manifest.json").read_text())["mode"] == "replay"
    assert set(stored_jobs(replay_dir)) == set(jobs)


def test_bench_wrong_pair_fails_and_hung_job_errors(ssh_cluster_factory, tmp_path: Path) -> None:
    cluster = ssh_cluster_factory(4)

    def respond(group: frozenset[str]) -> Response:
        if group == {"node04"}:
            return NODE_OK, 0, 30  # hangs far past its 2 s job timeout
        if group == {"node02", "node03"}:
            return PAIR_WRONG, 1, 0  # full bandwidth, but wrong results
        return {1: NODE_OK, 2: PAIR_OK}.get(len(group), CLUSTER_OK), 0, 0

    install_mpirun(cluster, respond)
    short = {"benchmarks": {"nccl": {"timeout_s": 2}, "launcher": {"grace_s": 1}}}
    inv = cluster.write_inventory(tmp_path / "inv.yaml", profile="h100-sxm5-8x",
                                  host_vars={h.name: short for h in cluster.hosts})
    listing = healthcheck("bench", "--list")
    assert listing.returncode == 0 and [line.split()[0] for line in listing.stdout.splitlines()] == \
        ["nccl", "hpl", "imb", "osu", "sdc", "gpuperf", "nvbandwidth", "nvloom", "mndiag"]

    run_dir = tmp_path / "bench"
    proc = healthcheck("bench", "-i", inv, "-F", cluster.ssh_config, "--benchmarks", "nccl", "--plan", "acceptance",
                       "--pair-rounds", "2", "--launcher-host", "node01", "--run-dir", run_dir)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    found = bench_findings(run_dir)
    results = expanded_document(run_dir)
    assert results["run"]["probes"] == []

    # the hung job is an ERROR for its host only; node04's other jobs still ran and passed
    hung = [f for h in found for f in found[h] if f["status"] == "ERROR"]
    assert [(f["host"], f["check"], f["component"]) for f in hung] == [("node04", "nccl.all_reduce.job", "node")]
    assert "job hung: no result within 2 s" in hung[0]["message"]
    assert [f["status"] for f in pick(found["node04"], "nccl.all_reduce.pair.busbw")] == ["PASS", "PASS"]
    assert stored_jobs(run_dir)["nccl-all_reduce_perf-node-node04"]["rc"] == 124

    # #wrong > 0 at full bandwidth: data corruption FAIL on both nodes of the pair, bandwidth notwithstanding
    for h in ("node02", "node03"):
        data = pick(found[h], "nccl.all_reduce.data", "pair node02-node03")
        assert [f["status"] for f in data] == ["FAIL"], data
        assert data[0]["value"] == 2560 and "data corruption" in data[0]["message"]
        assert "out of bounds values: 2 FAILED" in data[0]["message"]
        assert [f["status"] for f in pick(found[h], "nccl.all_reduce.pair.busbw", "pair node02-node03")] == ["PASS"]
        assert [f["status"] for f in pick(found[h], "nccl.all_reduce.pairs.link")] == ["WARN"]
    assert {f["status"] for h in ("node01", "node04") for f in pick(found[h], "nccl.all_reduce.data")} == {"PASS"}
    assert {h: [f["status"] for f in pick(found[h], "nccl.all_reduce.pairs.node")] for h in found} == \
        {h: ["PASS"] for h in ("node01", "node02", "node03", "node04")}

    # --launcher-host: every job, retests none, ran its mpirun on node01
    assert len(launched(cluster, "node01")) == 4 + 4 + 1
    assert all(not launched(cluster, h) for h in ("node02", "node03", "node04"))
    assert "--timeout 2 " in launched(cluster, "node01")[0]

    # the bench run directory replays like any run: no probe ran, so none is graded and no host lacks
    # "collected output"; its hosts are checked by their jobs, with the same verdicts
    cluster.stop()
    proc = healthcheck("run", "--replay", run_dir, "--run-dir", tmp_path / "bench-replay")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert verdicts_of(tmp_path / "bench-replay") == verdicts_of(run_dir)
    replayed = expanded_document(tmp_path / "bench-replay")
    assert {h: v["verdict"] for h, v in replayed["hosts"].items()} == \
        {h: v["verdict"] for h, v in results["hosts"].items()} == \
        {"node01": "PASS", "node02": "FAIL", "node03": "FAIL", "node04": "ERROR"}
    assert replayed["run"]["probes"] == [] and "host.reachable" not in proc.stdout


def test_imb_pairs_graded_against_the_ndr_profile_name_the_slow_node(ssh_cluster_factory, tmp_path: Path) -> None:
    """IMB PingPong between node pairs through the real launch path, graded against h100-sxm5-8x's NDR
    numbers (latency <= 2 us, 48 GB/s): node03's pairs are slow, the attribution names it."""
    cluster = ssh_cluster_factory(4)
    install_mpirun(cluster, lambda group: (IMB_SLOW if "node03" in group else IMB_OK, 0, 0), program="*/IMB-MPI1")
    imb = {"benchmarks": {"imb": {"binary": "/opt/imb/bin/IMB-MPI1", "benchmarks": ["PingPong"]}}}
    inv = cluster.write_inventory(tmp_path / "inv.yaml", profile="h100-sxm5-8x",
                                  host_vars={h.name: imb for h in cluster.hosts})
    run_dir = tmp_path / "bench"
    proc = healthcheck("bench", "-i", inv, "-F", cluster.ssh_config, "--benchmarks", "imb", "--plan", "acceptance",
                       "--run-dir", run_dir)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    results = expanded_document(run_dir)
    found = {name: [f for f in host["findings"] if f["check"].startswith("imb.")]
             for name, host in results["hosts"].items()}

    # node03's pairs: 4.8 us > 2 us and 3.1 GB/s = 6 % of 48 GB/s, FAIL with measured, expected and source
    latency = [f for f in found["node03"] if f["check"] == "imb.pingpong.latency"]
    assert latency and {f["status"] for f in latency} == {"FAIL"}
    assert {f["value"] for f in latency} == {4.8} and "2" in latency[0]["expected"]
    bandwidth = [f for f in found["node03"] if f["check"] == "imb.pingpong.bandwidth"]
    assert {f["status"] for f in bandwidth} == {"FAIL"}
    assert bandwidth[0]["value"] == pytest.approx(3.089, abs=0.001) and "of 48 GB/s" in bandwidth[0]["expected"]
    assert "= 6% of expected 48 GB/s" in bandwidth[0]["message"]

    # healthy pairs pass on the NDR numbers (1.12 us, 47.6 GB/s = 99 %)
    healthy = [f for f in found["node01"] if f["check"].startswith("imb.pingpong.")
               and "node03" not in f["component"]]
    assert healthy and {f["status"] for f in healthy} == {"PASS"}
    assert {f["value"] for f in healthy if f["check"] == "imb.pingpong.latency"} == {1.12}

    # attribution: node03 is the bad node, the others are cleared; no link is blamed
    nodes = {h: [f["status"] for f in fs if f["check"] == "imb.pairs.node"] for h, fs in found.items()}
    assert nodes == {"node01": ["PASS"], "node02": ["PASS"], "node03": ["FAIL"], "node04": ["PASS"]}
    assert not any(f["check"] == "imb.pairs.link" for fs in found.values() for f in fs)
    bad = {h for h, fs in found.items() if any(f["status"] in ("FAIL", "ERROR") for f in fs)}
    assert bad == {"node03"}

    # the launch line we built ran on each pair's first node, with IMB's argv from the profile
    lines = [line for h in ("node01", "node02", "node03", "node04") for line in launched(cluster, h)]
    assert lines and all("--np 2 --hostfile hostfile" in line for line in lines)
    assert any(line.endswith("/opt/imb/bin/IMB-MPI1 PingPong -msglog 0:22") for line in lines), lines
