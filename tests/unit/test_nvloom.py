"""nvloom: nvloom_cli's text layout (NVIDIA/nvloom 1.3 source, tests/fixtures/nvloom/README.md) parsed and graded
per GPU over a GB200 NVL72 domain: the bisect quick test and gpu-to-rack sampling against the profile and the
domain median, a slow GPU pair, a tray missing from the run, waived and aborted testcases, garbage.
No real nvloom output is public: the fixtures are ours, in the layout nvloom's source prints."""

from __future__ import annotations

import pytest

from healthcheck.benchmarks import BenchContext, get
from healthcheck.benchmarks.nvloom import nvloom_program, parse_nvloom
from healthcheck.benchmarks.plan import Job
from healthcheck.core.model import Host, Status
from healthcheck.core.profiles import EMPTY_PROFILE, load_profile
from healthcheck.core.spec import ParseError
from tests.conftest import fixture_text

GB200 = load_profile("gb200-nvl72-tray")
TRAYS = tuple(f"r07t{i:02d}" for i in range(1, 19))
BISECT = "bisect_device_to_device_write_sm"
G2R = "gpu_to_rack_device_to_device_unidir_write_ce"


def job(test: str = BISECT, hosts: tuple[str, ...] = TRAYS) -> Job:
    return Job(job_id=f"nvloom-{test}-cluster-18nodes-r07t01", benchmark="nvloom", test=test, shape="cluster",
               hosts=hosts, ranks_per_host=4)


def grade(name: str, profile=GB200, test: str = BISECT):
    ctx = BenchContext(profile, {h: Host(h, group="rack07") for h in TRAYS})
    return get("nvloom").evaluate(job(test), parse_nvloom(fixture_text(f"nvloom/{name}")), ctx)


def bad(findings):
    return sorted((f.host, f.check, f.component, f.status.value) for f in findings if f.status is not Status.PASS)


def test_parse_header_processes_and_matrices():
    result = parse_nvloom(fixture_text("nvloom/gb200-nvl72-18trays-healthy.txt"))
    assert (result.version, result.driver, result.cuda, result.buffer_mib) == ("1.3.0", "580.173.02", "12.9", 512)
    assert len(result.processes) == 72
    p = result.process(5)
    assert (p.host, p.device, p.gpu, p.rack) == ("r07t02", 1, "NVIDIA GB200 (00000009:01:00)", "1821025000117")
    bisect, g2r = result.testcases
    assert (bisect.name, bisect.done, bisect.unit) == (BISECT, True, "GB/s")
    assert bisect.matrix.columns == ("0",) and bisect.matrix.rows[5] == ("5->41", (747.24,))
    assert bisect.summary["Min"] == 735.01 and len(bisect.matrix.rows) == 72
    assert g2r.matrix.columns == ("1821025000117",) and g2r.matrix.rows[0][0] == "0"


def test_healthy_domain_passes_every_gpu_against_profile_and_domain_median():
    findings = grade("gb200-nvl72-18trays-healthy.txt")
    assert bad(findings) == []
    per_gpu = [f for f in findings if f.check == f"nvloom.{BISECT}"]
    assert len(per_gpu) == 72 and {f.host for f in per_gpu} == set(TRAYS)
    assert "of expected 900 GB/s" in per_gpu[0].message
    ranks = [f for f in findings if f.check == "nvloom.ranks"]
    assert len(ranks) == 18 and all(f.value == 4 for f in ranks)
    domain = [f for f in findings if f.check == "nvloom.domain.gpus"]
    assert {f.value for f in domain} == {72} and {f.status for f in domain} == {Status.PASS}


def test_slow_gpu_pair_is_named_on_both_trays():
    findings = grade("gb200-nvl72-18trays-slow-pair-rank5-rank41.txt")
    assert bad(findings) == [
        ("r07t02", f"nvloom.{BISECT}", "gpu1", "FAIL"), ("r07t02", f"nvloom.{BISECT}.domain", "gpu1", "FAIL"),
        ("r07t02", f"nvloom.{G2R}", "gpu1", "FAIL"), ("r07t02", f"nvloom.{G2R}.domain", "gpu1", "FAIL"),
        ("r07t11", f"nvloom.{BISECT}", "gpu1", "FAIL"), ("r07t11", f"nvloom.{BISECT}.domain", "gpu1", "FAIL"),
    ]
    slow = next(f for f in findings if f.host == "r07t02" and f.check == f"nvloom.{BISECT}.domain"
                and f.status is Status.FAIL)
    assert slow.value == 0.431 and "rank 5 -> rank 41 on r07t11 gpu1" in slow.message and slow.remedy
    band = next(f for f in findings if f.host == "r07t11" and f.check == f"nvloom.{BISECT}" and f.component == "gpu1")
    assert band.value == 323.47 and "36% of expected 900 GB/s" in band.message


def test_missing_tray_is_fail_on_that_tray_and_short_domain_warns():
    findings = grade("gb200-nvl72-17trays-r07t05-missing.txt")
    ranks = {f.host: f for f in findings if f.check == "nvloom.ranks"}
    assert ranks["r07t05"].status is Status.FAIL and ranks["r07t05"].value == 0
    assert "r07t05: the tray is missing from the run (68 of 72 ranks printed)" in ranks["r07t05"].message
    assert {f.status for h, f in ranks.items() if h != "r07t05"} == {Status.PASS}
    domain = [f for f in findings if f.check == "nvloom.domain.gpus"]
    assert len(domain) == 17 and {(f.value, f.status) for f in domain} == {(68, Status.WARN)}
    assert {f.status for f in findings if f.check.startswith(f"nvloom.{BISECT}")} == {Status.PASS}


def test_without_expectations_per_gpu_is_skip_but_the_domain_median_still_grades():
    findings = grade("gb200-nvl72-18trays-slow-pair-rank5-rank41.txt", profile=EMPTY_PROFILE)
    per_gpu = [f for f in findings if f.check == f"nvloom.{BISECT}"]
    assert {f.status for f in per_gpu} == {Status.SKIP} and len(per_gpu) == 18
    assert [(f.host, f.status) for f in findings if f.check == f"nvloom.{BISECT}.domain"
            and f.status is not Status.PASS] == [("r07t02", Status.FAIL), ("r07t11", Status.FAIL)]


def _edited(old: str, new: str) -> str:
    text = fixture_text("nvloom/gb200-nvl72-18trays-healthy.txt")
    assert old in text
    return text.replace(old, new, 1)


def test_na_cell_waived_and_aborted_testcases():
    ctx = BenchContext(GB200, {h: Host(h) for h in TRAYS})
    na = parse_nvloom(_edited("5->41\t747.24\t", "5->41\tN/A\t"))
    findings = get("nvloom").evaluate(job(), na, ctx)
    assert [(f.host, f.component, f.status) for f in findings if f.check == f"nvloom.{BISECT}.path"] == [
        ("r07t02", "gpu1", Status.FAIL)]
    text = fixture_text("nvloom/gb200-nvl72-18trays-healthy.txt").split(f"Running {BISECT}")[0]
    waived = parse_nvloom(text + "Running multicast_one_to_all\ntestcase WAIVED\nExecutionTime multicast_one_to_all "
                                 "0.01 s\nDone multicast_one_to_all\n")
    assert waived.testcases[0].waived
    assert {f.status for f in get("nvloom").evaluate(job(), waived, ctx)
            if f.check == "nvloom.multicast_one_to_all"} == {Status.SKIP}
    aborted = parse_nvloom(text + f"Running {BISECT}\n[r07t09:2]: [CUDA_ERROR_INVALID_VALUE] invalid argument in "
                                  "expression cuMemImportFromShareableHandle(...) in allocate() : "
                                  "library/allocators.cpp:210\n")
    findings = get("nvloom").evaluate(job(), aborted, ctx)
    run = {f.host: f for f in findings if f.check == "nvloom.run"}
    assert run["r07t09"].status is Status.FAIL and "(GPU 2)" in run["r07t09"].message
    assert run["r07t01"].status is Status.ERROR and "nvloom aborted on r07t09" in run["r07t01"].message
    assert {f.status for f in findings if f.check == f"nvloom.{BISECT}"} == {Status.ERROR}


@pytest.mark.parametrize("text", ["", "hello world\n", "Running x\n\t0\t\n0->1\t12.0\t13.0\t\n",
                                  "nvloom_cli 1.3.0\nRunning x\n\t0\t\n0->1\tfast\t\n"])
def test_garbage_raises_parse_error(text):
    with pytest.raises(ParseError):
        parse_nvloom(text)


def test_program_runs_a_testcase_or_a_suite():
    assert nvloom_program(job(), GB200, {}).argv == ("nvloom_cli", "-t", BISECT)
    program = nvloom_program(job("gpu-to-rack"), GB200, {"nvloom.buffer_mib": 1024, "nvloom.gpu_to_rack_samples": 7})
    assert program.argv == ("nvloom_cli", "-s", "gpu-to-rack", "-b", "1024", "--gpuToRackSamples", "7")
    assert get("nvloom").ranks_per_host(GB200, "cluster") == 4


def test_rich_output_samples_and_column_separators_parse():
    """``--richOutput`` (cli/util.cpp incrementalPrint): one column per sample, ``| `` after each rack's
    last sample, ``;(src-dst)`` after each value; two racks here, two samples each."""
    head = fixture_text("nvloom/gb200-nvl72-18trays-healthy.txt").split("Running ")[0]
    text = (head + f"Running {G2R}\n\tA-0\tA-1\t| \tB-0\tB-1\t\n"
            + "0\t740.10;(0-36)\t741.20;(0-50)\t|\t738.00;(0-1)\tN/A;(0-2)\t\n")
    (test,) = parse_nvloom(text).testcases
    assert test.matrix.columns == ("A-0", "A-1", "B-0", "B-1")
    assert test.matrix.rows == (("0", (740.1, 741.2, 738.0, None)),)
