"""The GB200/GB300 NVL72 tray profiles against real GB200 outputs of the corpus (topology, NVLink, nccl-tests)."""

from __future__ import annotations

from healthcheck import benchmarks, probes
from healthcheck.core.model import CommandResult, Host, Status
from healthcheck.core.profiles import load_profile
from healthcheck.core.spec import EvalContext
from tests.conftest import corpus_text


def graded(probe: str, cid: str, corpus: str, profile: str = "gb200-nvl72-tray"):
    spec = probes.get(probe)
    obs = spec.parse({cid: CommandResult("tray", cid, corpus_text(corpus).encode(), rc=0)})
    return spec.evaluate(obs, EvalContext(host=Host("tray"), profile=load_profile(profile)))


def test_real_gb200_tray_topology_is_nv18_between_its_four_gpus():
    findings = graded("topology", "nvidia-smi-topo", "topo/gb200-tray-4gpu-nv18-no-nics-2numa-legend-truncated.txt")
    pairs = [f for f in findings if f.check == "topology.gpu_pair.nvlink"]
    assert pairs and {f.status for f in pairs} == {Status.PASS}


def test_real_gb200_nvlink_status_meets_the_profile_where_the_excerpt_is_whole():
    """GPU 0 is printed whole (18 links x 53.125 GB/s); the author elided GPUs 1-3 after two links."""
    findings = graded("nvlink", "nvidia-smi-nvlink-s", "nvlink/gb200-status-18links-53.125GBs-nvlink5-elided.txt",
                      profile="gb300-nvl72-tray")
    links = {f.component: (f.status, f.value) for f in findings if f.check == "nvlink.links"}
    assert links["gpu0"] == (Status.PASS, 18) and links["gpu1"] == (Status.FAIL, 2)


def test_real_gb200_domain_nccl_tails_parse():
    spec = benchmarks.get("nccl")
    got = {name: spec.metric(spec.parse(corpus_text(f"nccl-tests/all_reduce-gb200-{name}-tail.txt")))
           for name in ("nvl72-72gpu-single-rack", "nvl72-144gpu-2racks", "1440gpu-20racks")}
    assert got == {"nvl72-72gpu-single-rack": 846.82, "nvl72-144gpu-2racks": 820.36, "1440gpu-20racks": 405.74}


def test_gb300_inherits_the_rack_layout_and_overrides_the_gpu():
    gb200, gb300 = load_profile("gb200-nvl72-tray"), load_profile("gb300-nvl72-tray")
    assert gb300.expect("domain.trays").value == gb200.expect("domain.trays").value == 18
    assert gb300.expect("domain.one_clique").value is True
    assert (gb200.expect("gpu.model").value, gb300.expect("gpu.model").value) == ("GB200", "GB300")
    assert gb300.expect("gpu.memory_mib").value == 284208 and gb300.expect("fabric.manager") is None


def test_hgx_b300_profile_grades_what_has_a_public_source_and_nothing_of_the_b200():
    from healthcheck.core.grading import grade

    b300 = load_profile("b300-hgx-8x")
    assert (b300.expect("gpu.count").value, b300.expect("gpu.model").value) == (8, "B300")
    assert grade(b300.expect("gpu.memory_mib"), 275040) is Status.PASS        # nvidia-smi on a B300 SXM6 AC
    assert grade(b300.expect("gpu.memory_mib"), 183359) is Status.FAIL        # a B200 (corpus b200-8gpu-drv570-idle)
    assert b300.expect("nvlink.link.speed_gbps").value == 53.125 and b300.expect("copy.d2d_gbps").value == 900
    assert b300.expect("fabric.manager").value == "active" and b300.expect("domain.trays") is None
    for absent in ("gpu.power_limit_w", "gpu.pcie.gen_max", "hpl.node.gflops", "ib.port.rate_gbps", "ib.hca.type",
                   "nccl.all_reduce.node.busbw_gbps", "system.memory_gib", "system.cpu_count"):
        assert b300.expect(absent) is None, absent
    assert not [e.key for e in b300.expectations.values() if "DGX B200" in e.source or "HGX B200" in e.source]
