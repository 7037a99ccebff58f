"""probes/fabric.py: Fabric Manager state and per-GPU fabric state (from the gpu probe's report)."""

from __future__ import annotations

import pytest

from healthcheck.core.model import CommandResult, Host, Status
from healthcheck.core.profiles import EMPTY_PROFILE, load_profile
from healthcheck.core.spec import EvalContext, ParseError
from healthcheck.probes.fabric import evaluate_fabric, parse_fabric, parse_systemctl_is_active
from healthcheck.probes.gpu import parse_gpu
from healthcheck.probes.gpu_eval import evaluate_gpu
from tests.conftest import corpus_text, fixture_text

HEALTHY = fixture_text("nvidia-smi-xml/h100-8x-healthy.xml")   # 8x H100, every GPU Completed/Success


def out(cid: str, text: str, rc: int = 0) -> CommandResult:
    return CommandResult(host="gpu001", command_id=cid, stdout=text.encode(), rc=rc)


def with_gpu_fabric(xml: str, index: int, state: str, status: str) -> str:
    head, *gpus = xml.split("<gpu id=")
    gpus[index] = gpus[index].replace("<state>Completed</state>", f"<state>{state}</state>") \
                             .replace("<status>Success</status>", f"<status>{status}</status>")
    return "<gpu id=".join([head, *gpus])


def ctx(profile: str = "h100-sxm5-8x") -> EvalContext:
    return EvalContext(host=Host("gpu001"), profile=load_profile(profile))


def grade(manager: str, manager_rc: int, smi: str, smi_rc: int = 0, profile: str = "h100-sxm5-8x",
          smi_id: str = "nvidia-smi-q-x"):
    obs = parse_fabric({"fabricmanager-status": out("fabricmanager-status", manager, manager_rc),
                        smi_id: out(smi_id, smi, smi_rc)})
    return evaluate_fabric(obs, ctx(profile))


def test_healthy_nvswitch_node():
    findings = grade("active\n", 0, HEALTHY)
    assert {f.status for f in findings} == {Status.PASS}
    [state] = [f for f in findings if f.check == "fabric.state"]  # the 8 GPUs that pass: one finding
    assert (state.component, state.value) == ("node", "Completed")
    assert state.message == "all 8 GPUs: fabric state Completed, within == Completed"
    assert {f.source for f in findings if f.check != "fabric.manager"} == {"nvidia-smi-q-x"}


def test_fabric_manager_down_and_gpu_not_in_fabric():
    smi = with_gpu_fabric(HEALTHY, 3, "In Progress", "N/A")
    findings = [f for f in grade("failed\n", 3, smi) if f.status is not Status.PASS]
    got = {(f.check, f.component, f.value) for f in findings}
    assert got == {("fabric.manager", "node", "failed"), ("fabric.state", "gpu3", "In Progress"),
                   ("fabric.status", "gpu3", "N/A")}
    assert all(f.status is Status.FAIL and f.remedy for f in findings)
    passed = {f.check: f.message for f in grade("failed\n", 3, smi) if f.status is Status.PASS and f.check in (
        "fabric.state", "fabric.status")}  # the seven other GPUs: one PASS a check, naming them
    assert passed == {
        "fabric.state": "gpu0,gpu1,gpu2,gpu4,gpu5,gpu6,gpu7: fabric state Completed, within == Completed",
        "fabric.status": "gpu0,gpu1,gpu2,gpu4,gpu5,gpu6,gpu7: fabric status Success, within == Success"}


def test_fabric_is_graded_here_only_not_again_by_the_gpu_probe():
    """One source, one finding: the gpu probe reads the same field but leaves it to this probe."""
    smi = with_gpu_fabric(HEALTHY, 5, "Not Started", "N/A")
    fabric = [f for f in grade("active\n", 0, smi) if f.status is not Status.PASS]
    assert {(f.check, f.component) for f in fabric} == {("fabric.state", "gpu5"), ("fabric.status", "gpu5")}
    gpu = evaluate_gpu(parse_gpu({"nvidia-smi-q-x": out("nvidia-smi-q-x", smi)}), ctx())
    assert not [f for f in gpu if "fabric" in f.check]


def test_driver_without_fabric_state_is_error_on_nvswitch_profile():
    # corpus a100-sxm4-80gb (driver 535): <fabric><state>N/A</state>: no GPU reports a state
    smi = corpus_text("nvidia-smi-xml/a100-sxm4-80gb-mig-enabled-drv535-v12dtd.txt")
    (state,) = [f for f in grade("active\n", 0, smi) if f.check.startswith("fabric.s")]
    assert (state.check, state.status) == ("fabric.state", Status.ERROR)
    assert "no GPU reports a fabric state" in state.message
    (state,) = [f for f in grade("active\n", 0, smi, profile="a100-sxm4-80gb-8x") if f.check.startswith("fabric.s")]
    assert state.status is Status.SKIP


def test_nvidia_smi_failure_or_garbage_is_error_naming_why():
    mismatch = fixture_text("nvidia-smi-errors/driver-library-mismatch.txt")
    (state,) = [f for f in grade("active\n", 0, mismatch, smi_rc=18) if f.check == "fabric.state"]
    assert state.status is Status.ERROR and "Driver/library version mismatch" in state.message
    garbage = fixture_text("nvidia-smi-xml/bad/truncated-mid-gpu.xml")
    (state,) = [f for f in grade("active\n", 0, garbage) if f.check == "fabric.state"]
    assert state.status is Status.ERROR and "unreadable" in state.message and "truncated" in state.message


def test_l40s_profile_skips_everything():
    smi = corpus_text("nvidia-smi-xml/rtx4000-sff-ada-drv595-v13dtd-tabs.txt")  # fabric N/A, no NVSwitch
    findings = grade("inactive\n", 3, smi, profile="l40s-pcie-4x")
    assert {f.status for f in findings} == {Status.SKIP}


def test_corpus_text_report_from_a_bundle():
    # corpus nvidia-smi-q/h100-8gpu-drv535.161-gpud: 8x H100, Fabric State Completed / Status Success
    obs = parse_fabric({"nvidia-smi-q": out("nvidia-smi-q", corpus_text("nvidia-smi-q/h100-8gpu-drv535.161-gpud.txt"))})
    assert [(g.index, g.state, g.status) for g in obs.gpus] == [(i, "Completed", "Success") for i in range(8)]
    assert obs.manager is None and obs.state_error is None


def test_systemctl_without_systemd_is_error_only_where_fm_is_expected():
    no_bus = "Failed to connect to bus: No such file or directory\n"
    (fm,) = [f for f in grade(no_bus, 1, HEALTHY) if f.check == "fabric.manager"]
    assert fm.status is Status.ERROR and "Failed to connect to bus" in fm.message
    (fm,) = [f for f in grade(no_bus, 1, HEALTHY, profile="l40s-pcie-4x") if f.check == "fabric.manager"]
    assert fm.status is Status.SKIP


def test_garbage_is_a_parse_error():
    with pytest.raises(ParseError, match="not a unit state"):
        parse_systemctl_is_active("Failed to connect to bus: No such file or directory\n")


def _text_with_fabric(state: str, status: str) -> str:
    """Real 8x H100 ``nvidia-smi -q`` (corpus, driver 535.161.08, every GPU Completed/Success) with GPU 0's
    Fabric block set to what the driver prints while a GPU registers or after it failed (same layout)."""
    text = corpus_text("nvidia-smi-q/h100-8gpu-drv535.161-gpud.txt")
    block = "    Fabric\n        State                             : Completed\n" \
            "        Status                            : Success\n"
    assert block in text
    return text.replace(block, block.replace("Completed", state).replace("Success", status), 1)


@pytest.mark.parametrize(("state", "status", "says"), [
    ("In Progress", "N/A", "reports fabric state 'In Progress': it has not finished joining the NVLink fabric"),
    ("Not Started", "N/A", "reports fabric state 'Not Started': it has not started joining"),
    ("Completed", "Insufficient Resources",  # an NVML error string, as nvidia-smi prints a failed status
     "finished fabric registration with status 'Insufficient Resources': it failed to join"),
])
def test_gpu_not_in_the_fabric_is_warn_without_any_profile(state: str, status: str, says: str):
    """No fabric expectation (no profile, or one without fabric.*): the GPU's own report still counts."""
    obs = parse_fabric({"nvidia-smi-q": out("nvidia-smi-q", _text_with_fabric(state, status))})
    for profile in ("l40s-pcie-4x", None):
        context = ctx(profile) if profile else EvalContext(host=Host("gpu001"), profile=EMPTY_PROFILE)
        findings = evaluate_fabric(obs, context)
        [gpu0] = [f for f in findings if f.component == "gpu0" and f.status is not Status.SKIP]
        assert (gpu0.check, gpu0.status, gpu0.value) == ("fabric.state", Status.WARN, state)
        assert says in gpu0.message and gpu0.remedy
        others = {f.status for f in findings if f.component != "gpu0" and f.check == "fabric.state"}
        assert others == {Status.SKIP}  # Completed/Success and no expectation: nothing to grade
    # with the NVSwitch profile it is graded as before: FAIL (a state that passes folds with the other GPUs')
    graded = {(f.check, f.component): f.status for f in evaluate_fabric(obs, ctx()) if f.status is not Status.PASS}
    assert graded.get(("fabric.state", "gpu0")) is (None if state == "Completed" else Status.FAIL)
    assert graded[("fabric.status", "gpu0")] is Status.FAIL  # Insufficient Resources, or N/A: not Success
