"""SDC benchmark: our output format parsed, per-node errors, majority and attribution across nodes (pure),
and the node program itself run with its NumPy implementation."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from importlib.resources import files

import pytest

from healthcheck.benchmarks import BenchContext, get
from healthcheck.benchmarks.plan import Job
from healthcheck.benchmarks.sdc import SdcDevice, checksum_verdicts, fleet_sdc, parse_sdc
from healthcheck.core.model import Status
from healthcheck.core.profiles import load_profile
from healthcheck.core.spec import ParseError
from tests.conftest import fixture_text

H100 = load_profile("h100-sxm5-8x")
CTX = BenchContext(H100, {})
TEXT = fixture_text("sdc/h100-8gpu-torch-gpu5-differs.txt").split("\n", 1)[1]


def job(host: str) -> Job:
    return Job(job_id=f"sdc.sdc.node.{host}", benchmark="sdc", test="sdc", shape="node", hosts=(host,),
               ranks_per_host=1)


def test_parse_our_format():
    result = parse_sdc(TEXT)
    assert (result.impl, result.size, result.iterations, result.versions) == \
        ("torch", 2048, 8, "torch 2.3.1+cu121 cuda 12.1")
    assert len(result.devices) == 8 and result.devices[5].bus == "0000:bb:00.0"
    assert result.devices[7].error == "CUDA error: an illegal memory access was encountered"


@pytest.mark.parametrize("bad", ["", "random text\n", TEXT.replace("# healthcheck-sdc end", "")])
def test_truncated_or_foreign_output_is_a_parse_error(bad):
    with pytest.raises(ParseError):
        parse_sdc(bad)


def test_one_node_majority_names_the_gpu_and_errors_fail():
    result = parse_sdc(TEXT)
    errors = get("sdc").evaluate(job("gpu001"), result, CTX)
    assert [(f.check, f.component, f.status) for f in errors] == [("sdc.gpu.error", "gpu7", Status.FAIL)]
    findings = fleet_sdc([(job("gpu001"), result)], CTX)
    assert [(f.check, f.component, f.status) for f in findings] == [("sdc.checksum", "gpu5", Status.FAIL)]
    assert "0000:bb:00.0" in findings[0].message and "majority of 7 identical devices" in findings[0].message


def test_across_nodes_only_identical_devices_are_compared():
    a = parse_sdc(TEXT)
    good = replace(a, devices=tuple(replace(d, checksum=a.devices[0].checksum, error=None) for d in a.devices))
    other_lib = replace(good, versions="torch 2.4.0 cuda 12.4",
                        devices=tuple(replace(d, checksum="f" * 64) for d in good.devices))
    findings = fleet_sdc([(job("gpu001"), a), (job("gpu002"), good), (job("gpu003"), other_lib)], CTX)
    bad = [(f.host, f.component, f.status) for f in findings if f.status is not Status.PASS]
    assert bad == [("gpu001", "gpu5", Status.FAIL)]          # gpu003's other torch is its own group
    passed = {f.host: f.message for f in findings if f.status is Status.PASS}
    assert set(passed) == {"gpu002", "gpu003"} and "majority of 15 identical devices" in passed["gpu002"]


def test_no_strict_majority_is_a_warning_and_a_lone_device_is_skip():
    key = ("H100", "torch", "v", "2048", "1", "8")
    pair = [("n1", "gpu0", SdcDevice(0, "H100", checksum="aa"), key),
            ("n2", "gpu0", SdcDevice(0, "H100", checksum="bb"), key)]
    assert [v.verdict for v in checksum_verdicts(pair)] == ["no-majority", "no-majority"]
    lone = checksum_verdicts([("n1", "gpu0", SdcDevice(0, "L40S", checksum="aa"), ("L40S",))])
    assert [v.verdict for v in lone] == ["alone"]


def test_skip_line_is_a_skip_finding():
    text = "# format=healthcheck-sdc/1 impl=cuda\nsdc skip reason='torch: not importable; cuda: nvcc not on PATH'\n" \
           "# healthcheck-sdc end\n"
    findings = get("sdc").evaluate(job("gpu001"), parse_sdc(text), CTX)
    assert [(f.check, f.status) for f in findings] == [("sdc.ran", Status.SKIP)] and "nvcc" in findings[0].message


def test_program_ships_the_node_program_and_numpy_only_when_asked():
    program = get("sdc").program(job("gpu001"), H100, {})
    assert program.argv[:2] == ("python3", "sdc_node.py") and "--impl" in program.argv
    assert program.argv[program.argv.index("--impl") + 1] == "auto"
    assert "def run_torch" in program.input_files["sdc_node.py"]
    numpy_argv = get("sdc").program(job("gpu001"), H100, {"sdc.impl": "numpy", "sdc.devices": 4}).argv
    assert numpy_argv[-4:] == ("--impl", "numpy", "--devices", "4")


def run_node(*args: str, env: dict | None = None) -> str:
    path = str(files("healthcheck.benchmarks") / "sdc_node.py")
    return subprocess.run([sys.executable, path, *args], capture_output=True, text=True, timeout=120,
                          env=env, check=True).stdout


def test_node_program_numpy_is_deterministic_and_injection_flips_one_device():
    pytest.importorskip("numpy")
    clean = parse_sdc(run_node("--impl", "numpy", "--size", "96", "--devices", "3"))
    assert len({d.checksum for d in clean.devices}) == 1 and clean.impl == "numpy"
    flipped = parse_sdc(run_node("--impl", "numpy", "--size", "96", "--devices", "3",
                                 env={**os.environ, "HEALTHCHECK_SDC_INJECT": "2:100:5"}))
    assert [d.checksum == clean.devices[0].checksum for d in flipped.devices] == [True, True, False]
    verdicts = fleet_sdc([(job("n1"), flipped)], CTX)
    assert [(f.component, f.status) for f in verdicts] == [("cpu2", Status.FAIL)]


@pytest.mark.parametrize("seconds", ["N/A", "nan", "inf"])
def test_device_line_with_a_non_number_duration_is_a_parse_error(seconds):
    """Found by the fuzz test without the corpus: ``seconds=N/A`` raised ValueError out of the parser."""
    text = (f"# format=healthcheck-sdc/1 impl=cuda\nsdc device=0 checksum=9f2c seconds={seconds}\n"
            "# healthcheck-sdc end\n")
    with pytest.raises(ParseError, match="not a number"):
        parse_sdc(text)
    assert parse_sdc(text.replace(f"seconds={seconds}", "seconds=12.5")).devices[0].seconds == 12.5
