"""Self-drain decisions against a real slurmctld (no slurmd): ownership, ERROR policy, circuit breaker."""

from __future__ import annotations

from pathlib import Path

import pytest

from healthcheck.core.model import Finding, Status
from healthcheck.ops.selfdrain import SelfDrainPolicy, self_drain, self_reason
from tests.slurmctld import SlurmCluster, missing_tools

pytestmark = [pytest.mark.slurm, pytest.mark.skipif(bool(missing_tools()),
                                                    reason=f"slurmctld needs: {missing_tools()}")]

FAIL = Finding(host="gpu001", check="gpu.row_remap.pending", component="gpu2", status=Status.FAIL,
               message="gpu2: row remap pending: Yes; 'drain' $(reboot)")
ERROR = Finding(host="gpu001", check="gpu.collect", status=Status.ERROR, message="nvidia-smi timed out")
OK = Finding(host="gpu001", check="gpu.count", status=Status.PASS, message="8 GPUs")


@pytest.fixture(scope="module")
def ctld(tmp_path_factory):
    with SlurmCluster.start(tmp_path_factory.mktemp("ctld"), nodes="gpu[001-010]") as cluster:
        yield cluster


@pytest.fixture(autouse=True)
def slurm_env(ctld: SlurmCluster, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SLURM_CONF", ctld.env["SLURM_CONF"])
    yield
    for n in range(1, 11):
        ctld.scontrol("update", f"NodeName=gpu{n:03d}", "State=RESUME", check=False)


def _reason(ctld: SlurmCluster, node: str) -> str:
    return ctld.tool("sinfo", "-h", "-N", "-n", node, "-o", "%E").stdout.strip()


def test_reason_is_cleaned_and_names_check_component_message() -> None:
    assert self_reason([FAIL, ERROR]) == ("healthcheck: gpu.row_remap.pending gpu2: gpu2: row remap pending: Yes; "
                                          "drain (reboot) (+1 more)")


def test_fail_drains_then_pass_resumes(ctld: SlurmCluster) -> None:
    out = self_drain([OK, FAIL], "gpu001", "gpu001", SelfDrainPolicy())
    assert out.action == "drain", out
    assert _reason(ctld, "gpu001") == self_reason([FAIL])
    again = self_drain([OK, FAIL], "gpu001", "gpu001", SelfDrainPolicy())
    assert (again.action, again.note) == ("none", "already drained by healthcheck (IDLE+DRAIN+NOT_RESPONDING)")
    back = self_drain([OK], "gpu001", "gpu001", SelfDrainPolicy())
    assert back.action == "resume" and _reason(ctld, "gpu001") == "none"


def test_error_of_the_check_drains_only_when_asked(ctld: SlurmCluster) -> None:
    out = self_drain([OK, ERROR], "gpu002", "gpu002", SelfDrainPolicy())
    assert out.action == "none" and "--drain-on-error" in out.note
    assert _reason(ctld, "gpu002") == "none"
    asked = self_drain([OK, ERROR], "gpu002", "gpu002", SelfDrainPolicy(drain_on_error=True))
    assert asked.action == "drain" and _reason(ctld, "gpu002") == "healthcheck: gpu.collect: nvidia-smi timed out"


def test_someone_elses_reason_is_left_alone(ctld: SlurmCluster) -> None:
    ctld.scontrol("update", "NodeName=gpu003", "State=DRAIN", "Reason=psu swap")
    out = self_drain([FAIL], "gpu003", "gpu003", SelfDrainPolicy())
    assert out.action == "left-alone" and "someone else's reason 'psu swap'" in out.note
    assert self_drain([OK], "gpu003", "gpu003", SelfDrainPolicy()).action == "left-alone"
    assert _reason(ctld, "gpu003") == "psu swap"


def test_breaker_refuses_a_new_drain_when_healthcheck_holds_too_many(ctld: SlurmCluster) -> None:
    assert self_drain([FAIL], "gpu004", "gpu004", SelfDrainPolicy(max_fraction=0.2)).action == "drain"
    assert self_drain([FAIL], "gpu005", "gpu005", SelfDrainPolicy(max_fraction=0.2)).action == "drain"
    out = self_drain([FAIL], "gpu006", "gpu006", SelfDrainPolicy(max_fraction=0.2))
    assert out.action == "refused"
    assert out.note.startswith("circuit breaker: healthcheck already drained 2 of 10 nodes (gpu004, gpu005); "
                               "draining gpu006 too would exceed 2 (20%)")
    assert _reason(ctld, "gpu006") == "none"


def test_unknown_node_and_unreadable_state_change_nothing(ctld: SlurmCluster, monkeypatch, tmp_path: Path) -> None:
    assert self_drain([FAIL], "x", "gpu999", SelfDrainPolicy()).action == "refused"
    with monkeypatch.context() as patch:
        patch.setenv("PATH", str(tmp_path))  # no scontrol at all
        out = self_drain([FAIL], "gpu007", "gpu007", SelfDrainPolicy())
    assert (out.action, out.note) == ("refused", "cannot read the node's Slurm state (scontrol show node on "
                                      "localhost: scontrol: command not found): reason ownership unchecked, "
                                      "nothing changed")
