"""SlurmTransport without Slurm: the srun argv, the failure messages, srun missing on the orchestrator."""

from __future__ import annotations

from healthcheck.core.model import Host
from healthcheck.transport import TransportSettings, open_transport
from healthcheck.transport.script import Command
from healthcheck.transport.slurm import SlurmTransport, describe_srun_failure, slurm_node


def test_argv_is_a_list_with_the_script_as_one_element() -> None:
    transport = open_transport("slurm-per-host", TransportSettings(connect_timeout_s=7.5,
                                                                 srun_args=("--partition=gpu", "--account=ops")))
    assert isinstance(transport, SlurmTransport)
    host = Host("gpu001.example", vars={"slurm_node": "gpu001"})
    assert transport.argv(host, "echo 'a b'; hostname", deadline_s=130) == [
        "srun", "--nodelist=gpu001", "--nodes=1", "--ntasks=1", "--job-name=healthcheck", "--time=3",
        "--immediate=8", "--quiet", "--partition=gpu", "--account=ops", "sh", "-c", "echo 'a b'; hostname"]
    assert slurm_node(Host("gpu002")) == "gpu002"


def test_failure_messages_name_the_node_state_and_what_srun_said() -> None:
    busy = "srun: error: Unable to allocate resources: Requested nodes are busy\n"
    assert describe_srun_failure(busy, 1, "gpu007", "drained (reason: xid 79)") == (
        "Slurm refused an allocation on gpu007: node state drained (reason: xid 79); "
        "srun: Unable to allocate resources: Requested nodes are busy")
    unknown = "srun: error: Unable to allocate resources: Invalid node name specified\n"
    assert describe_srun_failure(unknown, 1, "gpu9", None) == (
        "Slurm does not know node gpu9 (set the host var slurm_node?); "
        "srun: Unable to allocate resources: Invalid node name specified")
    assert describe_srun_failure("slurmstepd: something odd\n", 137, "gpu1", "down*") == (
        "srun on gpu1 failed (rc 137): node state down*; srun: slurmstepd: something odd")


def test_srun_missing_is_a_transport_error_for_every_command() -> None:
    transport = SlurmTransport(srun="srun-not-installed-here")
    collection = transport.collect(Host("gpu001"), [Command("a", "true", 5), Command("b", "true", 5)], 30)
    assert collection.transport_error == ("srun (srun-not-installed-here) not found on the orchestrator's PATH; "
                                          "install the Slurm client or use another transport")
    assert {r.transport_error for r in collection.results.values()} == {collection.transport_error}
