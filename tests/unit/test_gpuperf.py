"""gpuperf: our node program's format parsed, graded against the profile and against the node's own GPUs (a GPU
30% slower than its siblings is a FAIL with no profile at all), and the program itself run with NumPy."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from importlib.resources import files

import pytest

from healthcheck.benchmarks import BenchContext, get
from healthcheck.benchmarks.gpuperf import parse_gpuperf, profile_dtype, program_argv
from healthcheck.benchmarks.perfgrade import Reading, sibling_findings
from healthcheck.benchmarks.plan import Job
from healthcheck.core.model import Status
from healthcheck.core.profiles import EMPTY_PROFILE, Expectation, Profile, load_profile
from healthcheck.core.spec import ParseError
from tests.conftest import fixture_text

H100 = load_profile("h100-sxm5-8x")
JOB = Job(job_id="gpuperf.gpuperf.node.gpu001", benchmark="gpuperf", test="gpuperf", shape="node",
          hosts=("gpu001",), ranks_per_host=1)


def grade(name: str, profile: Profile = H100):
    return get("gpuperf").evaluate(JOB, parse_gpuperf(fixture_text(f"gpuperf/{name}")), BenchContext(profile, {}))


def bad(findings):
    return sorted((f.check, f.component, f.status.value) for f in findings if f.status is not Status.PASS)


def test_parse_our_format():
    result = parse_gpuperf(fixture_text("gpuperf/h100-8gpu-torch-healthy.txt"))
    assert (result.impl, result.dtype, result.gemm_n, result.versions) == ("torch", "bf16", 8192,
                                                                           "torch 2.3.1+cu121 cuda 12.1")
    assert result.tests == ("gemm", "hbm", "h2d", "d2h", "p2p") and len(result.devices) == 8
    d = result.devices[3]
    assert (d.bus, d.gemm_tflops, d.p2p_peer) == ("0000:5d:00.0", 701.54, 4)


def test_healthy_node_passes_every_check_against_the_h100_datasheet():
    findings = grade("h100-8gpu-torch-healthy.txt")
    assert bad(findings) == []
    checks = {f.check for f in findings}
    assert {"gpuperf.gemm", "gpuperf.gemm.siblings", "gpuperf.hbm", "copy.h2d", "copy.d2h", "copy.d2d",
            "copy.d2d.siblings"} <= checks
    gemm = next(f for f in findings if f.check == "gpuperf.gemm" and f.component == "gpu0")
    assert "of expected 989 TFLOPS" in gemm.message and gemm.unit == "TFLOPS"


def test_a_gpu_32_percent_slower_than_its_siblings_fails_even_without_a_profile():
    findings = grade("h100-8gpu-torch-gpu3-gemm-32pct-slow.txt", EMPTY_PROFILE)
    assert bad(findings) == sorted([("gpuperf.gemm.siblings", "gpu3", "FAIL")] + [
        (c, "node", "SKIP") for c in ("copy.d2d", "copy.d2h", "copy.h2d", "gpuperf.gemm", "gpuperf.hbm")])
    slow = next(f for f in findings if f.check == "gpuperf.gemm.siblings")
    assert slow.value == 0.686 and "= 69% of the median of its 7 siblings" in slow.message
    assert "0000:5d:00.0" in slow.message and "healthcheck default" in slow.message
    skip = next(f for f in findings if f.check == "gpuperf.gemm")
    assert skip.message.startswith("bf16 GEMM: no expectation gpuperf.gemm.bf16_tflops in profile (none)")


def test_with_the_profile_the_slow_gpu_is_also_graded_against_the_datasheet():
    findings = grade("h100-8gpu-torch-gpu3-gemm-32pct-slow.txt")
    assert bad(findings) == [("gpuperf.gemm", "gpu3", "WARN"), ("gpuperf.gemm.siblings", "gpu3", "FAIL")]


def test_device_error_and_missing_device_fail_skip_is_skip():
    findings = grade("h100-8gpu-torch-gpu6-error.txt")
    assert bad(findings) == [("gpuperf.gpu.error", "gpu6", "FAIL")]
    seven = parse_gpuperf(fixture_text("gpuperf/h100-8gpu-torch-healthy.txt"))
    seven = replace(seven, devices=seven.devices[:7])
    missing = get("gpuperf").evaluate(JOB, seven, BenchContext(H100, {}))
    assert bad(missing) == [("gpuperf.devices", "node", "FAIL")]
    assert "torch sees 7 CUDA devices, the profile h100-sxm5-8x expects 8 GPUs" in missing[0].message
    skipped = grade("skip-no-cuda.txt")
    assert [(f.check, f.status) for f in skipped] == [("gpuperf.ran", Status.SKIP)]
    assert "nvcc not on PATH" in skipped[0].message


@pytest.mark.parametrize("text", ["", "noise\n", fixture_text("gpuperf/h100-8gpu-torch-healthy.txt").replace(
    "# healthcheck-gpuperf end", ""), fixture_text("gpuperf/h100-8gpu-torch-healthy.txt").replace(
    "gemm_tflops=702", "gemm_tflops=nan")])
def test_foreign_truncated_or_nan_output_is_a_parse_error(text):
    with pytest.raises(ParseError):
        parse_gpuperf(text)


def test_siblings_two_gpus_compare_with_each_other_one_is_skip():
    one = sibling_findings("h", "x.siblings", [Reading("gpu0", 10.0)], EMPTY_PROFILE, source="s", remedy="r",
                           what="x", unit="u")
    assert [f.status for f in one] == [Status.SKIP]
    two = sibling_findings("h", "x.siblings", [Reading("gpu0", 10.0), Reading("gpu1", 7.0)], EMPTY_PROFILE,
                           source="s", remedy="r", what="x", unit="u")
    assert [(f.component, f.status) for f in two] == [("gpu1", Status.FAIL)]
    strict = Profile(name="p", expectations={"perf.sibling_ratio": Expectation(
        key="perf.sibling_ratio", source="site", op="ge", value=0.6, unit="ratio")})
    relaxed = sibling_findings("h", "x.siblings", [Reading("gpu0", 10.0), Reading("gpu1", 7.0)], strict,
                               source="s", remedy="r", what="x", unit="u")
    assert [f.status for f in relaxed] == [Status.PASS]   # the profile's ratio replaces the default


def test_program_argv_takes_the_profile_datatype_and_settings():
    assert profile_dtype(H100) == "bf16" and profile_dtype(EMPTY_PROFILE) == "bf16"
    argv = program_argv(H100, {"gpuperf.gemm_n": 4096, "gpuperf.python": "/opt/venv/bin/python"}, tests="gemm,hbm")
    assert argv[:4] == ["/opt/venv/bin/python", "gpuperf_node.py", "--tests", "gemm,hbm"]
    assert argv[argv.index("--dtype") + 1] == "bf16" and argv[argv.index("--gemm-n") + 1] == "4096"


def test_the_node_program_runs_with_numpy_and_its_output_parses(tmp_path):
    pytest.importorskip("numpy")
    program = tmp_path / "gpuperf_node.py"
    program.write_text((files("healthcheck.benchmarks") / "gpuperf_node.py").read_text())
    out = subprocess.run([sys.executable, str(program), "--impl", "numpy", "--devices", "3", "--gemm-n", "64",
                          "--gemm-iters", "2", "--copy-mib", "1", "--copy-iters", "2"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = parse_gpuperf(out.stdout)
    assert result.impl == "numpy" and [d.index for d in result.devices] == [0, 1, 2]
    assert all(d.gemm_tflops and d.hbm_gbps and d.h2d_gbps and d.d2h_gbps and d.p2p_gbps for d in result.devices)
    assert [d.p2p_peer for d in result.devices] == [1, 2, 0]


def test_the_node_program_says_why_it_skips(tmp_path):
    program = tmp_path / "gpuperf_node.py"
    program.write_text((files("healthcheck.benchmarks") / "gpuperf_node.py").read_text())
    env = {"PATH": str(tmp_path), "PYTHONPATH": str(tmp_path / "none")}   # no nvcc, no torch/cupy importable
    out = subprocess.run([sys.executable, "-S", str(program), "--dtype", "bf16"], capture_output=True, text=True,
                         timeout=120, env=env)
    result = parse_gpuperf(out.stdout)
    assert result.skip is not None and "cupy: CuPy has no bfloat16 arrays" in result.skip
    assert "cuda: nvcc not on PATH" in result.skip
