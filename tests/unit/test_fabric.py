"""probes/fabric.py: Fabric Manager state and per-GPU fabric state."""

from __future__ import annotations

import pytest

from healthcheck.model import CommandResult, Host, Status
from healthcheck.profiles import load_profile
from healthcheck.spec import EvalContext, ParseError
from probes.fabric import evaluate_fabric, parse_fabric, parse_systemctl_is_active
from tests.conftest import corpus_text

HEALTHY = "".join(f"{i}, Completed, Success\n" for i in range(8))


def out(cid: str, text: str, rc: int = 0) -> CommandResult:
    return CommandResult(host="gpu001", command_id=cid, stdout=text.encode(), rc=rc)


def grade(manager: str, manager_rc: int, query: str, query_rc: int = 0, profile: str = "h100-sxm5-8x"):
    obs = parse_fabric({"fabricmanager-status": out("fabricmanager-status", manager, manager_rc),
                        "nvidia-smi-fabric": out("nvidia-smi-fabric", query, query_rc)})
    return evaluate_fabric(obs, EvalContext(host=Host("gpu001"), profile=load_profile(profile)))


def test_healthy_nvswitch_node():
    findings = grade("active\n", 0, HEALTHY)
    assert {f.status for f in findings} == {Status.PASS}
    assert len([f for f in findings if f.check == "fabric.state"]) == 8


def test_fabric_manager_down_and_gpu_not_in_fabric():
    query = HEALTHY.replace("3, Completed, Success", "3, In Progress, N/A")
    findings = [f for f in grade("failed\n", 3, query) if f.status is not Status.PASS]
    got = {(f.check, f.component, f.value) for f in findings}
    assert got == {("fabric.manager", "node", "failed"), ("fabric.state", "gpu3", "In Progress"),
                   ("fabric.status", "gpu3", "N/A")}
    assert all(f.status is Status.FAIL and f.remedy for f in findings)


def test_old_driver_without_fabric_fields_is_error_on_nvswitch_profile():
    msg = 'Field "fabric.state" is not a valid field to query.\n'
    findings = grade("active\n", 0, msg, query_rc=2)
    state = next(f for f in findings if f.check == "fabric.state")
    assert state.status is Status.ERROR and "not a valid field" in state.message


def test_l40s_profile_skips_everything():
    findings = grade("inactive\n", 3, "0, N/A, N/A\n", profile="l40s-pcie-4x")
    assert {f.status for f in findings} == {Status.SKIP}


def test_corpus_fabric_fields_parse():
    # corpus nvidia-smi/h100-query-gpu-allfields-csv-load: fabric.state Completed, fabric.status Success
    lines = corpus_text("nvidia-smi/h100-query-gpu-allfields-csv-load.txt").splitlines()
    header = [h.strip() for h in lines[0].split(",")]
    values = [v.strip() for v in lines[1].split(",")]
    row = f"{values[header.index('index')]}, {values[header.index('fabric.state')]}, " \
          f"{values[header.index('fabric.status')]}\n"
    obs = parse_fabric({"nvidia-smi-fabric": out("nvidia-smi-fabric", row)})
    assert [(g.index, g.state, g.status) for g in obs.gpus] == [(0, "Completed", "Success")]


def test_systemctl_without_systemd_is_error_only_where_fm_is_expected():
    no_bus = "Failed to connect to bus: No such file or directory\n"
    (fm,) = [f for f in grade(no_bus, 1, HEALTHY) if f.check == "fabric.manager"]
    assert fm.status is Status.ERROR and "Failed to connect to bus" in fm.message
    (fm,) = [f for f in grade(no_bus, 1, "0, N/A, N/A\n", profile="l40s-pcie-4x") if f.check == "fabric.manager"]
    assert fm.status is Status.SKIP


def test_garbage_is_a_parse_error():
    with pytest.raises(ParseError, match="not a unit state"):
        parse_systemctl_is_active("Failed to connect to bus: No such file or directory\n")
    with pytest.raises(ParseError, match="unexpected line"):
        parse_fabric({"nvidia-smi-fabric": out("nvidia-smi-fabric", "0, Completed\n")})
