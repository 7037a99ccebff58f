"""probes/fabric_health.py via the fabric probe: R570+ fabric identity (clique, cluster UUID) and health block."""

from __future__ import annotations

from healthcheck.core.model import CommandResult, Host, Status
from healthcheck.core.profiles import load_profile
from healthcheck.core.spec import EvalContext
from healthcheck.probes.fabric import evaluate_fabric, parse_fabric
from healthcheck.probes.nvml_fabric import decode_health, uuid_text
from tests.conftest import corpus_text, fixture_text

TRAY = fixture_text("nvidia-smi-xml/gb200-tray-4x-healthy.xml")   # 4x GB200, clique 32766, health all good
UUID = "6f1d2c9e-41b7-4e0a-9c35-8b2a7d5e0c14"


def edit_gpu(xml: str, index: int, old: str, new: str) -> str:
    """The tray with one element of one GPU changed (a fault derived from the real layout)."""
    head, *gpus = xml.split("<gpu id=")
    assert old in gpus[index]
    gpus[index] = gpus[index].replace(old, new)
    return "<gpu id=".join([head, *gpus])


def grade(smi: str, profile: str = "gb200-nvl72-tray", cid: str = "nvidia-smi-q-x"):
    obs = parse_fabric({"fabricmanager-status": CommandResult(host="tray03", command_id="fabricmanager-status",
                                                              stdout=b"inactive\n", rc=3),
                        cid: CommandResult(host="tray03", command_id=cid, stdout=smi.encode())})
    return obs, evaluate_fabric(obs, EvalContext(host=Host("tray03"), profile=load_profile(profile)))


def bad(findings):
    return sorted((f.check, f.component, f.status.value, f.value) for f in findings
                  if f.status is not Status.PASS and f.check != "fabric.manager")


def test_healthy_gb200_tray_parses_identity_health_and_position():
    obs, findings = grade(TRAY)
    gpu = obs.gpus[2]
    assert (gpu.clique_id, gpu.cluster_uuid, gpu.state, gpu.status) == (32766, UUID, "Completed", "Success")
    assert gpu.health == {"summary": "Healthy", "bandwidth": "Full", "route_recovery_in_progress": "False",
                          "route_unhealthy": "False", "access_timeout_recovery": "False",
                          "incorrect_configuration": "None"}
    assert gpu.position["tray_index"] == "3" and gpu.position["slot_number"] == "7"
    assert gpu.position["chassis_serial_number"] == "1821025000117"
    assert bad(findings) == []
    checks = {f.check for f in findings}
    assert {"fabric.health.bandwidth", "fabric.cluster_uuid", "fabric.clique.consistent"} <= checks
    (manager,) = [f for f in findings if f.check == "fabric.manager"]
    assert manager.status is Status.SKIP      # NVL72 profile: the Fabric Manager runs on the switch trays


def test_degraded_bandwidth_names_the_gpu_with_remedy():
    smi = edit_gpu(TRAY, 1, "<bandwidth>Full</bandwidth>", "<bandwidth>Degraded</bandwidth>")
    smi = edit_gpu(smi, 1, "<summary>Healthy</summary>", "<summary>Limited Capacity</summary>")
    _, findings = grade(smi)
    assert bad(findings) == [("fabric.health.bandwidth", "gpu1", "FAIL", "Degraded")]
    (f,) = [f for f in findings if f.status is Status.FAIL]
    assert "NVLink switch" in f.remedy and f.expected == "== Full"


def test_route_unhealthy_is_fail_and_recovery_in_progress_is_warn():
    smi = edit_gpu(TRAY, 0, "<route_unhealthy>False</route_unhealthy>", "<route_unhealthy>True</route_unhealthy>")
    smi = edit_gpu(smi, 3, "<route_recovery_in_progress>False</route_recovery_in_progress>",
                   "<route_recovery_in_progress>True</route_recovery_in_progress>")
    _, findings = grade(smi)
    assert bad(findings) == [("fabric.health.route_recovery_in_progress", "gpu3", "WARN", "True"),
                             ("fabric.health.route_unhealthy", "gpu0", "FAIL", "True")]


def test_tray_split_across_cliques_and_gpu_outside_any_domain():
    smi = edit_gpu(TRAY, 2, "<cliqueId>32766</cliqueId>", "<cliqueId>7</cliqueId>")
    smi = edit_gpu(smi, 3, f"<clusterUuid>{UUID}</clusterUuid>",
                   "<clusterUuid>00000000-0000-0000-0000-000000000000</clusterUuid>")
    _, findings = grade(smi)
    got = bad(findings)
    assert ("fabric.cluster_uuid", "gpu3", "FAIL", "00000000-0000-0000-0000-000000000000") in got
    (split,) = [f for f in findings if f.check == "fabric.clique.consistent"]
    assert split.status is Status.FAIL and split.value is False
    assert "gpu2 in clique 7" in split.message and "gpu0,gpu1 in clique 32766" in split.message


def test_cluster_uuid_not_reported_is_not_a_pass():
    smi = edit_gpu(TRAY, 1, f"<clusterUuid>{UUID}</clusterUuid>", "<clusterUuid>N/A</clusterUuid>")
    _, findings = grade(smi)
    (f,) = [f for f in findings if f.check == "fabric.cluster_uuid" and f.status is not Status.PASS]
    assert (f.component, f.status, f.value) == ("gpu1", Status.FAIL, "N/A")
    assert "reports no NVLink domain" in f.message


def test_fault_without_expectation_is_warn_not_pass():
    """A profile without fabric.health expectations (HGX H100) still says what the GPU reports about itself."""
    smi = edit_gpu(TRAY, 0, "<bandwidth>Full</bandwidth>", "<bandwidth>Degraded</bandwidth>")
    _, findings = grade(smi, profile="h100-sxm5-8x")
    (f,) = [f for f in findings if f.check == "fabric.health.bandwidth"]
    assert (f.status, f.component, f.value) == (Status.WARN, "gpu0", "Degraded")
    assert "graded without an expectation" in f.message


def test_h200_without_multinode_fabric_has_nothing_to_grade():
    """Real H200 (driver 590): clique 0, all-zero cluster UUID, health block all N/A: not applicable."""
    text = corpus_text("nvidia-smi-q/h200-drv590-load.txt")
    obs, findings = grade(text, profile="h200-sxm-8x", cid="nvidia-smi-q")
    assert obs.gpus[0].clique_id == 0 and obs.gpus[0].cluster_uuid == "00000000-0000-0000-0000-000000000000"
    assert obs.gpus[0].health == {}
    assert not [f for f in findings if f.check.startswith(("fabric.health", "fabric.clique", "fabric.cluster"))]


def test_h200_text_on_an_nvl72_profile_is_skip_for_health_and_fail_for_the_zero_uuid():
    text = corpus_text("nvidia-smi-q/h200-drv590-load.txt")
    _, findings = grade(text, cid="nvidia-smi-q")
    (health,) = [f for f in findings if f.check == "fabric.health"]
    assert health.status is Status.SKIP and "no fabric health block" in health.message
    uuids = [f for f in findings if f.check == "fabric.cluster_uuid"]
    assert uuids and all(f.status is Status.FAIL for f in uuids)


def test_l40s_without_fabric_reports_no_identity():
    """Real L40S (driver 595): Fabric State N/A, CliqueId N/A: not a fabric GPU, nothing about identity."""
    text = corpus_text("nvidia-smi-q/l40s-drv595-load.txt")
    obs, findings = grade(text, profile="l40s-pcie-4x", cid="nvidia-smi-q")
    assert obs.gpus == () or obs.gpus[0].clique_id is None
    assert not [f for f in findings if f.check.startswith(("fabric.health", "fabric.clique", "fabric.cluster"))]


def test_nvml_health_mask_decodes_to_nvidia_smi_words():
    # NVML_GPU_FABRIC_HEALTH_MASK_*: 2 bits per condition (1 true / degraded, 2 false / full), 4 bits config
    healthy = 2 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8
    assert decode_health(healthy, 1) == {"summary": "Healthy", "bandwidth": "Full",
                                         "route_recovery_in_progress": "False", "route_unhealthy": "False",
                                         "access_timeout_recovery": "False", "incorrect_configuration": "None"}
    assert decode_health(1 | 2 << 4 | 5 << 8, 3) == {"summary": "Limited Capacity", "bandwidth": "Degraded",
                                                     "route_unhealthy": "False",
                                                     "incorrect_configuration": "Insufficient NVLinks"}
    assert uuid_text(bytes(range(16))) == "00010203-0405-0607-0809-0a0b0c0d0e0f"
    assert uuid_text(b"short") is None
