"""``healthcheck gate`` end to end on this machine: the real passive gpu probe and every active test through shims
that print our fixtures (tests/gateshims.py). Asserts verdicts, exit codes, what ran, was cached, dropped or
killed, and what the bundle holds; never timings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from healthcheck.core.model import Status
from healthcheck.ops.gate.run import GateOptions, gate_exit_code, run_gate
from tests.conftest import ROOT
from tests.gateshims import PROFILE, GateShims


@pytest.fixture
def shims(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> GateShims:
    made = GateShims.make(tmp_path / "shims")
    monkeypatch.setenv("PATH", f"{made.bin}:{os.environ['PATH']}")
    monkeypatch.setenv("HEALTHCHECK_PROFILES_DIR", str(made.profiles))
    return made


def gate(tmp_path: Path, **kw):
    opts = {"spool": tmp_path / "spool", "host": "gpu007", "profile": PROFILE, "probes": ["gpu"], "budget_s": 60.0,
            **kw}
    return run_gate(GateOptions(**opts))


def states(outcome) -> dict[str, str]:
    return {r.name: r.state for r in outcome.tests}


def test_healthy_node_runs_every_test_and_passes(tmp_path, shims):
    out = gate(tmp_path)
    assert out.exit_code == 0 and out.verdict is Status.PASS and out.first_failure is None
    assert states(out) == dict.fromkeys(("gpuperf", "copy", "dcgm_diag", "nccl", "sdc"), "ran")
    assert [r.tool for r in out.tests] == ["gpuperf", "nvbandwidth", "dcgmi", "all_reduce_perf", "sdc"]
    checks = {f.check for f in out.findings}
    assert {"gpu.count", "gpuperf.gemm", "gpuperf.gemm.siblings", "nvbandwidth.host_to_device_memcpy_ce",
            "dcgm.diag", "nccl.all_reduce.node.busbw", "nccl.all_reduce.node.transport", "sdc.checksum"} <= checks
    bundle = tmp_path / "spool" / "gpu007"
    assert sorted(p.name for p in (bundle / "raw" / "_gate").iterdir()) == sorted(
        f"{t}.{ext}" for t in ("gpuperf", "copy", "dcgm_diag", "nccl", "sdc") for ext in ("out", "err", "rc"))
    results = json.loads((bundle / "results.json").read_text())
    assert results["hosts"]["gpu007"]["verdict"] == "PASS"
    record = json.loads((bundle / "gate.json").read_text())
    assert record["budget_s"] == 60.0 and [t["state"] for t in record["tests"]] == ["ran"] * 5
    assert "-g 8" in " ".join(c for c in shims.calls() if c.startswith("nccl"))   # the node's 8 GPUs


def test_a_gpu_slower_than_its_siblings_fails_the_node_with_that_finding_first(tmp_path, shims):
    shims.set("gpuperf", "gpuperf/h100-8gpu-torch-gpu3-gemm-32pct-slow.txt")
    out = gate(tmp_path)
    assert out.exit_code == 1 and out.verdict is Status.FAIL
    first = out.first_failure
    assert (first.check, first.component) == ("gpuperf.gemm.siblings", "gpu3")


@pytest.mark.parametrize("tool,fixture,check", [
    ("nvbandwidth", "nvbandwidth/h100-8gpu-v0.8-gpu5-pcie-x8-gpu3-nvlink-half.txt",
     "nvbandwidth.host_to_device_memcpy_ce"),
    ("nccl", "nccl-tests/all_reduce-h100-1node-g8-1G-shm-fallback-38GBs.txt", "nccl.all_reduce.node.busbw"),
    ("dcgmi", "dcgmi/diag-r2-j-dcgm3.3-8gpu-gpu3-memory-fail.json", "dcgm.diag"),
    ("sdc", "sdc/h100-8gpu-torch-gpu5-differs.txt", "sdc.gpu.error"),
])
def test_each_active_test_can_fail_the_node(tmp_path, shims, tool, fixture, check):
    shims.set(tool, fixture)
    out = gate(tmp_path)
    assert out.exit_code == 1
    assert check in {f.check for f in out.findings if f.status is Status.FAIL}


def test_a_hung_test_is_killed_and_the_others_still_run(tmp_path, shims):
    shims.set("nccl", "hang")
    out = gate(tmp_path)
    nccl = next(r for r in out.tests if r.name == "nccl")
    assert nccl.state == "ran" and nccl.timed_out and nccl.timeout_s == 6.0
    assert states(out)["sdc"] == "ran"                       # the test after it still ran
    pid = shims.pid("nccl")
    assert pid is not None and not Path(f"/proc/{pid}").exists()   # its process group was killed
    hung = next(f for f in out.findings if f.check == "nccl.all_reduce.job")
    assert hung.status is Status.ERROR and "job hung" in hung.message
    assert out.verdict is Status.ERROR and out.exit_code == 0           # fail-open: our error never drains
    closed = gate(tmp_path, on_error="closed", cache_minutes=0)
    assert closed.exit_code == 1


def test_missing_tools_skip_or_fall_back_to_the_node_program(tmp_path, shims):
    (shims.bin / "nvbandwidth").unlink()
    (shims.bin / "dcgmi").unlink()
    out = gate(tmp_path)
    copy = next(r for r in out.tests if r.name == "copy")
    assert copy.state == "ran" and copy.tool == "gpuperf"                 # the node program's copy tests
    assert {"copy.h2d", "copy.d2h", "copy.d2d"} <= {f.check for f in out.findings}
    assert states(out)["dcgm_diag"] == "skipped"
    skip = next(f for f in out.findings if f.check == "gate.test" and f.component == "dcgm_diag")
    assert skip.status is Status.SKIP and "dcgmi not found" in skip.message
    assert out.exit_code == 0


def test_passing_tests_are_served_from_the_cache_and_failures_are_measured_again(tmp_path, shims):
    shims.set("sdc", "sdc/h100-8gpu-torch-gpu5-differs.txt")
    first = gate(tmp_path)
    calls = len(shims.calls())
    second = gate(tmp_path)
    assert states(second) == {"gpuperf": "cached", "copy": "cached", "dcgm_diag": "cached", "nccl": "cached",
                              "sdc": "ran"}
    new = shims.calls()[calls:]
    assert [c.split()[0] for c in new if not c.startswith("nvidia-smi")] == ["sdc"]   # only the failed test ran
    cached = next(f for f in second.findings if f.check == "gpuperf.gemm" and f.component == "gpu0")
    assert "[cached: measured by the gate at " in cached.message
    assert first.exit_code == second.exit_code == 1
    assert states(gate(tmp_path, cache_minutes=0))["gpuperf"] == "ran"


@pytest.mark.parametrize("damage", ["not json", '{"schema": "healthcheck.gate-cache/1", "key": "another boot"}',
                                    '{"schema": "healthcheck.gate-cache/1", "key": null, "tests": {"x": 1}}'])
def test_a_damaged_or_foreign_cache_is_ignored(tmp_path, shims, damage):
    gate(tmp_path)
    cache = tmp_path / "spool" / ".gate-cache" / "gpu007.json"
    assert cache.is_file()
    cache.write_text(damage)
    assert set(states(gate(tmp_path)).values()) == {"ran"}


def test_tests_whose_estimate_does_not_fit_are_dropped_and_reported(tmp_path, monkeypatch):
    made = GateShims.make(tmp_path / "shims", costs={"sdc": 500.0, "dcgm_diag": 400.0})
    monkeypatch.setenv("PATH", f"{made.bin}:{os.environ['PATH']}")
    monkeypatch.setenv("HEALTHCHECK_PROFILES_DIR", str(made.profiles))
    out = gate(tmp_path)
    assert states(out) == {"gpuperf": "ran", "copy": "ran", "nccl": "ran", "dcgm_diag": "dropped", "sdc": "dropped"}
    dropped = {f.component: f for f in out.findings if f.check == "gate.plan"}
    assert set(dropped) == {"dcgm_diag", "sdc"} and dropped["sdc"].status is Status.SKIP
    assert "estimated 500.0 s" in dropped["sdc"].message
    assert out.exit_code == 0


def test_a_node_the_passive_probes_fail_is_not_loaded_with_active_tests(tmp_path, shims):
    shims.set("nvidia-smi", "nvidia-smi-xml/h100-8x-faulty.xml")
    out = gate(tmp_path)
    assert out.exit_code == 1 and set(states(out).values()) == {"skipped"}
    assert not [c for c in shims.calls() if not c.startswith("nvidia-smi")]


def test_exit_code_policy():
    assert [gate_exit_code(s, "open") for s in (Status.PASS, Status.WARN, Status.ERROR, Status.FAIL)] == [0, 0, 0, 1]
    assert [gate_exit_code(s, "closed") for s in (Status.PASS, Status.WARN, Status.ERROR, Status.FAIL)] == [0, 0, 1, 1]


def _cli(tmp_path: Path, shims: GateShims, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{shims.bin}:{os.environ['PATH']}",
           "HEALTHCHECK_PROFILES_DIR": str(shims.profiles)}
    return subprocess.run([sys.executable, "-m", "healthcheck", "gate", "--out", str(tmp_path / "spool"), "--host",
                           "gpu007", "--profile", PROFILE, "--probes", "gpu", *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


def test_cli_the_budget_cuts_a_hung_test_before_its_own_timeout(tmp_path):
    shims = GateShims.make(tmp_path / "shims", timeout_s=600.0)     # each test may run 10 minutes...
    shims.set("gpuperf", "hang")
    proc = _cli(tmp_path, shims, "--budget", "20", "--cache-minutes", "0")   # ...but the gate has 20 s in all
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "spool" / "gpu007" / "gate.json").read_text())
    gpuperf = record["tests"][0]
    assert gpuperf["name"] == "gpuperf" and gpuperf["timed_out"] and gpuperf["timeout_s"] < 20
    assert {t["name"]: t["state"] for t in record["tests"][1:]} == dict.fromkeys(
        ("copy", "dcgm_diag", "nccl", "sdc"), "dropped")
    assert not Path(f"/proc/{shims.pid('gpuperf')}").exists()
    assert "# test gpuperf: ran" in proc.stdout and "killed after" in proc.stdout


def test_cli_own_errors_fail_open_by_default_and_closed_on_request(tmp_path):
    shims = GateShims.make(tmp_path / "shims")
    proc = _cli(tmp_path, shims, "--tests", "gpuperf,nonsense")
    assert proc.returncode == 0 and "gate error (job may start, --on-error open)" in proc.stderr
    assert "unknown gate test(s) nonsense" in proc.stderr
    closed = _cli(tmp_path, shims, "--tests", "gpuperf,nonsense", "--on-error", "closed")
    assert closed.returncode == 1 and "gate error (node fails, --on-error closed)" in closed.stderr


def test_watchdog_ends_the_process_at_its_deadline_and_kills_the_test_groups(tmp_path):
    script = (
        "import subprocess, sys, time\n"
        "from healthcheck.ops.gate.exec import ChildGroups, Watchdog\n"
        "groups = ChildGroups()\n"
        "child = subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
        f"open({str(tmp_path / 'pid')!r}, 'w').write(str(child.pid))\n"
        "groups.add(child.pid)\n"
        "Watchdog(time.monotonic() + 1.0, 7, groups, on_fire=lambda: print('fired', flush=True)).start()\n"
        "time.sleep(600)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (proc.returncode, proc.stdout) == (7, "fired\n")
    pid = int((tmp_path / "pid").read_text())
    assert _gone_within(pid, 10.0)  # SIGKILL is delivered when the process next runs: on a loaded machine, later


def _gone_within(pid: int, seconds: float) -> bool:
    """The process has exited (gone or a zombie) within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if "Z" in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]:
                return True
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return True
        time.sleep(0.05)
    return False
