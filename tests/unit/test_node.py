"""``healthcheck node``: bundle in the spool, NHC exit, budget, atomic textfile, CLI lines.

An ``nvidia-smi`` shim first on PATH prints our own H100 fixtures (healthy, or faulty: gpu2 row
remap pending, gpu5 at x8, gpu6 HW slowdown); the local transport runs the real framed script.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from healthcheck.ops.node import NodeOptions, node_name, run_node
from tests.conftest import FIXTURES, ROOT


@pytest.fixture
def shim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The shim prints the fixture named by the file ``which`` (healthy by default)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    which = tmp_path / "which"
    which.write_text("healthy")
    xml = FIXTURES / "nvidia-smi-xml"
    (folder / "nvidia-smi").write_text(
        f"#!/bin/sh\nexec cat {shlex.quote(str(xml))}/h100-8x-$(cat {shlex.quote(str(which))}).xml\n")
    (folder / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    return which


def test_faulty_node_exit_1_first_failure_and_bundle(tmp_path: Path, shim: Path) -> None:
    shim.write_text("faulty")
    out = run_node(NodeOptions(spool=tmp_path / "spool", host="gpu007", probes=["gpu"], profile="h100-sxm5-8x"))
    assert out.exit_code == 1
    first = out.first_failure
    assert first is not None and (first.check, first.component) == ("gpu.pcie.width", "gpu5")
    bundle = tmp_path / "spool" / "gpu007"
    assert out.bundle == bundle
    assert (bundle / "raw" / "gpu007" / "nvidia-smi-q-x.out").read_bytes() == \
        (FIXTURES / "nvidia-smi-xml" / "h100-8x-faulty.xml").read_bytes()
    results = json.loads((bundle / "results.json").read_text())
    assert results["hosts"]["gpu007"]["verdict"] == "FAIL"
    assert sorted(p.name for p in (tmp_path / "spool").iterdir()) == ["gpu007"]  # no staging left behind


def test_next_run_replaces_the_bundle_and_healthy_exits_0(tmp_path: Path, shim: Path) -> None:
    shim.write_text("faulty")
    spool = tmp_path / "spool"
    run_node(NodeOptions(spool=spool, host="gpu007", probes=["gpu"], profile="h100-sxm5-8x"))
    shim.write_text("healthy")
    out = run_node(NodeOptions(spool=spool, host="gpu007", probes=["gpu"], profile="h100-sxm5-8x"))
    assert out.exit_code == 0 and out.first_failure is None
    assert json.loads((spool / "gpu007" / "results.json").read_text())["hosts"]["gpu007"]["verdict"] == "PASS"
    assert sorted(p.name for p in spool.iterdir()) == ["gpu007"]


def test_budget_leaves_out_unsafe_and_costly_probes_and_prom_is_written(tmp_path: Path, shim: Path) -> None:
    prom = tmp_path / "textfile" / "healthcheck.prom"
    out = run_node(NodeOptions(spool=tmp_path / "spool", host="gpu007", budget_s=3, profile="h100-sxm5-8x",
                               prom_file=prom))
    assert out.results.run["probes"] == ["system", "gpu"]
    assert out.left_out["dcgm"].startswith("not safe while a job runs")
    text = prom.read_text()
    verdict = out.results.hosts["gpu007"].verdict.value  # WARN: this machine's hostname is not gpu007
    assert f'healthcheck_host_verdict{{host="gpu007",verdict="{verdict}"}} 1.0' in text and verdict == "WARN"
    assert 'run_id="gpu007"' in text
    # metrics.prom is bounded by default: counts per status, check_status only for checks not passing
    assert 'healthcheck_host_findings{host="gpu007",status="PASS"}' in text
    assert 'check="gpu.row_remap.pending"' not in text
    assert [p.name for p in prom.parent.iterdir()] == ["healthcheck.prom"]  # the temp file was renamed


def test_node_name_prefers_explicit_then_slurmd() -> None:
    assert node_name("a", {"SLURMD_NODENAME": "b"}) == "a"
    assert node_name(None, {"SLURMD_NODENAME": "b"}) == "b"


def test_a_spool_entry_that_is_not_a_bundle_is_refused(tmp_path: Path, shim: Path) -> None:
    (tmp_path / "gpu007").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ValueError, match="exists and is not a healthcheck bundle"):
        run_node(NodeOptions(spool=tmp_path, host="gpu007", probes=["gpu"]))
    assert not (tmp_path / "elsewhere").exists()


def test_cli_prints_non_pass_lines_and_first_failure_on_stderr(tmp_path: Path, shim: Path) -> None:
    shim.write_text("faulty")
    proc = subprocess.run([sys.executable, "-m", "healthcheck", "node", "--out", str(tmp_path), "--host", "gpu007",
                           "--probes", "gpu", "--profile", "h100-sxm5-8x"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert "FAIL  gpu.row_remap.pending gpu2: gpu2 (00000000:4C:00.0): row remap pending: Yes (0 correctable, " \
           "1 uncorrectable remaps; bank histogram max 2559, high 1, partial 0, low 0, none 0)" in lines
    assert not any(line.startswith("PASS") for line in lines)
    assert proc.stderr.startswith("healthcheck: Health check failed: FAIL  gpu.pcie.width gpu5: ")


def test_staging_left_by_a_killed_run_is_removed_later(tmp_path: Path, shim: Path) -> None:
    spool = tmp_path / "spool"
    old, fresh, other = spool / ".gpu007.tmp-4242", spool / ".gpu007.tmp-4343", spool / ".gpu008.tmp-1"
    for folder in (old, fresh, other):
        (folder / "raw").mkdir(parents=True)
    os.utime(old, (1, 1))
    os.utime(other, (1, 1))
    run_node(NodeOptions(spool=spool, host="gpu007", probes=["gpu"], profile="h100-sxm5-8x"))
    assert sorted(p.name for p in spool.iterdir()) == [".gpu007.tmp-4343", ".gpu008.tmp-1", "gpu007"]


def test_inventory_entry_gives_the_profile_and_an_absent_host_is_a_setup_error(tmp_path: Path, shim: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text("hosts:\n  gpu007: {profile: h100-sxm5-8x}\n  gpu008: {}\n")
    shim.write_text("faulty")
    out = run_node(NodeOptions(spool=tmp_path / "spool", host="gpu007", inventory=inv, probes=["gpu"]))
    assert out.results.hosts["gpu007"].profile == "h100-sxm5-8x" and out.exit_code == 1
    with pytest.raises(ValueError, match="host gpu009 is not in inventory"):
        run_node(NodeOptions(spool=tmp_path / "spool", host="gpu009", inventory=inv, probes=["gpu"]))
    assert sorted(p.name for p in (tmp_path / "spool").iterdir()) == ["gpu007"]


def test_an_observe_only_fail_is_not_an_unhealthy_exit(tmp_path: Path, shim: Path) -> None:
    """Issue 29.11: the exit code follows the drain rule: the faulty fixture's FAILs (gpu5 at x8, gpu2 row
    remap pending, gpu6 HW slowdown) marked observe-only by the site's profile are reported, exit 0."""
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "site-h100.yaml").write_text(
        "name: site-h100\ninherits: h100-sxm5-8x\nobserve: [gpu.pcie.width, gpu.row_remap, gpu.clock_events]\n")
    inv = tmp_path / "inv.yaml"
    inv.write_text("hosts:\n  gpu007: {profile: site-h100}\n")
    shim.write_text("faulty")
    out = run_node(NodeOptions(spool=tmp_path / "spool", host="gpu007", inventory=inv, probes=["gpu"]))
    observed = sorted({f.check for f in out.findings if f.observe and f.status.value == "FAIL"})
    assert observed == ["gpu.clock_events", "gpu.pcie.width", "gpu.row_remap.pending"]
    assert (out.first_failure, out.exit_code) == (None, 0)
