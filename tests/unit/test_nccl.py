"""nccl-tests: parser over every corpus layout (concrete values), evaluator (data first, then busbw)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from healthcheck.benchmarks import BenchContext
from healthcheck.benchmarks.nccl import (
    BUSBW_FACTORS,
    busbw_metric,
    evaluate_nccl,
    fleet_nccl,
    infer_ranks,
    nccl_program,
    parse_nccl_tests,
)
from healthcheck.benchmarks.plan import Job
from healthcheck.core.model import Host, Status
from healthcheck.core.profiles import Expectation, Profile
from healthcheck.core.spec import ParseError
from tests.conftest import corpus_files, corpus_text, fixture_text

NOT_NCCL_TESTS = {"pytorch-all_reduce_bench-4node-busbw-algbw-table.txt",
                  "pytorch-ddp-nccl-watchdog-timeout-600000ms-allreduce-sigabrt-torchrun.txt"}


def _profile(busbw: float | None = 480.0, shape: str = "node", **bands: float) -> Profile:
    expect = {}
    if busbw is not None:
        key = f"nccl.all_reduce.{shape}.busbw_gbps"
        expect[key] = Expectation(key, "test", value=busbw, unit="GB/s", bands=bands or None)
    return Profile(name="test-h100", expectations=expect)


def _job(shape: str = "node", hosts: tuple[str, ...] = ("node005",), ranks_per_host: int = 8) -> Job:
    return Job(job_id=f"nccl-all_reduce_perf-{shape}-{'-'.join(hosts)}", benchmark="nccl",
               test="all_reduce_perf", shape=shape, hosts=hosts, ranks_per_host=ranks_per_host)


def _ctx(profile: Profile, *hosts: str) -> BenchContext:
    return BenchContext(profile, {h: Host(h) for h in hosts})


def _by(findings, check):
    return [f for f in findings if f.check == check]


@pytest.mark.parametrize("path", corpus_files("nccl-tests"), ids=lambda p: p.name)
def test_conformance_every_corpus_file(path) -> None:
    text = corpus_text(f"nccl-tests/{path.name}")
    if path.name in NOT_NCCL_TESTS:
        with pytest.raises(ParseError):
            parse_nccl_tests(text)
        return
    result = parse_nccl_tests(text)
    assert result.rows or result.failures or result.warnings or result.launcher_errors
    for row in result.rows:
        assert row.size_bytes >= 0 and row.oop_busbw_gbps >= 0 and row.ip_time_us >= 0
    if "FAILED" in path.name:
        assert result.out_of_bounds_failed is True or any(r.wrong > 0 for r in result.rows)
    # a Job sized from the run itself always evaluates without raising, and never PASSes an abort
    ranks = max((d.rank for d in result.devices), default=0) + 1
    job = _job(hosts=("h",), ranks_per_host=ranks)
    findings = evaluate_nccl(job, result, _ctx(_profile(), "h"))
    assert findings
    if not result.rows:
        assert {f.status for f in findings} & {Status.FAIL, Status.ERROR}


def test_single_node_nvls_values() -> None:
    r = parse_nccl_tests(corpus_text("nccl-tests/all_reduce-h100-8gpu-single-node-nvls-476GBs-g8.txt"))
    assert len(r.rows) == 6 and len(r.devices) == 8
    assert r.devices[1].host == "node005" and r.devices[1].bus_id == "0x6d"
    assert r.devices[0].name == "NVIDIA H100 80GB HBM3"
    last = r.rows[-1]
    assert (last.size_bytes, last.oop_time_us, last.oop_busbw_gbps, last.ip_busbw_gbps) == \
        (4294967296, 15870.0, 473.60, 476.53)
    assert last.busbw_gbps == 476.53 and last.oop_wrong == 0
    assert r.avg_busbw_gbps == 439.369 and r.out_of_bounds == 0 and r.out_of_bounds_failed is False
    assert r.validation is True and r.complete
    assert infer_ranks("all_reduce", last) == 8


def test_wrong_counts_and_out_of_bounds() -> None:
    r = parse_nccl_tests(corpus_text("nccl-tests/all_reduce-gh200-2node-wrong-96-32-at-1MB-4-FAILED.txt"))
    bad = [row for row in r.rows if row.wrong > 0]
    assert [(row.size_bytes, row.oop_wrong, row.ip_wrong) for row in bad] == [(1048576, 96.0, 32.0)]
    assert (r.out_of_bounds, r.out_of_bounds_failed, r.avg_busbw_gbps) == (4, True, 4.79995)
    assert r.tests_version == "2.17.8" and r.test == "all_reduce_perf"
    assert {f.host for f in r.failures} == {"gpu-1-1", "gpu-1-7"}
    sci = parse_nccl_tests(corpus_text("nccl-tests/all_reduce-rtx3090-2node-INC-wrong-nonzero-108-FAILED.txt"))
    row = next(x for x in sci.rows if x.size_bytes == 2097152)
    assert row.oop_wrong == pytest.approx(1.04858e06) and sci.out_of_bounds == 108


def test_legacy_error_column_and_validation_off() -> None:
    legacy = parse_nccl_tests(corpus_text("nccl-tests/all_gather-v100-dgx2-12gpu-legacy-error-1e+00-4-FAILED.txt"))
    assert legacy.legacy_error_column and len(legacy.devices) == 12
    assert next((x.size_bytes, x.oop_wrong) for x in legacy.rows if x.wrong) == (4294967280, 1.0)
    off = parse_nccl_tests(corpus_text("nccl-tests/all_reduce-a100-40gb-8gpu-legacy-format-validation0.txt"))
    assert off.validation is False and off.rows[0].oop_wrong is None and len(off.rows) == 34
    assert off.rows[-1].oop_busbw_gbps == 235.26
    alltoall = parse_nccl_tests(corpus_text("nccl-tests/alltoall-a100-40gb-8gpu-legacy-format.txt"))
    assert alltoall.rows[-1].ip_busbw_gbps == 226.16  # empty redop column does not shift values


def test_launcher_prefixes_and_mid_line_rank_tags() -> None:
    srun = parse_nccl_tests(corpus_text(
        "nccl-tests/all_reduce-h100-2node-16gpu-srun-prefixed-validation0-NA-underperforming-155GBs.txt"))
    assert len(srun.rows) == 11 and len(srun.devices) == 16 and srun.devices[8].host == "node007"
    assert srun.rows[-1].busbw_gbps == 155.57 and srun.avg_busbw_gbps == 142.735
    tagged = parse_nccl_tests(corpus_text("nccl-tests/all_reduce-h100-2node-p5-mpirun-tagged-output-elided.txt"))
    assert len(tagged.rows) == 7 and tagged.rows[-1].oop_busbw_gbps == 437.79 and tagged.avg_busbw_gbps == 52.9753
    mid = parse_nccl_tests(corpus_text(
        "nccl-tests/all_reduce-h100-3node-vm-cross-rack-degraded-5GBs-rank-tag-mid-line-excerpt.txt"))
    row = next(x for x in mid.rows if x.size_bytes == 67108864)
    assert len(mid.rows) == 10 and (row.oop_time_us, row.oop_busbw_gbps) == (24410.0, 5.27)
    newest = parse_nccl_tests(corpus_text(
        "nccl-tests/all_reduce-h200-2node-16gpu-nccl2.30-tests2.18.3-spectrumx-ucx-warn-interleaved.txt"))
    assert (newest.tests_version, newest.nccl_version) == ("2.18.3", "2.30.4+cuda13.2")
    assert len(newest.rows) == 25 and newest.rows[-1].oop_busbw_gbps == 485.66 and not newest.warnings
    dell = parse_nccl_tests(corpus_text(
        "nccl-tests/all_reduce-h100-2node-16gpu-dell-xe9680-ndr-openmpi-xpmem-warning-interleaved.txt"))
    assert len(dell.devices) == 16 and dell.nccl_version == "2.26.2+cuda12.8"


def test_aborted_runs_and_warnings() -> None:
    fm = parse_nccl_tests(corpus_text("nccl-tests/all_reduce-h100-8gpu-system-not-yet-initialized-abort.txt"))
    assert not fm.rows and fm.failures[0].text == "Test CUDA failure common.cu:941 'system not yet initialized'"
    boot = parse_nccl_tests(corpus_text(
        "nccl-tests/all_reduce-h100-2node-16rank-NCCL-WARN-bootstrap-family-33621-internal-error-mpirun-abort.txt"))
    assert len(boot.warnings) == 8 and {w.host for w in boot.warnings} == {"h100-4"}
    assert "neither AF_INET(2) nor AF_INET6(10)" in boot.warnings[0].text
    assert any(e.message == "rank 10 exited with code 3" for e in boot.launcher_errors)
    qp = parse_nccl_tests(corpus_text(
        "nccl-tests/alltoall-2node-16gpu-roce-NCCL-WARN-async-fatal-QP-invalid-request.txt"))
    assert qp.warnings[0].host == "node-0" and qp.warnings[0].device == 0
    assert qp.warnings[0].text.startswith("NET/IB : mlx5_3:1 async fatal event on QP")
    slots = parse_nccl_tests(corpus_text("nccl-tests/mpirun-not-enough-slots-abort-gcm.txt"))
    assert slots.launcher_errors[0].message == "mpirun: not enough slots for the 16 ranks requested"


def test_busbw_graded_with_bands() -> None:
    r = parse_nccl_tests(corpus_text("nccl-tests/all_reduce-h100-8gpu-single-node-nvls-476GBs-g8.txt"))
    good = evaluate_nccl(_job(), r, _ctx(_profile(480.0), "node005"))
    busbw = _by(good, "nccl.all_reduce.node.busbw")[0]
    assert busbw.status is Status.PASS and busbw.value == 476.53 and "excellent" in busbw.message
    assert _by(good, "nccl.all_reduce.data")[0].status is Status.PASS
    assert {f.status for f in good} == {Status.PASS}
    assert _by(evaluate_nccl(_job(), r, _ctx(_profile(830.0), "node005")), "nccl.all_reduce.node.busbw")[0] \
        .status is Status.WARN  # 476.5 / 830 = 57 %
    degraded = parse_nccl_tests(fixture_text("nccl-tests/all_reduce-h100-8gpu-degraded-210GBs.txt"))
    f = _by(evaluate_nccl(_job(), degraded, _ctx(_profile(480.0), "node005")), "nccl.all_reduce.node.busbw")[0]
    assert f.status is Status.FAIL and f.value == 210.25 and "44%" in f.message and f.remedy
    strict = _by(evaluate_nccl(_job(), r, _ctx(_profile(480.0, acceptable=0.995, warn=0.9), "node005")),
                 "nccl.all_reduce.node.busbw")[0]
    assert strict.status is Status.WARN
    missing = _by(evaluate_nccl(_job(), r, _ctx(_profile(None), "node005")), "nccl.all_reduce.node.busbw")[0]
    assert missing.status is Status.SKIP and "no expectation" in missing.message


def test_corruption_fails_whatever_the_bandwidth() -> None:
    r = parse_nccl_tests(corpus_text("nccl-tests/all_reduce-gh200-2node-wrong-96-32-at-1MB-4-FAILED.txt"))
    job = _job("pair", ("gpu-1-1", "gpu-1-7"), ranks_per_host=1)
    findings = evaluate_nccl(job, r, _ctx(_profile(1.0, shape="pair"), "gpu-1-1", "gpu-1-7"))
    data = _by(findings, "nccl.all_reduce.data")
    assert [f.status for f in data] == [Status.FAIL, Status.FAIL]
    assert "#wrong 96 out-of-place / 32 in-place at 1048576 B" in data[0].message
    assert "out of bounds values: 4 FAILED" in data[0].message and data[0].component == "pair gpu-1-1-gpu-1-7"
    # one cause, one finding: the "Test failure common.cu:1189" lines after the #wrong row are its consequence
    assert not _by(findings, "nccl.all_reduce.run")
    assert "the run then exited with gpu-1-1: Test failure common.cu:1189, gpu-1-7: Test failure common.cu:1189" \
        in data[0].message
    assert {f.status for f in findings} <= {Status.FAIL, Status.PASS, Status.SKIP} and \
        [f.check for f in findings if f.status is Status.FAIL] == ["nccl.all_reduce.data"] * 2


def test_abort_and_launch_failures() -> None:
    fm = parse_nccl_tests(corpus_text("nccl-tests/all_reduce-h100-8gpu-system-not-yet-initialized-abort.txt"))
    run = _by(evaluate_nccl(_job(), fm, _ctx(_profile(), "node005")), "nccl.all_reduce.run")
    assert run[0].status is Status.FAIL and "system not yet initialized" in run[0].message
    busy = parse_nccl_tests(corpus_text("nccl-tests/all_reduce-gh200-2node-exclusive-process-device-busy-abort.txt"))
    job = _job("pair", ("gpu-1-1", "gpu-1-7"), ranks_per_host=4)
    findings = evaluate_nccl(job, busy, _ctx(_profile(), "gpu-1-1", "gpu-1-7"))
    hosts = {f.host for f in findings if f.status is Status.FAIL}
    assert hosts == {"gpu-1-1", "gpu-1-7"}
    slots = parse_nccl_tests(corpus_text("nccl-tests/mpirun-not-enough-slots-abort-gcm.txt"))
    job_f = evaluate_nccl(_job(), slots, _ctx(_profile(), "node005"))
    assert [(f.check, f.status) for f in job_f] == [("nccl.all_reduce.job", Status.ERROR)]
    own = fixture_text("nccl-tests/all_reduce-h100-8gpu-degraded-210GBs.txt")
    cut = parse_nccl_tests(own[:own.index("  536870912")])  # killed mid-table: no summary lines
    errors = _by(evaluate_nccl(_job(), cut, _ctx(_profile(), "node005")), "nccl.all_reduce.job")
    assert errors[0].status is Status.ERROR and "without the summary" in errors[0].message
    with pytest.raises(ParseError):
        parse_nccl_tests(fixture_text("nccl-tests/bad/garbage.txt"))


def test_nvls_warning_is_reported_on_its_host() -> None:
    r = parse_nccl_tests(corpus_text("nccl-tests/nccl-warn-nvls-multicast-bind-failed-cuda-error-401.txt"))
    job = _job(hosts=("gpu-stress-dgc86-xfpt6",))
    findings = evaluate_nccl(job, r, _ctx(_profile(), "gpu-stress-dgc86-xfpt6"))
    warn = _by(findings, "nccl.all_reduce.nccl_warn")[0]
    assert warn.status is Status.WARN and "(device 5)" in warn.message and "NVLS" in warn.message
    assert _by(findings, "nccl.all_reduce.job")[0].status is Status.ERROR


def test_rank_count_from_busbw_factor() -> None:
    alone = parse_nccl_tests(corpus_text(
        "nccl-tests/all_reduce-h100-2node-built-without-MPI1-16-independent-nranks1-busbw-0-avg-0.txt"))
    assert len(alone.rows) == 24 and alone.duplicate_sizes and alone.avg_busbw_gbps == 0.0
    job = _job("pair", ("h100-test-rg-1", "h100-test-rg-2"), ranks_per_host=8)
    findings = evaluate_nccl(job, alone, _ctx(_profile(400.0, shape="pair"), *job.hosts))
    ranks = _by(findings, "nccl.all_reduce.ranks")
    assert ranks[0].status is Status.FAIL and "MPI=1" in ranks[0].message
    assert not _by(findings, "nccl.all_reduce.pair.busbw")  # meaningless busbw is not graded
    snippet = parse_nccl_tests(corpus_text(
        "nccl-tests/all_reduce-h100-2node-16rank-nvlstree-406GBs-destroy-lines-before-footer-snippet.txt"))
    assert infer_ranks("all_reduce", snippet.rows[-1]) == 16
    assert BUSBW_FACTORS["all_gather"](8) == pytest.approx(7 / 8) and BUSBW_FACTORS["broadcast"](8) == 1.0
    single = parse_nccl_tests(corpus_text("nccl-tests/all_reduce-h100-8gpu-single-node-nvls-476GBs-g8.txt"))
    wrong = _by(evaluate_nccl(_job(ranks_per_host=4), single, _ctx(_profile(), "node005")), "nccl.all_reduce.ranks")
    assert wrong[0].status is Status.FAIL and wrong[0].value == 8 and wrong[0].expected == 4


def test_metric_floor_and_fleet_outlier() -> None:
    r = parse_nccl_tests(corpus_text(
        "nccl-tests/all_reduce-h200-2node-16gpu-nccl2.30-tests2.18.3-spectrumx-ucx-warn-interleaved.txt"))
    assert busbw_metric(r, None) == (485.66, 17179869184)
    assert busbw_metric(r, 1 << 30) == (485.66, 17179869184)
    good = parse_nccl_tests(corpus_text("nccl-tests/all_reduce-h100-8gpu-single-node-nvls-476GBs-g8.txt"))
    bad = parse_nccl_tests(fixture_text("nccl-tests/all_reduce-h100-8gpu-degraded-210GBs.txt"))
    outcomes = [(_job(hosts=(h,)), good) for h in ("n1", "n2", "n3")] + [(_job(hosts=("n4",)), bad)]
    fleet = fleet_nccl(outcomes, _ctx(_profile(), "n1", "n2", "n3", "n4"))
    assert [(f.host, f.check, f.status) for f in fleet] == [("n4", "nccl.all_reduce.node.fleet", Status.WARN)]
    assert math.isclose(fleet[0].value, 210.25)


def test_program_from_profile_settings() -> None:
    profile = dataclasses.replace(_profile(), settings={"benchmarks": {"nccl": {
        "binary_dir": "/opt/nccl-tests/build", "min_bytes": "1G", "max_bytes": "16G",
        "env": {"NCCL_IB_HCA": "mlx5_0:1,mlx5_1:1", "NCCL_SOCKET_IFNAME": "ens7"}}}})
    program = nccl_program(_job(), profile, {})
    assert program.argv[:5] == ("/opt/nccl-tests/build/all_reduce_perf", "-b", "1G", "-e", "16G")
    assert program.env["NCCL_IB_HCA"] == "mlx5_0:1,mlx5_1:1"
    rail = nccl_program(dataclasses.replace(_job("rail", ("a", "b")), rail="mlx5_3:1"), profile, {"nccl.iters": 5})
    assert rail.env["NCCL_IB_HCA"] == "=mlx5_3:1" and rail.argv[rail.argv.index("-n") + 1] == "5"
