"""nvbandwidth: its text layouts (v0.7/v0.8, README and issues #15 #34 #42 #48 #50: tests/fixtures/nvbandwidth/
README.md) parsed, graded per path against the profile and against sibling paths; a data-verification abort is
FAIL, a matrix cut mid-row a parse error. No real nvbandwidth output is in ../shared/corpus yet."""

from __future__ import annotations

import pytest

from healthcheck.benchmarks import BenchContext, get
from healthcheck.benchmarks.nvbandwidth import parse_nvbandwidth, program_nvbandwidth
from healthcheck.benchmarks.plan import Job
from healthcheck.core.model import Status
from healthcheck.core.profiles import EMPTY_PROFILE, load_profile
from healthcheck.core.spec import ParseError
from tests.conftest import fixture_text

H100 = load_profile("h100-sxm5-8x")
JOB = Job(job_id="nvbandwidth.nvbandwidth.node.gpu001", benchmark="nvbandwidth", test="nvbandwidth", shape="node",
          hosts=("gpu001",), ranks_per_host=1)


def grade(name: str, profile=H100):
    return get("nvbandwidth").evaluate(JOB, parse_nvbandwidth(fixture_text(f"nvbandwidth/{name}")),
                                       BenchContext(profile, {}))


def bad(findings):
    return sorted((f.check, f.component, f.status.value) for f in findings if f.status is not Status.PASS)


def test_parse_header_devices_and_matrices():
    result = parse_nvbandwidth(fixture_text("nvbandwidth/h100-8gpu-v0.8-h2d-d2h-d2d-healthy.txt"))
    assert (result.version, result.cuda_runtime, result.driver) == ("v0.8", "12040", "550.90.07")
    assert result.devices[5] == (5, "NVIDIA H100 80GB HBM3", "00000000:bb:00")
    names = [t.name for t in result.testcases]
    assert names == ["host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "device_to_device_memcpy_read_ce"]
    h2d, d2h, d2d = (t.matrices[0] for t in result.testcases)
    assert h2d.cells()[0][:2] == ("cpu0", "gpu0") and d2h.cells()[0][:2] == ("gpu0", "cpu0")  # "<-": from the GPU
    assert d2d.cells()[0] == ("gpu0", "gpu0", None) and len(d2d.cells()) == 64
    assert result.testcases[0].sum_value == 442.49


def test_healthy_node_passes_every_path_against_the_h100_profile():
    findings = grade("h100-8gpu-v0.8-h2d-d2h-d2d-healthy.txt")
    assert bad(findings) == []
    d2d = [f for f in findings if f.check == "nvbandwidth.device_to_device_memcpy_read_ce"]
    assert len(d2d) == 56 and d2d[0].component == "gpu0->gpu1" and "of expected 450 GB/s" in d2d[0].message


def test_slow_host_link_and_slow_nvlink_gpu_are_named_per_path():
    findings = grade("h100-8gpu-v0.8-gpu5-pcie-x8-gpu3-nvlink-half.txt")
    problems = bad(findings)
    assert ("nvbandwidth.host_to_device_memcpy_ce", "gpu5", "FAIL") in problems   # 26.7 of 64 GB/s = 42%
    assert ("nvbandwidth.host_to_device_memcpy_ce.siblings", "gpu5", "FAIL") in problems
    assert ("nvbandwidth.device_to_host_memcpy_ce.siblings", "gpu5", "FAIL") in problems
    pairs = {c for check, c, s in problems if check == "nvbandwidth.device_to_device_memcpy_read_ce.siblings"}
    assert pairs == {f"gpu{i}->gpu3" for i in range(8) if i != 3} | {f"gpu3->gpu{i}" for i in range(8) if i != 3}
    assert {c for _, c, _ in problems} <= pairs | {"gpu5"}


def test_without_a_profile_the_siblings_still_find_the_slow_gpu_and_expectations_skip():
    findings = grade("h100-8gpu-v0.8-device-local-copy-gpu6-slow.txt", EMPTY_PROFILE)
    assert bad(findings) == [("nvbandwidth.device_local_copy", "node", "SKIP"),
                             ("nvbandwidth.device_local_copy.siblings", "gpu6", "FAIL")]
    with_profile = grade("h100-8gpu-v0.8-device-local-copy-gpu6-slow.txt")
    slow = next(f for f in with_profile if f.check == "nvbandwidth.device_local_copy" and f.component == "gpu6")
    assert slow.status is Status.WARN and slow.value == 2024.74     # 2 x 1012.37 = 60% of 3350: read + write
    assert "Low memory bandwidth" in slow.remedy
    ok = next(f for f in with_profile if f.check == "nvbandwidth.device_local_copy" and f.component == "gpu0")
    assert ok.status is Status.PASS and "of expected 3350 GB/s" in ok.message


def test_data_verification_abort_is_a_fail_and_the_interrupted_testcase_is_not_counted_twice():
    findings = grade("h100-8gpu-v0.7-d2d-read-verify-assert.txt")
    assert bad(findings) == [("copy.verify", "node", "FAIL")]
    assert "after device_to_device_memcpy_read_ce found a wrong value" in findings[0].message


def test_missing_peer_paths_and_waived_tests_skip_without_expectation_fail_with_one():
    findings = grade("l40s-4gpu-v0.8-gpu2-no-peer-access-na.txt", EMPTY_PROFILE)
    assert ("nvbandwidth.waived", "node", "SKIP") in bad(findings)
    paths = [c for check, c, s in bad(findings) if check.endswith(".path")]
    assert paths == ["gpu0->gpu2", "gpu1->gpu2", "gpu2->gpu0", "gpu2->gpu1", "gpu2->gpu3", "gpu3->gpu2"]
    expected = grade("l40s-4gpu-v0.8-gpu2-no-peer-access-na.txt")   # the H100 profile expects GPU-to-GPU copies
    assert {s for check, _, s in bad(expected) if check.endswith(".path")} == {"FAIL"}


@pytest.mark.parametrize("text", ["", "garbage\nmore garbage\n", fixture_text("nvbandwidth/bad/truncated-mid-row.txt"),
                                  fixture_text("nvbandwidth/h100-8gpu-v0.8-h2d-d2h-d2d-healthy.txt").replace(
                                      "55.", "nan", 1)])
def test_foreign_or_cut_output_is_a_parse_error(text):
    with pytest.raises(ParseError):
        parse_nvbandwidth(text)


def test_an_excerpt_without_its_running_line_takes_the_name_from_sum():
    text = ("memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)\n           0         1\n 0       N/A     26.34\n"
            " 1     26.35       N/A\n\nSUM device_to_device_memcpy_read_ce 52.69\n")
    (test,) = parse_nvbandwidth(text).testcases
    assert test.name == "device_to_device_memcpy_read_ce" and test.sum_value == 52.69


def test_program_runs_the_graded_paths_with_site_settings():
    assert program_nvbandwidth(JOB, H100, {}).argv == (
        "nvbandwidth", "-t", "host_to_device_memcpy_ce", "-t", "device_to_host_memcpy_ce",
        "-t", "device_to_device_memcpy_read_ce")
    argv = program_nvbandwidth(JOB, H100, {"nvbandwidth.binary": "/opt/nvb/nvbandwidth", "nvbandwidth.tests":
                                           "device_local_copy", "nvbandwidth.buffer_mib": 256,
                                           "nvbandwidth.samples": 1}).argv
    assert argv == ("/opt/nvb/nvbandwidth", "-t", "device_local_copy", "-b", "256", "-i", "1")


def test_acceptance_runs_launch_nvbandwidth_and_gpuperf_on_the_node(tmp_path):
    """``healthcheck run --local --benchmarks gpuperf,nvbandwidth``: both run directly on the node (no MPI), their
    outputs land in raw/_jobs/ and are graded (nvbandwidth: a shim printing our healthy fixture; gpuperf: the real
    node program with NumPy, so only which checks exist is asserted, not CPU timings)."""
    import json
    import os
    import shlex
    import subprocess
    import sys

    from tests.conftest import FIXTURES, ROOT

    shim = tmp_path / "nvbandwidth"
    fixture = FIXTURES / "nvbandwidth" / "h100-8gpu-v0.8-h2d-d2h-d2d-healthy.txt"
    shim.write_text(f"#!/bin/sh\nexec cat {shlex.quote(str(fixture))}\n")
    shim.chmod(0o755)
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "h100-cpu.yaml").write_text(
        "name: h100-cpu\ndescription: h100-sxm5-8x, node programs on NumPy\ninherits: h100-sxm5-8x\nsettings:\n"
        f"  benchmarks:\n    nvbandwidth: {{binary: {shim}}}\n    gpuperf: {{impl: numpy, devices: 2, gemm_n: 64, "
        f"copy_mib: 1, gemm_iters: 2, copy_iters: 2, python: {sys.executable}}}\n")
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "healthcheck", "run", "--local", "--probes", "system", "--benchmarks",
                           "gpuperf,nvbandwidth", "--profile", "h100-cpu", "--run-dir", str(run_dir)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "HEALTHCHECK_PROFILES_DIR": str(profiles)})
    jobs = json.loads((run_dir / "raw" / "_jobs" / "manifest.json").read_text())
    benchmarks = sorted(j["job"]["benchmark"] for j in jobs["jobs"])
    assert benchmarks == ["gpuperf", "nvbandwidth"], proc.stderr[-2000:]
    from healthcheck.store.results import load_results

    findings = list(load_results(run_dir).findings())
    checks = {f.check: f.status for f in findings}
    assert checks["nvbandwidth.host_to_device_memcpy_ce"] is Status.PASS
    assert {"gpuperf.gemm", "gpuperf.gemm.siblings", "copy.h2d", "copy.d2d"} <= set(checks)
