"""probes/topology.py: nvidia-smi topo -m over the real corpus and our fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from healthcheck.core.model import CommandResult, Host, Status
from healthcheck.core.profiles import load_profile
from healthcheck.core.spec import EvalContext, ParseError
from healthcheck.probes.topology import evaluate_topology, nvlink_count, parse_nvidia_smi_topo_m, parse_topology
from tests.conftest import FIXTURES, corpus_files, corpus_text, fixture_text


def body(rel: str) -> str:
    """A project fixture without its first (comment) line."""
    return fixture_text(rel).split("\n", 1)[1]


def ctx(profile: str = "h100-sxm5-8x") -> EvalContext:
    return EvalContext(host=Host("gpu001"), profile=load_profile(profile))


def by_check(findings, check):
    return [f for f in findings if f.check == check]


# --- corpus: concrete values -------------------------------------------------------------------

def test_b200_fused_columns_are_split():
    obs = parse_nvidia_smi_topo_m(corpus_text("topo/b200-8gpu-nv18-16nics-tabs-column-overflow-glitches.txt"))
    assert len(obs.gpus) == 8 and len(obs.nics) == 16
    # 'PXBNODE' in GPU2's row and 'SYSSYS' in GPU4's row, ' X NODE' in NIC8's row
    assert obs.link("GPU2", "NIC8") == "PXB" and obs.link("GPU2", "NIC9") == "NODE"
    assert obs.link("GPU4", "NIC9") == "SYS" and obs.link("GPU4", "NIC10") == "PXB"
    assert obs.link("NIC8", "NIC9") == "NODE" and obs.link("NIC8", "NIC8") == "X"
    assert obs.rows[4].cpu_affinity == "56-111,168-223" and obs.rows[4].numa_affinity == "1"
    assert obs.rows[0].gpu_numa_id == "N/A"
    assert obs.nic_name("NIC15") == "mlx5_15"


def test_dgx_a100_pxb_and_legend():
    obs = parse_nvidia_smi_topo_m(corpus_text("topo/dgx-a100-8gpu-nv12-10nics-pxb-8numa.txt"))
    assert {nvlink_count(obs.link(a, b)) for a in obs.gpus for b in obs.gpus if a != b} == {12}
    assert obs.link("GPU6", "NIC7") == "PXB" and obs.link("NIC8", "NIC9") == "PIX"
    assert obs.rows[4].cpu_affinity == "112-127,240-255" and obs.rows[4].numa_affinity == "7"


def test_h20_bond_nic_legend_and_gpu_numa_id():
    obs = parse_nvidia_smi_topo_m(corpus_text("topo/h20-3e-8gpu-nv18-11nics-mlx5-bond-gpu-numa-id.txt"))
    assert obs.nic_name("NIC10") == "mlx5_bond_0" and obs.nic_name("NIC9") == "mlx5_11"
    assert obs.link("GPU6", "NIC8") == "PIX"


def test_ansi_escapes_single_gpu():
    obs = parse_nvidia_smi_topo_m(corpus_text("topo/h100-1gpu-vm-ansi-escapes.txt"))
    assert obs.columns == ("GPU0",)
    assert obs.rows[0].cpu_affinity == "0-19" and obs.rows[0].gpu_numa_id == "N/A"


def test_spaces_layout_and_prompt_line():
    obs = parse_nvidia_smi_topo_m(corpus_text("topo/gb200-tray-4gpu-nv18-no-nics-2numa-legend-truncated.txt"))
    assert obs.gpus == ("GPU0", "GPU1", "GPU2", "GPU3") and obs.nics == ()
    assert obs.link("GPU1", "GPU3") == "NV18" and obs.rows[3].cpu_affinity == "72-143"


def test_topo_mp_pcie_only_matrix():
    obs = parse_nvidia_smi_topo_m(corpus_text("topo/h100-8gpu-topo-mp-12nics-pix-node-dell.txt"))
    assert obs.link("GPU0", "GPU1") == "NODE" and obs.link("GPU0", "NIC2") == "PIX"
    assert obs.rows[0].cpu_affinity == "0,2,4,6,8,10"


def test_terminal_clipped_copy_is_an_error_not_an_answer():
    with pytest.raises(ParseError, match="CPU affinity '-31,64-95'"):
        parse_nvidia_smi_topo_m(corpus_text("topo/h800-8gpu-4nic-terminal-clipped.txt"))


def test_old_p2p_status_matrix_is_skipped_with_reason():
    obs = parse_nvidia_smi_topo_m(corpus_text("topo/k80-4gpu-p2p-status-matrix-OK-NS.txt"))
    assert obs.kind == "p2p" and obs.link("GPU0", "GPU1") == "OK" and obs.link("GPU0", "GPU2") == "NS"
    findings = evaluate_topology(obs, ctx())
    assert [f.status for f in findings] == [Status.SKIP] and "P2P status matrix" in findings[0].message


TOPO = corpus_files("topo")


@pytest.mark.corpus
@pytest.mark.parametrize("path", TOPO, ids=[p.name for p in TOPO])
def test_conformance_every_corpus_layout(path: Path):
    text = corpus_text(f"topo/{path.name}")
    if "terminal-clipped" in path.name:
        with pytest.raises(ParseError):
            parse_nvidia_smi_topo_m(text)
        return
    obs = parse_nvidia_smi_topo_m(text)
    assert obs.gpus and all(len(r.links) == len(obs.columns) for r in obs.rows)
    assert all(obs.link(a, b) == obs.link(b, a) for a in obs.columns for b in obs.columns)
    assert all(obs.link(c, c) == "X" for c in obs.columns)


# --- grading on our fixtures -------------------------------------------------------------------

def test_healthy_h100_passes_every_check():
    obs = parse_nvidia_smi_topo_m(body("topo/h100-8gpu-nv18-8nic-pxb-healthy.txt"))
    findings = evaluate_topology(obs, ctx())
    assert {f.check: f.status for f in findings} == {
        "topology.gpu_pair.nvlink": Status.PASS, "topology.nic.count": Status.PASS,
        "topology.gpu_nic.pcie": Status.PASS}
    assert by_check(findings, "topology.gpu_pair.nvlink")[0].value == 28
    assert by_check(findings, "topology.nic.count")[0].value == 8


def test_degraded_pairs_and_nic_named():
    obs = parse_nvidia_smi_topo_m(body("topo/h100-8gpu-gpu3-gpu5-nv12-gpu0-gpu7-nv17-gpu6-nic-node.txt"))
    findings = evaluate_topology(obs, ctx())
    pairs = {f.component: f for f in by_check(findings, "topology.gpu_pair.nvlink")}
    assert set(pairs) == {"gpu3-gpu5", "gpu0-gpu7"}
    assert pairs["gpu3-gpu5"].status is Status.FAIL and pairs["gpu3-gpu5"].value == 12
    assert pairs["gpu0-gpu7"].value == 17 and pairs["gpu0-gpu7"].expected == ">= 18 links"
    assert "NV12" in pairs["gpu3-gpu5"].message and pairs["gpu3-gpu5"].remedy
    nic = by_check(findings, "topology.gpu_nic.pcie")
    assert [(f.component, f.status, f.value) for f in nic] == [("gpu6", Status.FAIL, "NODE")]
    assert "mlx5_" in nic[0].message and nic[0].source == "nvidia-smi-topo"


def test_a100_profile_grades_corpus_dgx_a100_healthy():
    obs = parse_nvidia_smi_topo_m(corpus_text("topo/dgx-a100-8gpu-nv12-10nics-pxb-8numa.txt"))
    findings = evaluate_topology(obs, ctx("a100-sxm4-80gb-8x"))
    assert all(f.status is Status.PASS for f in findings), [f.message for f in findings]


def test_h800_nv8_fails_every_pair_under_h100_profile():
    obs = parse_nvidia_smi_topo_m(corpus_text("topo/a800-or-h800-8gpu-nv8-4nic-mlx5.txt"))
    findings = evaluate_topology(obs, ctx())
    assert len([f for f in by_check(findings, "topology.gpu_pair.nvlink") if f.status is Status.FAIL]) == 28
    assert by_check(findings, "topology.nic.count")[0].status is Status.FAIL  # 4 < 8
    bad_nic = {f.component for f in by_check(findings, "topology.gpu_nic.pcie")}
    assert bad_nic == {"gpu0", "gpu2", "gpu4", "gpu5", "gpu6"}  # only gpu1, gpu3, gpu7 have a PIX NIC


def test_l40s_profile_skips_nvlink_pairs():
    obs = parse_nvidia_smi_topo_m(body("topo/h100-8gpu-nv18-8nic-pxb-healthy.txt"))
    findings = evaluate_topology(obs, ctx("l40s-pcie-4x"))
    assert {f.status for f in findings} == {Status.SKIP}


# --- bad inputs --------------------------------------------------------------------------------

@pytest.mark.parametrize("name,reason", [
    ("h100-8gpu-header-clipped-nic-columns.txt", "more link cells than the header"),
    ("h100-8gpu-truncated-mid-matrix.txt", "link cells"),
    ("nvml-driver-mismatch.txt", "no 'GPU0"),
])
def test_bad_inputs_raise_with_reason(name, reason):
    with pytest.raises(ParseError, match=reason):
        parse_nvidia_smi_topo_m(body(f"topo/bad/{name}"))
    assert (FIXTURES / "topo" / "bad" / name).is_file()


def test_failed_command_is_a_parse_error_naming_the_tool_message():
    text = b"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
    result = CommandResult(host="gpu001", command_id="nvidia-smi-topo", rc=9, stdout=text)
    with pytest.raises(ParseError, match=r"rc 9.*couldn't communicate"):
        parse_topology({"nvidia-smi-topo": result})


@pytest.mark.parametrize("name", ["h100-8gpu-gpu3-gpu5-nv12-gpu0-gpu7-nv17-gpu6-nic-node.txt",
                                  "h100-8gpu-nv18-8nic-pxb-healthy.txt"])
def test_pairs_and_nics_graded_once_per_class_as_each_alone(name):
    """Each distinct link class graded once a host gives the findings of grading every pair and GPU on its
    own (the nearest NIC is the first of the nearest, as a stable sort's first)."""
    from healthcheck.core import grading
    from healthcheck.probes import topology

    obs = parse_nvidia_smi_topo_m(body(f"topo/{name}"))
    graded = evaluate_topology(obs, ctx())
    original = grading.passes
    calls = []
    try:
        grading.passes = lambda exp, value: calls.append((exp.key, value)) or original(exp, value)
        assert evaluate_topology(obs, ctx()) == graded
    finally:
        grading.passes = original
    assert calls and len(calls) == len(set(calls))  # once per distinct class
    rows, columns = topology._link_table(obs)
    for gpu in obs.gpus:
        assert [rows[gpu][columns[n]] for n in obs.columns] == [obs.link(gpu, n) for n in obs.columns]
    for f in by_check(graded, "topology.gpu_nic.pcie"):  # the first NIC of the nearest class is named
        if f.status is not Status.PASS:
            gpu = f.component.upper()
            rank = {c: i for i, c in enumerate(topology.PCIE_ORDER)}
            nearest = sorted(obs.nics, key=lambda n, g=gpu: rank.get(obs.link(g, n), len(rank)))[0]
            assert f"[nearest NIC {obs.nic_name(nearest)}]" in f.message
