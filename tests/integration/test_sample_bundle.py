"""The README's first command: replay the bundled sample capture, one node faulty."""

from __future__ import annotations

import filecmp
import json
import runpy
import subprocess
import sys
from pathlib import Path

from healthcheck.store.findings_table import read_table

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "inventories" / "samples" / "h100-4node-acceptance"  # what `healthcheck run --sample` replays
PROBES_ONLY = ROOT / "inventories" / "samples" / "h100-4node"


def test_readme_first_command_replays_the_sample(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "healthcheck", "run", "--sample", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("verdict FAIL: 4 hosts  PASS 2  WARN 1  FAIL 1")
    [run_dir] = [p for p in tmp_path.iterdir() if not p.is_symlink()]
    assert (tmp_path / "latest").resolve() == run_dir  # runs/latest: the newest run
    results = json.loads((run_dir / "results.json").read_text())
    verdicts = {h: r["verdict"] for h, r in results["hosts"].items()}
    # the healthy nodes are graded on the 4-node job's rerun without node03 and PASS; node04 WARNs for its kernel
    assert verdicts == {"h100-node01": "PASS", "h100-node02": "PASS", "h100-node03": "FAIL", "h100-node04": "WARN"}
    assert "WARN  fleet.version.kernel h100-node04 (1): kernel 5.15.0-1061-nvidia differs" in proc.stdout
    failing = {(f["check"], f["component"]) for f in results["hosts"]["h100-node03"]["findings"]
               if f["status"] == "FAIL"}
    assert {("gpu.row_remap.pending", "gpu2"), ("gpu.pcie.width", "gpu5"), ("gpu.clock_events", "gpu6"),
            ("nvlink.link.active", "gpu3 link 5"), ("ib.port.state", "mlx5_10/1")} <= failing
    [kernel] = [f for f in results["hosts"]["h100-node04"]["findings"] if f["check"] == "fleet.version.kernel"]
    assert kernel["status"] == "WARN" and "5.15.0-1053-nvidia" in kernel["message"]
    assert_benchmark_story(run_dir)
    assert_reports_carry_the_benchmarks(run_dir)
    for name in ("report.html", "junit.xml", "metrics.prom", "summary.md", "findings.table.json.gz", "manifest.json"):
        assert (run_dir / name).is_file(), name
    assert not (run_dir / "findings.jsonl").exists()  # a replay keeps no journal: one findings store


def test_sample_is_in_sync_with_its_fixtures(tmp_path):
    module = runpy.run_path(str(ROOT / "inventories" / "samples" / "build_sample.py"))
    module["build_all"](tmp_path)
    mismatched = []

    def walk(d: filecmp.dircmp) -> None:
        mismatched.extend(d.diff_files + d.left_only + d.right_only)
        for sub in d.subdirs.values():
            walk(sub)

    for bundle in (SAMPLE, PROBES_ONLY):
        walk(filecmp.dircmp(bundle, tmp_path / bundle.name))
    assert not (PROBES_ONLY / "raw" / "_jobs").exists()  # the probe-only bundle the other tests replay
    assert mismatched == [], "run: python inventories/samples/build_sample.py"


def _findings(run_dir: Path) -> list[dict]:
    return [f.to_json() for host in read_table(run_dir).values() for f in host]


def assert_benchmark_story(run_dir: Path) -> None:
    """The sample's benchmark jobs tell node03's story: low NVLink busbw, slow pairs blamed on it, a throttling GPU."""
    found = {(f["host"], f["check"], f["component"], f["source"]): f for f in _findings(run_dir)}

    def one(host: str, check: str, component: str, source: str) -> dict:
        return found[(host, check, component, source)]

    for host in ("h100-node01", "h100-node02", "h100-node04"):  # healthy: excellent band, HPL > 80% of Rpeak
        node = one(host, "nccl.all_reduce.node.busbw", "node", f"nccl-all_reduce_perf-node-{host}")
        assert (node["status"], node["value"]) == ("PASS", 476.03) and "excellent" in node["message"]
        hpl = one(host, "hpl.node.gflops", "node", f"hpl-hpl-node-{host}")
        assert (hpl["status"], hpl["value"]) == ("PASS", 456200.0) and "85% of Rpeak" in hpl["message"]
        cluster = one(host, "nccl.all_reduce.cluster.busbw", "cluster (4 nodes)",
                      "nccl-all_reduce_perf-cluster-4nodes-h100-node01")
        assert cluster["status"] == "SKIP" and cluster["message"].endswith(
            f"[not graded for {host}: the job included h100-node03, bad in the pair tests; graded on its rerun "
            "cluster (3 nodes, without h100-node03)]")
        rerun = one(host, "nccl.all_reduce.cluster.busbw", "cluster (3 nodes, without h100-node03)",
                    "nccl-all_reduce_perf-retest-3nodes-h100-node01-without-h100-node03")
        assert (rerun["status"], rerun["value"]) == ("PASS", 372.6) and "98% of expected 380 GB/s" in rerun["message"]
    bad = "h100-node03"
    node = one(bad, "nccl.all_reduce.node.busbw", "node", "nccl-all_reduce_perf-node-h100-node03")
    assert (node["status"], node["value"]) == ("FAIL", 210.25) and "44% of expected 480 GB/s" in node["message"]
    cluster = one(bad, "nccl.all_reduce.cluster.busbw", "cluster (4 nodes)",
                  "nccl-all_reduce_perf-cluster-4nodes-h100-node01")
    assert (cluster["status"], cluster["value"]) == ("FAIL", 138.92) and "of expected 380 GB/s" in cluster["message"]
    # the pairs: slow with every partner, FAIL on node03 and PASS (attributed to node03) on its partners
    for a, b in (("h100-node01", "h100-node03"), ("h100-node02", "h100-node03"), ("h100-node03", "h100-node04")):
        source = f"nccl-all_reduce_perf-pair-{a}-{b}"
        assert (one(bad, "nccl.all_reduce.pair.busbw", f"pair {a}-{b}", source)["value"]) == 141.18
        assert one(bad, "nccl.all_reduce.pair.busbw", f"pair {a}-{b}", source)["status"] == "FAIL"
        partner = one(a if b == bad else b, "nccl.all_reduce.pair.busbw", f"pair {a}-{b}", source)
        assert partner["status"] == "PASS" and "attributed to h100-node03" in partner["message"]
    blame = one(bad, "nccl.all_reduce.pairs.node", "node", "attribution")
    assert blame["status"] == "FAIL" and "the retest with known-good h100-node01 failed too" in blame["message"]
    assert one("h100-node01", "nccl.all_reduce.pairs.node", "node", "attribution")["status"] == "PASS"
    healthy_pair = one("h100-node01", "nccl.all_reduce.pair.busbw", "pair h100-node01-h100-node02",
                       "nccl-all_reduce_perf-pair-h100-node01-h100-node02")
    assert (healthy_pair["status"], healthy_pair["value"]) == ("PASS", 388.77)
    imb = one(bad, "imb.pingpong.latency", "pair h100-node01-h100-node03", "imb-IMB-MPI1-pair-h100-node01-h100-node03")
    assert (imb["status"], imb["value"]) == ("FAIL", 4.8)
    assert one(bad, "imb.pairs.node", "node", "attribution")["status"] == "FAIL"
    hpl = one(bad, "hpl.node.gflops", "node", "hpl-hpl-node-h100-node03")
    assert hpl["value"] == 371800.0 and "69% of Rpeak" in hpl["message"]
    slow = [f for f in found.values() if f["check"] == "telemetry.clock_event.hw_slowdown" and f["status"] == "FAIL"]
    assert [(f["host"], f["component"], f["value"]) for f in slow] == [(bad, "gpu6", 10.0)]


def assert_reports_carry_the_benchmarks(run_dir: Path) -> None:
    """summary.md, junit.xml and metrics.prom carry busbw per node and per pair, with the band."""
    summary = (run_dir / "summary.md").read_text()
    section = summary.split("### Bandwidth vs expectation", 1)[1].split("###", 1)[0]
    assert ("| FAIL | broken | `nccl.all_reduce.node.busbw` | node | `h100-node03` | 210.25 GB/s | 44% |"
            in section)
    assert ("| PASS | excellent | `nccl.all_reduce.node.busbw` | node | `h100-node01` | 476.03 GB/s | 99% |"
            in section)
    assert ("| FAIL | broken | `nccl.all_reduce.pair.busbw` | pair h100-node01-h100-node03 (blamed: `h100-node03`) | "
            "`h100-node[01,03]` | 141.18 GB/s | 37% |" in section)
    assert ("| PASS | excellent | `nccl.all_reduce.pair.busbw` | pair h100-node01-h100-node02 | `h100-node[01-02]` | "
            "388.77 GB/s | 102% |" in section)
    assert summary.index("### Bandwidth vs expectation") < summary.index("### Findings (grouped across hosts)")
    junit = (run_dir / "junit.xml").read_text()
    assert 'name="nccl.all_reduce.node.busbw' in junit and "210.2 GB/s = 44% of expected 480 GB/s (broken" in junit
    metrics = (run_dir / "metrics.prom").read_text()
    assert 'healthcheck_nccl_busbw_bytes_per_second{host="h100-node03",test="all_reduce_perf"} 2.1025e+11' in metrics
    assert ('healthcheck_check_status{check="nccl.all_reduce.pair.busbw",host="h100-node03",status="FAIL"} 4.0'
            in metrics)
    assert ('healthcheck_pair_bandwidth_bytes_per_second{benchmark="nccl all_reduce_perf",host_a="h100-node01",'
            'host_b="h100-node03"} 1.4118e+11' in metrics)
