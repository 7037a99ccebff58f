"""HPL / HPCC / HPL-NVIDIA / HPL-MxP: parser over the corpus (concrete values) and the evaluator."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from healthcheck.benchmarks import BenchContext
from healthcheck.benchmarks.hpl import (
    HplResult,
    HplTest,
    evaluate_hpl,
    fleet_hpl,
    hpl_dat,
    hpl_program,
    parse_hpl,
    process_grid,
)
from healthcheck.benchmarks.plan import Job
from healthcheck.core.model import Host, Status
from healthcheck.core.profiles import Expectation, Profile
from healthcheck.core.spec import ParseError
from tests.conftest import CORPUS, corpus_files, corpus_text, fixture_text

LOOPBACK = CORPUS.parent / "research" / "hpcc-4host-loopback-output.txt"


def _profile(gflops: float | None = None, key: str = "hpl.xhpl.node.gflops") -> Profile:
    exp = {}
    if gflops is not None:
        exp[key] = Expectation(key, "test Rpeak", value=gflops, unit="GFLOPS")
    return Profile(name="test", expectations=exp)


def _job(hosts: tuple[str, ...] = ("gpu001",), shape: str = "node") -> Job:
    return Job(job_id=f"hpl-hpl-{shape}-{hosts[0]}", benchmark="hpl", test="hpl", shape=shape, hosts=hosts,
               ranks_per_host=1)


def _ctx(profile: Profile, *hosts: str) -> BenchContext:
    return BenchContext(profile, {h: Host(h) for h in hosts})


def _by(findings, check):
    return [f for f in findings if f.check == check]


@pytest.mark.parametrize("path", corpus_files("hpl"), ids=lambda p: p.name)
def test_conformance_every_corpus_file(path) -> None:
    result = parse_hpl(corpus_text(f"hpl/{path.name}"))
    assert result.flavor in ("hpl", "hpcc", "hpl-nvidia", "hpl-mxp")
    findings = evaluate_hpl(_job(), result, _ctx(_profile(1000.0), "gpu001"))
    statuses = {f.status for f in _by(findings, "hpl.residual")}
    if "FAILED" in path.name and "truncated" not in path.name:
        assert Status.FAIL in {f.status for f in findings}
    elif result.tests:
        assert statuses == {Status.PASS}
    else:  # banner only, truncated or aborted: never a PASS
        assert {f.status for f in findings} & {Status.ERROR, Status.FAIL}


def test_classic_hpl_values() -> None:
    r = parse_hpl(corpus_text("hpl/hpl-2.1-cpu-1proc-passed-with-pdgesv-times.txt"))
    t = r.tests[0]
    assert (r.flavor, r.version, r.complete) == ("hpl", "2.1", True)
    assert (t.variant, t.n, t.nb, t.p, t.q, t.time_s, t.gflops) == ("WC23C2C4", 35000, 256, 1, 1, 16.66, 1715.87)
    assert (t.residual, t.residual_passed) == (0.0041314, True)
    two = parse_hpl(corpus_text("hpl/hpl-2.3-sycl-migrated-xhpl-2tests-residual-4e8-FAILED-tail.txt"))
    assert [(x.gflops, x.residual, x.residual_passed) for x in two.tests] == \
        [(43.357, 4.05852126e08, False), (44.426, 4.05852126e08, False)]


def test_hpcc_section_summary_and_pingpong() -> None:
    r = parse_hpl(corpus_text("hpl/hpcc-1.5.0-hpl-residual-nan-FAILED.txt"))
    assert r.flavor == "hpcc" and r.version == "1.5.0" and r.hpcc_success is False
    assert math.isnan(r.tests[0].residual) and r.tests[0].residual_passed is False
    assert r.tests[0].gflops == 208.5 and r.summary["HPL_Tflops"] == "0.208548"
    assert r.pingpong is None  # single-process run prints -1
    if LOOPBACK.is_file():
        loop = parse_hpl(LOOPBACK.read_text())
        assert (loop.tests[0].n, loop.tests[0].gflops, loop.tests[0].residual) == (2000, 8.706, 0.0058305)
        assert loop.pingpong.max_latency_us == 12.8066 and loop.pingpong.min_bandwidth_gbps == 2.51249
        assert loop.hpcc_success is True and len(loop.tests) == 1  # PTRANS's "Finished" block is not HPL's


def test_hpl_nvidia_formats_and_gpu_warnings() -> None:
    wc0 = parse_hpl(corpus_text(
        "hpl/hpl-nvidia-24.3.0-a100-2node-p2q1-nccl-info-destroy-lines-interleaved-passed-snippet.txt"))
    t = wc0.tests[0]
    assert (t.variant, t.n, t.p, t.q, t.gflops, t.gflops_per_gpu, t.residual) == \
        ("WC0", 136192, 2, 1, 33110.0, 16560.0, 0.000342665054)
    mxp = parse_hpl(corpus_text("hpl/hpl-mxp-24.3.0-a100-8gpu-fp16-sloppy2-result-passed.txt"))
    assert mxp.flavor == "hpl-mxp" and (mxp.tests[0].gflops, mxp.tests[0].gflops_per_gpu) == (878770.0, 109846.77)
    assert (mxp.tests[0].n, mxp.tests[0].p, mxp.tests[0].q) == (380000, 4, 2)
    fp = parse_hpl(corpus_text("hpl/hpl-nvidia-1.0.0-gpu-fp-low-warning-passed.txt"))
    slow = [w for w in fp.gpu_warnings if w.kind == "GPU_FP"]
    assert [(w.rank, w.host, w.gpu, w.value, w.unit) for w in slow] == \
        [(1, "node2", "0000:3b:00.0", 6993.0, "GFLPS"), (2, "node2", "0000:af:00.0", 6878.0, "GFLPS")]
    findings = evaluate_hpl(_job(("node2",)), fp, _ctx(_profile(), "node2"))
    gpu = _by(findings, "hpl.gpu_warning")
    assert {f.component for f in gpu} == {"gpu 0000:3b:00.0", "gpu 0000:af:00.0"}
    assert all(f.status is Status.WARN and f.host == "node2" for f in gpu)
    assert any("GPU_FP 6993 GFLPS" in f.message and "rank 1" in f.message for f in gpu)


def test_residual_fail_truncation_and_abort() -> None:
    nan = parse_hpl(corpus_text("hpl/hpcc-1.5.0-hpl-residual-nan-FAILED.txt"))
    residual = _by(evaluate_hpl(_job(), nan, _ctx(_profile(100.0), "gpu001")), "hpl.residual")[0]
    assert residual.status is Status.FAIL and residual.value == "nan" and residual.remedy
    assert not _by(evaluate_hpl(_job(), nan, _ctx(_profile(100.0), "gpu001")), "hpl.node.gflops")
    cut = parse_hpl(corpus_text("hpl/hpl-nvidia-1.0.0-truncated-run-no-result.txt"))
    assert cut.complete is False and cut.progress_pct == 4.92
    job = _by(evaluate_hpl(_job(), cut, _ctx(_profile(), "gpu001")), "hpl.job")[0]
    assert job.status is Status.ERROR and "Prog= 4.92%" in job.message
    crash = parse_hpl(corpus_text("hpl/hpl-nvidia-24.6.0-gh200-aarch64-72rank-cublas-init-failed-sigabrt-head.txt"))
    run = _by(evaluate_hpl(_job(), crash, _ctx(_profile(), "gpu001")), "hpl.run")[0]
    assert run.status is Status.FAIL and "CUBLAS initialization failed" in run.message
    full = corpus_text("hpl/hpl-2.3-openmpi4-ucx-1node-32rank-passed-stackhpc.txt")
    own = parse_hpl(full[:full.index("T/V                N")])  # xhpl killed before its result table
    assert _by(evaluate_hpl(_job(), own, _ctx(_profile(), "gpu001")), "hpl.job")[0].status is Status.ERROR
    with pytest.raises(ParseError):
        parse_hpl(fixture_text("hpl/bad/garbage.txt"))


def test_gflops_against_rpeak_and_fleet() -> None:
    r = parse_hpl(corpus_text("hpl/intel-mkl-hpl-1socket-memory-fragmented-warning-low-perf-passed-elided.txt"))
    findings = evaluate_hpl(_job(("a5node55",)), r, _ctx(_profile(1700.0), "a5node55"))
    gflops = _by(findings, "hpl.node.gflops")[0]
    assert gflops.status is Status.WARN and gflops.value == 945.554
    assert "945.6 GFLOPS = 56% of Rpeak 1700.0 GFLOPS" in gflops.message
    assert _by(findings, "hpl.warning")[0].status is Status.WARN  # "Memory is too fragmented"
    fast = parse_hpl(corpus_text("hpl/hpl-2.1-cpu-1proc-passed-with-pdgesv-times.txt"))  # 1715.87 GFLOPS
    slow = parse_hpl(corpus_text("hpl/hpl-2.3-openmpi4-ucx-1node-32rank-passed-stackhpc.txt"))  # 832.95
    fleet = fleet_hpl([(_job(("n1",)), fast), (_job(("n2",)), slow)], _ctx(_profile(), "n1", "n2"))
    assert [(f.host, f.status) for f in fleet] == [("n1", Status.PASS), ("n2", Status.WARN)]
    assert "n1" in fleet[1].expected and fleet[1].check == "hpl.node.fleet"


@pytest.mark.parametrize(("gflops", "status"), [(950.5, Status.PASS), (949.5, Status.WARN)])
def test_fleet_warns_only_beyond_5_percent_below_the_best(gflops: float, status: Status) -> None:
    def result(value: float) -> HplResult:
        test = HplTest("WR11C2R4", 1000, 128, 1, 1, 10.0, value, residual=0.001, residual_passed=True)
        return HplResult(flavor="hpl", version="2.3", tests=(test,), complete=True)

    fleet = fleet_hpl([(_job(("best",)), result(1000.0)), (_job(("other",)), result(gflops))],
                      _ctx(_profile(), "best", "other"))
    other = next(f for f in fleet if f.host == "other")
    assert other.status is status and other.value == gflops
    assert other.expected == ">= 95% of the best node (best: 1000 GFLOPS)"


def test_input_file_and_grid() -> None:
    assert [process_grid(n) for n in (1, 2, 4, 6, 8, 16)] == [(1, 1), (1, 2), (2, 2), (2, 3), (2, 4), (4, 4)]
    dat = hpl_dat(20000, 192, 2, 4).splitlines()
    assert len(dat) == 31 and dat[3].startswith("6 ") and dat[5].split()[0] == "20000" and dat[11].split()[0] == "4"
    assert len(hpl_dat(1000, 64, 1, 2, hpcc=True).splitlines()) == 36
    program = hpl_program(_job(("a", "b", "c", "d"), "cluster"), _profile(), {"hpl.flavor": "hpcc", "hpl.n": 1000,
                                                                              "hpl.nb": 100})
    assert program.output_files == ("hpccoutf.txt",) and program.argv == ("hpcc",)
    assert "2000         Ns" in program.input_files["hpccinf.txt"]  # N x sqrt(4 nodes)


def test_bad_fixture_folder_is_all_error_or_parse_error() -> None:
    for path in sorted(Path(fixture_text.__globals__["FIXTURES"] / "hpl" / "bad").glob("*.txt")):
        try:
            result = parse_hpl(path.read_text())
        except ParseError:
            continue
        statuses = {f.status for f in evaluate_hpl(_job(), result, _ctx(_profile(), "gpu001"))}
        assert statuses == {Status.ERROR}, path.name


MXP = "hpl/hpl-mxp-24.3.0-a100-8gpu-fp16-sloppy2-result-passed.txt"
WC0 = "hpl/hpl-nvidia-24.3.0-a100-80gb-1gpu-wc0-result-block-passed-snippet.txt"


def test_each_flavour_is_graded_against_its_own_expectation() -> None:
    """HPL-MxP on 8x A100 (878.8 TFLOPS mixed precision) was graded against the FP64 Rpeak (563 %, "excellent")."""
    from healthcheck.core.profiles import load_profile

    a100 = load_profile("a100-sxm4-80gb-8x")
    mxp = evaluate_hpl(_job(("a100n1",)), parse_hpl(corpus_text(MXP)), _ctx(a100, "a100n1"))
    assert not _by(mxp, "hpl.node.gflops")  # never against the FP64 Rpeak
    [graded] = _by(mxp, "hpl.mxp.node.gflops")
    assert graded.status is Status.PASS and graded.value == 878770.0
    assert "= 35% of Rpeak 2496000 GFLOPS" in graded.message
    # the FP64 flavours: HPL-NVIDIA against hpl.node.gflops, xhpl/HPCC against hpl.xhpl.node.gflops
    nvidia = parse_hpl(corpus_text(WC0))
    assert nvidia.flavor == "hpl-nvidia"
    [fp64] = _by(evaluate_hpl(_job(), nvidia, _ctx(_profile(19500.0, "hpl.node.gflops"), "gpu001")),
                 "hpl.node.gflops")
    assert fp64.status is Status.PASS and "16980.0 GFLOPS = 87% of Rpeak 19500.0" in fp64.message
    [skip] = _by(evaluate_hpl(_job(), nvidia, _ctx(_profile(19500.0, "hpl.xhpl.node.gflops"), "gpu001")),
                 "hpl.node.gflops")
    assert skip.status is Status.SKIP and "no expectation hpl.node.gflops" in skip.message


@pytest.mark.parametrize(("path", "key", "rpeak"), [
    (MXP, "hpl.mxp.node.gflops", 156000.0),   # the MxP key holding the FP64 Rpeak: 563 %
    (WC0, "hpl.node.gflops", 9700.0),         # FP64 Rpeak of a smaller GPU: 175 %
])
def test_far_above_rpeak_is_an_error_never_excellent(path: str, key: str, rpeak: float) -> None:
    result = parse_hpl(corpus_text(path))
    findings = [f for f in evaluate_hpl(_job(), result, _ctx(_profile(rpeak, key), "gpu001"))
                if f.check.endswith(".node.gflops")]
    assert [f.status for f in findings] == [Status.ERROR]
    assert "above the theoretical peak" in findings[0].message and "excellent" not in findings[0].message
    assert findings[0].expected.startswith("<= 110% of ")


def test_hpcc_pingpong_is_graded_against_the_imb_pingpong_expectations() -> None:
    """HPCC's own PingPong used to be always SKIP (no profile has hpcc.pingpong.*)."""
    result = parse_hpl(corpus_text("hpl/hpcc-1.4.2-sample-full-summary-pkb.txt"))
    assert result.pingpong is not None and result.pingpong.max_latency_us == 0.384119
    imb = Profile(name="ib", expectations={
        "imb.pingpong.latency_us": Expectation("imb.pingpong.latency_us", "test", op="le", value=2.0, unit="us"),
        "imb.pingpong.bandwidth_gbps": Expectation("imb.pingpong.bandwidth_gbps", "test", value=48, unit="GB/s")})
    findings = {f.check: f for f in evaluate_hpl(_job(("n1", "n2"), "pair"), result, _ctx(imb, "n1", "n2"))
                if f.host == "n1" and f.check.startswith("hpcc.pingpong")}
    assert findings["hpcc.pingpong.latency"].status is Status.PASS
    assert findings["hpcc.pingpong.bandwidth"].status is Status.FAIL  # 6.85 GB/s = 14 % of 48
    assert findings["hpcc.pingpong.bandwidth"].value == 6.851
    bare = evaluate_hpl(_job(("n1", "n2"), "pair"), result, _ctx(_profile(), "n1", "n2"))
    latency = next(f for f in bare if f.check == "hpcc.pingpong.latency")
    assert latency.status is Status.SKIP
    assert "hpcc.pingpong.latency_us or imb.pingpong.latency_us" in latency.message


def test_hpl_mxp_program_takes_the_problem_on_its_command_line() -> None:
    program = hpl_program(_job(("a",)), _profile(), {"hpl.flavor": "hpl-mxp", "hpl.n": 380000, "hpl.nb": 4096})
    assert program.argv == ("hpl-mxp.sh", "--n", "376832",  # N rounded down to a multiple of NB
                             "--nb", "4096", "--nprow", "1", "--npcol", "1")
    assert not program.input_files
