"""IMB-MPI1 and OSU micro-benchmarks: parsers over the corpus (concrete values) and the evaluators."""

from __future__ import annotations

import pytest

from healthcheck.benchmarks import BenchContext
from healthcheck.benchmarks.imb import evaluate_imb, imb_program, parse_imb
from healthcheck.benchmarks.osu import evaluate_osu, parse_osu
from healthcheck.benchmarks.plan import Job
from healthcheck.core.model import Host, Status
from healthcheck.core.profiles import Expectation, Profile
from healthcheck.core.spec import ParseError
from tests.conftest import corpus_files, corpus_text, fixture_text

PAIR = ("node01", "node02")


def _profile(**expect: Expectation) -> Profile:
    return Profile(name="test-ndr", expectations=expect)


NDR = _profile(**{
    "imb.pingpong.latency_us": Expectation("imb.pingpong.latency_us", "test", op="le", value=2.0, unit="us"),
    "imb.pingpong.bandwidth_gbps": Expectation("imb.pingpong.bandwidth_gbps", "test", value=12.0, unit="GB/s"),
    "osu.latency.latency_us": Expectation("osu.latency.latency_us", "test", op="le", value=2.0, unit="us"),
    "osu.bw.bandwidth_gbps": Expectation("osu.bw.bandwidth_gbps", "test", value=12.0, unit="GB/s"),
})


def _job(benchmark: str = "imb", test: str = "IMB-MPI1") -> Job:
    return Job(job_id=f"{benchmark}-{test}-pair-node01-node02", benchmark=benchmark, test=test, shape="pair",
               hosts=PAIR, ranks_per_host=1)


def _ctx(profile: Profile, **options) -> BenchContext:
    return BenchContext(profile, {h: Host(h) for h in PAIR}, options)


@pytest.mark.parametrize("path", corpus_files("imb"), ids=lambda p: p.name)
def test_imb_conformance(path) -> None:
    text = corpus_text(f"imb/{path.name}")
    if "truncated" in path.name:
        with pytest.raises(ParseError):
            parse_imb(text)
        return
    result = parse_imb(text)
    assert result.sections and all(s.rows for s in result.sections)
    wanted = [s.benchmark.removeprefix("Multi-") for s in result.sections]
    findings = evaluate_imb(_job(), result, _ctx(NDR, **{"imb.benchmarks": wanted}))
    if "error" in path.name:
        assert {f.status for f in findings} == {Status.ERROR}
    else:
        assert findings and Status.ERROR not in {f.status for f in findings}


@pytest.mark.parametrize("path", corpus_files("osu"), ids=lambda p: p.name)
def test_osu_conformance(path) -> None:
    result = parse_osu(corpus_text(f"osu/{path.name}"))
    assert result.rows and result.columns and result.version in ("5.6.3", "5.7.1", "7.5")
    assert (result.small_latency_us is not None) != (result.max_bandwidth_gbps is not None)


def test_pingpong_values() -> None:
    r = parse_imb(corpus_text("imb/imb-2019u6-pingpong-2proc-ib-openmpi3-ucx-1us.txt"))
    pp = r.section("PingPong")
    assert r.version == "2019 Update 6" and r.complete and pp.processes == 2 and len(pp.rows) == 24
    assert (pp.rows[-1].bytes, pp.rows[-1].repetitions, pp.rows[-1].t_usec) == (4194304, 10, 348.15)
    assert pp.small_latency_usec == 1.0 and pp.max_bandwidth_gbps == pytest.approx(12.04746)
    findings = evaluate_imb(_job(), r, _ctx(NDR))
    assert {(f.check, f.status) for f in findings} == {("imb.pingpong.latency", Status.PASS),
                                                     ("imb.pingpong.bandwidth", Status.PASS)}


def test_multi_sections_and_columns() -> None:
    bi = parse_imb(corpus_text("imb/imb-2019u6-biband-ib-openmpi3-ucx-additional-procs-waiting-in-barrier.txt"))
    assert [(s.benchmark, s.processes) for s in bi.sections] == [("Biband", 2), ("Biband", 4)]
    assert bi.sections[0].max_bandwidth_gbps == pytest.approx(25.66137)
    assert bi.sections[0].rows[-1].msg_per_s == 6118 and bi.sections[0].small_latency_usec is None
    multi = parse_imb(corpus_text("imb/imb-2019u6-multi-pingpong-gcp-2groups.txt"))
    s = multi.sections[0]
    assert (s.benchmark, s.name, s.groups) == ("Multi-PingPong", "pingpong", 2)
    assert (s.rows[0].t_min_usec, s.rows[0].t_max_usec, s.rows[0].t_usec) == (56.92, 61.39, 59.15)
    barrier = parse_imb(corpus_text("imb/imb-2019u6-multi-barrier-gcp.txt"))
    assert barrier.sections[1].rows[0].bytes is None and barrier.sections[1].small_latency_usec == 91.24
    tail = parse_imb(corpus_text("imb/imb-2019u6-pingpong-show-tail-dumpfile-gcp.txt"))
    assert [row.bytes for row in tail.sections[0].rows] == [0, 1024]  # -show_tail lines skipped


def test_degraded_link_and_bad_outputs() -> None:
    slow = parse_imb(fixture_text("imb/imb-pingpong-degraded-link-4.8us.txt"))
    findings = {f.check: f for f in evaluate_imb(_job(), slow, _ctx(NDR)) if f.host == "node01"}
    assert findings["imb.pingpong.latency"].status is Status.FAIL and findings["imb.pingpong.latency"].value == 4.8
    assert findings["imb.pingpong.bandwidth"].status is Status.FAIL
    assert findings["imb.pingpong.bandwidth"].component == "pair node01-node02"
    own = fixture_text("imb/imb-pingpong-ndr-healthy-1.1us-47.6GBs.txt")
    cut = parse_imb(own[:own.index("        32768")])  # killed mid-table: no MPI_Finalize line
    errors = evaluate_imb(_job(), cut, _ctx(NDR))
    assert {f.status for f in errors} == {Status.ERROR} and "MPI_Finalize" in errors[0].message
    invalid = parse_imb(corpus_text("imb/imb-rma-one_put_all-invalid-benchmark-name-error.txt"))
    assert invalid.errors[0] == "Invalid benchmark name -zero_size"
    not_found = parse_imb(fixture_text("imb/bad/garbage.txt"))  # "bash: IMB-MPI1: command not found": the cause
    assert [e.message for e in not_found.launcher_errors] == ["IMB-MPI1: command not found on the launcher host"]
    with pytest.raises(ParseError):
        parse_imb("0123 not an IMB line\n")
    missing = evaluate_imb(_job(), parse_imb(corpus_text("imb/imb-2019u6-reduce-2proc-gcp.txt")), _ctx(NDR))
    assert missing[0].status is Status.ERROR and "PingPong" in missing[0].message


def test_osu_values_and_grading() -> None:
    lat = parse_osu(corpus_text("osu/osu_latency-v5.6.3-openmpi3-ucx-ib-csd3-0.97us.txt"))
    assert (lat.kind, lat.version, lat.small_latency_us, lat.rows[3]) == ("latency", "5.6.3", 0.98, (4, (0.97,)))
    bw = parse_osu(corpus_text("osu/osu_bw-v7.5-roce-oci-single-size-256MiB-12254MBs-ucx-set-line.txt"))
    assert bw.kind == "bw" and bw.rows == ((268435456, (12254.16,)),)
    assert bw.max_bandwidth_gbps == pytest.approx(12.25416)
    tcp = parse_osu(corpus_text("osu/osu_latency-v5.7.1-intelmpi-tcp-2vm-gcp.txt"))
    graded = evaluate_osu(_job("osu", "osu_latency"), tcp, _ctx(NDR))
    assert next((f.check, f.status, f.value) for f in graded) == ("osu.latency.latency", Status.FAIL, 25.21)
    ok = evaluate_osu(_job("osu", "osu_bw"), bw, _ctx(NDR))
    assert {f.status for f in ok} == {Status.PASS}
    with pytest.raises(ParseError):
        parse_osu("bash: osu_bw: command not found\n")


def test_imb_program() -> None:
    program = imb_program(_job(), NDR, {"imb.benchmarks": ["PingPong", "Uniband"], "imb.msglog": "0:20"})
    assert program.argv == ("IMB-MPI1", "PingPong", "Uniband", "-msglog", "0:20")


def test_osu_own_fixture_passes_without_the_corpus() -> None:
    """Our own osu_latency capture (the corpus layout, our values): parsed and graded PASS against NDR."""
    lat = parse_osu(fixture_text("osu/osu-latency-ndr-healthy-1.10us.txt"))
    assert (lat.kind, lat.version, lat.small_latency_us, lat.rows[-1]) == ("latency", "5.6.3", 1.11,
                                                                           (4194304, (362.71,)))
    graded = evaluate_osu(_job("osu", "osu_latency"), lat, _ctx(NDR))
    assert next((f.check, f.status, f.value) for f in graded) == ("osu.latency.latency", Status.PASS, 1.11)
