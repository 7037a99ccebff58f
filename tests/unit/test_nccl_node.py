"""The gate's NCCL run on one node: nccl-tests' grading (busbw floor = the acceptable band of the profile's node
busbw) and the transport between the node's GPUs from NCCL's channel lines (P2P, SHM, NET, Socket)."""

from __future__ import annotations

import pytest

from healthcheck.benchmarks import BenchContext
from healthcheck.benchmarks.nccl_node import SPEC, parse_nccl_node, parse_node_paths, program_nccl_node
from healthcheck.benchmarks.plan import Job
from healthcheck.core.model import Status
from healthcheck.core.profiles import EMPTY_PROFILE, load_profile
from tests.conftest import corpus_text, fixture_text

H100 = load_profile("h100-sxm5-8x")
JOB = Job(job_id="gate.nccl.gpu001", benchmark="nccl", test="all_reduce_perf", shape="node", hosts=("gpu001",),
          ranks_per_host=8)


def grade(name: str, profile=H100):
    text = fixture_text(f"nccl-tests/{name}")
    return SPEC.evaluate(JOB, SPEC.parse(text), BenchContext(profile, {}))


def statuses(findings):
    return {f.check: f.status for f in findings}


def test_channel_lines_of_real_nccl_output():
    paths = parse_node_paths(corpus_text("nccl-tests/all_reduce-2node-16gpu-socket-NCCL-WARN-socketFinalizeAccept.txt"))
    assert paths.channels == {"P2P/CUMEM": 2} and paths.kind == "P2P"
    shm = parse_node_paths("host:3884652:3884740 [7] NCCL INFO Channel 01 : 7[7] -> 2[2] via SHM/direct/direct\n"
                           "hw14:798:813 [3] NCCL INFO Channel 02/0 : 3[3] -> 4[4] via P2P/direct pointer\n")
    assert shm.channels == {"SHM/direct/direct": 1, "P2P/direct pointer": 1} and shm.kind == "SHM"
    assert parse_node_paths("no nccl here").kind is None


def test_healthy_node_passes_data_ranks_busbw_and_p2p():
    found = statuses(grade("all_reduce-h100-1node-g8-1G-p2p-healthy-465GBs.txt"))
    assert found == {"nccl.all_reduce.data": Status.PASS, "nccl.all_reduce.node.busbw": Status.PASS,
                     "nccl.all_reduce.node.transport": Status.PASS}
    result = parse_nccl_node(fixture_text("nccl-tests/all_reduce-h100-1node-g8-1G-p2p-healthy-465GBs.txt"))
    assert result.paths.nvls and result.paths.channels == {"P2P/CUMEM": 32}
    assert result.tests.rows[0].busbw_gbps == 465.25


def test_shm_fallback_fails_busbw_floor_and_transport():
    findings = grade("all_reduce-h100-1node-g8-1G-shm-fallback-38GBs.txt")
    found = statuses(findings)
    assert found["nccl.all_reduce.node.busbw"] is Status.FAIL and found["nccl.all_reduce.node.transport"] is Status.FAIL
    transport = next(f for f in findings if f.check == "nccl.all_reduce.node.transport")
    assert transport.value == "SHM" and "SHM/direct/direct x32" in transport.message


def test_socket_fallback_fails_even_without_a_profile():
    findings = grade("all_reduce-h100-1node-g8-1G-socket-fallback-9GBs.txt", EMPTY_PROFILE)
    transport = next(f for f in findings if f.check == "nccl.all_reduce.node.transport")
    assert transport.status is Status.FAIL and transport.value == "Socket"
    shm = grade("all_reduce-h100-1node-g8-1G-shm-fallback-38GBs.txt", EMPTY_PROFILE)
    assert statuses(shm)["nccl.all_reduce.node.transport"] is Status.SKIP   # no nccl.node.transport expectation


def test_no_info_lines_is_skip_saying_how():
    findings = grade("all_reduce-h100-1node-8gpu-healthy-476GBs-8G-16G.txt")
    transport = next(f for f in findings if f.check == "nccl.all_reduce.node.transport")
    assert transport.status is Status.SKIP and "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT" in transport.message


@pytest.mark.parametrize("options,binary,size", [({}, "/opt/nccl-tests/build/all_reduce_perf", "2G"),
                                                 ({"nccl_node.bytes": "1G", "nccl.binary_dir": ""},
                                                  "all_reduce_perf", "1G")])
def test_program_one_process_all_gpus_one_size(options, binary, size):
    program = program_nccl_node(JOB, H100, options)
    assert program.argv == (binary, "-b", size, "-e", size, "-g", "8", "-c", "1", "-n", "20", "-w", "5")
    assert program.env["NCCL_DEBUG"] == "INFO" and program.env["NCCL_DEBUG_SUBSYS"] == "INIT"
