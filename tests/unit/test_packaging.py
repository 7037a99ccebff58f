"""Site profiles (--profiles-dir, HEALTHCHECK_PROFILES_DIR), `profiles validate`, the built-in sample
(`run --sample`) and data files found through importlib.resources, not the checkout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from healthcheck.cli.main import main
from healthcheck.core import profiles
from healthcheck.inventories import SAMPLE_BUNDLE

SITE_PROFILE = """\
name: site-h100
description: our H100 nodes
inherits: h100-sxm5-8x
expect:
  gpu.count: {op: eq, value: 4, unit: GPUs, source: "site build sheet rev 3"}
"""


@pytest.fixture(autouse=True)
def _no_site_dirs(monkeypatch):
    monkeypatch.delenv(profiles.SITE_DIRS_ENV, raising=False)
    yield
    profiles.set_site_dirs(())


def test_site_profiles_dir_is_searched_before_builtin(tmp_path: Path) -> None:
    (tmp_path / "site-h100.yaml").write_text(SITE_PROFILE)
    runner = CliRunner()
    assert "site-h100" not in runner.invoke(main, ["profiles", "list"]).output
    listed = runner.invoke(main, ["--profiles-dir", str(tmp_path), "profiles", "list"])
    assert listed.exit_code == 0
    assert "site-h100" in listed.output and "h100-sxm5-8x" in listed.output
    shown = runner.invoke(main, ["--profiles-dir", str(tmp_path), "profiles", "show", "site-h100"])
    assert "gpu.count" in shown.output and "site build sheet rev 3" in shown.output


def test_site_profiles_dir_from_environment_also_shadows_builtin(tmp_path: Path, monkeypatch) -> None:
    # a site copy of a built-in name wins: the site folder is searched first
    (tmp_path / "h100-sxm5-8x.yaml").write_text(SITE_PROFILE.replace("inherits: h100-sxm5-8x\n", ""))
    monkeypatch.setenv(profiles.SITE_DIRS_ENV, str(tmp_path))
    prof = profiles.load_profile("h100-sxm5-8x")
    assert prof.path == str(tmp_path / "h100-sxm5-8x.yaml")
    assert prof.expect("gpu.count").value == 4


def test_replay_grades_with_a_site_profile(tmp_path: Path) -> None:
    (tmp_path / "prof").mkdir()
    (tmp_path / "prof" / "site-h100.yaml").write_text(SITE_PROFILE)
    result = CliRunner().invoke(main, ["--profiles-dir", str(tmp_path / "prof"), "run", "--sample",
                                       "--profile", "site-h100", "--run-dir", str(tmp_path / "run")])
    doc = json.loads((tmp_path / "run" / "results.json").read_text())
    counts = [f for h in doc["hosts"].values() for f in h["findings"] if f["check"] == "gpu.count"]
    assert counts and all(f["status"] == "FAIL" and "4" in str(f["expected"]) for f in counts), result.output


def test_profiles_validate_reports_every_problem_and_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nsetings: {}\nexpect:\n  gpu.count: {op: eq, valeu: 8}\n"
                   "  nccl.busbw: {op: ge, value: fast, source: nccl-tests PERFORMANCE.md}\n")
    result = CliRunner().invoke(main, ["profiles", "validate", str(bad)])
    assert result.exit_code == 2
    lines = [line.split(": ", 1)[1] for line in result.output.splitlines()]
    assert lines == [
        "unknown key 'setings' (did you mean 'settings'?)",
        "expectation 'gpu.count' has unknown key 'valeu' (did you mean 'value'?)",
        "expectation 'gpu.count' has no source (every threshold cites a datasheet or document)",
        "expectation 'nccl.busbw': op ge needs a number, got str 'fast'",
    ]


def test_every_builtin_profile_validates() -> None:
    files = sorted(profiles.PROJECT_PROFILES.glob("*.yaml"))
    assert len(files) >= 6
    result = CliRunner().invoke(main, ["profiles", "validate", *map(str, files)])
    assert result.exit_code == 0, result.output
    assert result.output.count(": ok") == len(files)


def test_sample_runs_from_package_data(tmp_path: Path) -> None:
    assert (SAMPLE_BUNDLE / "manifest.json").is_file()
    result = CliRunner().invoke(main, ["run", "--sample", "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 1  # the sample's node03 is faulty
    assert "verdict FAIL: 4 hosts" in result.output
    assert CliRunner().invoke(main, ["run", "--sample", "--local"]).exit_code == 2
