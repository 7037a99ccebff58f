"""The README's first command: replay the bundled sample capture, one node faulty."""

from __future__ import annotations

import filecmp
import json
import runpy
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "inventories" / "samples" / "h100-4node"


def test_readme_first_command_replays_the_sample(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "healthcheck", "run", "--replay", str(SAMPLE), "--out",
                           str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("verdict FAIL: 4 hosts  PASS 2  WARN 1  FAIL 1")
    [run_dir] = [p for p in tmp_path.iterdir() if not p.is_symlink()]
    assert (tmp_path / "latest").resolve() == run_dir  # runs/latest: the newest run
    results = json.loads((run_dir / "results.json").read_text())
    verdicts = {h: r["verdict"] for h, r in results["hosts"].items()}
    assert verdicts == {"h100-node01": "PASS", "h100-node02": "PASS", "h100-node03": "FAIL", "h100-node04": "WARN"}
    failing = {(f["check"], f["component"]) for f in results["hosts"]["h100-node03"]["findings"]
               if f["status"] == "FAIL"}
    assert {("gpu.row_remap.pending", "gpu2"), ("gpu.pcie.width", "gpu5"), ("gpu.clock_events", "gpu6"),
            ("nvlink.link.active", "gpu3 link 5"), ("ib.port.state", "mlx5_10/1")} <= failing
    [kernel] = [f for f in results["hosts"]["h100-node04"]["findings"] if f["status"] == "WARN"]
    assert kernel["check"] == "fleet.version.kernel" and "5.15.0-1053-nvidia" in kernel["message"]
    for name in ("report.html", "junit.xml", "metrics.prom", "summary.md", "findings.jsonl", "manifest.json"):
        assert (run_dir / name).is_file(), name


def test_sample_is_in_sync_with_its_fixtures(tmp_path):
    module = runpy.run_path(str(ROOT / "inventories" / "samples" / "build_sample.py"))
    module["main"](tmp_path / "h100-4node")
    diff = filecmp.dircmp(SAMPLE, tmp_path / "h100-4node")
    mismatched = []

    def walk(d: filecmp.dircmp) -> None:
        mismatched.extend(d.diff_files + d.left_only + d.right_only)
        for sub in d.subdirs.values():
            walk(sub)

    walk(diff)
    assert mismatched == [], "run: python inventories/samples/build_sample.py"
