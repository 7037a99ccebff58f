"""dcgmi mndiag --json (DCGM 4.6 dcgmi/MnDiag.cpp layout, tests/fixtures/mndiag/README.md) parsed and graded per
host of a GB200 NVL72 domain: DCGM's own verdict per tray and GPU, the failing tray and GPU named, a tray DCGM
did not report, a failure without a GPU result (MPI), a run that did not start, garbage. No real mndiag output is
public: the fixtures are ours, in the layout DCGM's source prints."""

from __future__ import annotations

import json

import pytest

from healthcheck.benchmarks import BenchContext, get
from healthcheck.benchmarks.mndiag import mndiag_program, parse_mndiag
from healthcheck.benchmarks.plan import Job
from healthcheck.core.model import Host, Status
from healthcheck.core.profiles import EMPTY_PROFILE, load_profile
from healthcheck.core.spec import ParseError
from tests.conftest import fixture_text

GB200 = load_profile("gb200-nvl72-tray")
TRAYS = tuple(f"r07t{i:02d}" for i in range(1, 19))
JOB = Job(job_id="mndiag-mnubergemm-cluster-18nodes-r07t01", benchmark="mndiag", test="mnubergemm", shape="cluster",
          hosts=TRAYS, ranks_per_host=1)


def grade(name: str, profile=GB200):
    return get("mndiag").evaluate(JOB, parse_mndiag(fixture_text(f"mndiag/{name}")),
                                  BenchContext(profile, {h: Host(h) for h in TRAYS}))


def not_passing(findings):
    return sorted((f.host, f.check, f.component, f.status.value) for f in findings if f.status is not Status.PASS)


def test_parse_hosts_results_and_errors():
    result = parse_mndiag(fixture_text("mndiag/gb200-nvl72-r07t11-gpu1-fail.json"))
    assert (result.test, result.status, result.num_hosts, len(result.results)) == ("mnubergemm", "Fail", 18, 72)
    assert result.hosts[10].hostname == "r07t11" and result.hosts[10].gpus == (0, 1, 2, 3)
    assert result.hosts[10].driver_version == "580.173.02"
    failed = [r for r in result.results if r.status == "Fail"]
    assert [(r.host_id, r.entity_id) for r in failed] == [(10, 1)]
    assert failed[0].errors[0].error_id == 1 and failed[0].errors[0].text.startswith("CUDA Error : cudaStreamQuery")


def test_passing_domain_is_pass_per_tray():
    findings = grade("gb200-nvl72-18trays-pass.json")
    assert not_passing(findings) == []
    assert len(findings) == 18 and {f.value for f in findings} == {"Pass"}
    assert "dcgmi mndiag on r07t01 (host 0): 4 GPUs, all Pass" in findings[0].message


def test_failing_gpu_names_its_tray_and_the_rest_pass():
    findings = grade("gb200-nvl72-r07t11-gpu1-fail.json")
    assert not_passing(findings) == [("r07t11", "mndiag.gpu", "gpu1", "FAIL"),
                                     ("r07t11", "mndiag.result", "cluster (18 nodes)", "FAIL")]
    gpu = next(f for f in findings if f.check == "mndiag.gpu")
    assert gpu.message == ("GPU 1 of r07t11: mnubergemm Fail: CUDA Error : cudaStreamQuery returned an illegal "
                           "memory access was encountered") and gpu.remedy
    verdict = next(f for f in findings if f.host == "r07t11" and f.check == "mndiag.result")
    assert "r07t11 (host 10): 4 GPUs, GPU 1 Fail" in verdict.message and verdict.value == "Fail"
    assert len([f for f in findings if f.check == "mndiag.result" and f.status is Status.PASS]) == 17


def test_without_expectation_a_failure_is_warn_and_a_pass_skip():
    findings = grade("gb200-nvl72-r07t11-gpu1-fail.json", profile=EMPTY_PROFILE)
    verdicts = {f.host: f.status for f in findings if f.check == "mndiag.result"}
    assert verdicts["r07t11"] is Status.WARN and verdicts["r07t01"] is Status.SKIP


def test_tray_not_reported_is_error_not_pass():
    findings = grade("gb200-nvl72-17trays-r07t05-not-reported.json")
    assert not_passing(findings) == [("r07t05", "mndiag.run", "cluster (18 nodes)", "ERROR")]
    assert "r07t05 not in dcgmi mndiag's results (17 hosts reported)" in findings[4].message


def test_failure_without_gpu_result_and_a_run_that_did_not_start_are_errors():
    mpi = grade("gb200-nvl72-mpi-error-no-gpu-result.json")
    assert {(f.check, f.status) for f in mpi} == {("mndiag.run", Status.ERROR)} and len(mpi) == 18
    assert "mnubergemm Fail without a GPU error: Error: mpirun exited with code 1" in mpi[0].message
    runtime = grade("gb200-nvl72-runtime-error.json")
    assert {(f.check, f.status) for f in runtime} == {("mndiag.run", Status.ERROR)}
    assert "did not run: Unable to connect to host engine at r07t09:5555" in runtime[0].message


def test_noise_around_the_document_is_skipped():
    text = "Warning: Permanently added 'r07t01' to known hosts.\n" + fixture_text(
        "mndiag/gb200-nvl72-18trays-pass.json")
    assert parse_mndiag(text + "\nbye\n").status == "Pass"


@pytest.mark.parametrize("text", ["", "hello\n", '{"DCGM Diagnostic": "DCGM Diagnostic"}',
                                  '{"DCGM Diagnostic": "DCGM Multi-Node Diagnostic", "test_categories": "x"}',
                                  json.dumps({"DCGM Diagnostic": "DCGM Multi-Node Diagnostic", "test_categories": [
                                      {"tests": [{"name": "mnubergemm", "status": "Great"}]}]})])
def test_garbage_raises_parse_error(text):
    with pytest.raises(ParseError):
        parse_mndiag(text)


def test_program_lists_every_tray_and_asks_for_json():
    argv = mndiag_program(JOB, GB200, {"mndiag.parameters": ["mnubergemm.time_to_run=300"]}).argv
    assert argv[:4] == ("dcgmi", "mndiag", "--hostList", ";".join(TRAYS))
    assert argv[4:] == ("--run", "mnubergemm", "--json", "--parameters", "mnubergemm.time_to_run=300")
    assert get("mndiag").launcher == "direct"


def test_the_plain_text_table_reads_like_the_json():
    from healthcheck.benchmarks.mndiag_text import parse_mndiag_table

    text = parse_mndiag(fixture_text("mndiag/gb200-nvl72-r07t11-gpu1-fail-table.txt"))
    doc = parse_mndiag(fixture_text("mndiag/gb200-nvl72-r07t11-gpu1-fail.json"))
    assert [(r.host_id, r.entity_id, r.status, [e.text for e in r.errors]) for r in text.results] == [
        (r.host_id, r.entity_id, r.status, [e.text for e in r.errors]) for r in doc.results]
    assert [h.hostname for h in text.hosts] == list(TRAYS) and text.num_hosts == 18
    fields = parse_mndiag_table(fixture_text("mndiag/gb200-nvl72-18trays-pass-table.txt"))
    assert (fields["status"], fields["driver"], fields["dcgm"], len(fields["results"])) == (
        "Pass", "580.173.02", "4.6.0", 72)
    findings = get("mndiag").evaluate(JOB, text, BenchContext(GB200, {h: Host(h) for h in TRAYS}))
    assert not_passing(findings) == [("r07t11", "mndiag.gpu", "gpu1", "FAIL"),
                                     ("r07t11", "mndiag.result", "cluster (18 nodes)", "FAIL")]


def test_a_failure_printed_before_the_table_is_the_runtime_error():
    table = fixture_text("mndiag/gb200-nvl72-18trays-pass-table.txt").split("|-----  Host Details")[0]
    table = table.replace("Successfully ran multi-node diagnostic.", "Multi-node diagnostic failed.")
    result = parse_mndiag("Error: Unable to reserve GPUs on r07t09.\n" + table)
    assert result.runtime_error == "Error: Unable to reserve GPUs on r07t09." and not result.results
    findings = get("mndiag").evaluate(JOB, result, BenchContext(GB200, {}))
    assert {(f.check, f.status) for f in findings} == {("mndiag.run", Status.ERROR)}
