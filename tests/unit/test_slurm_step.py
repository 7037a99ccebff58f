"""The single-step Slurm transport's pure parts: which nodes are left out (and why), and the srun argv."""

from __future__ import annotations

from pathlib import Path

import pytest

from healthcheck.core.model import Host
from healthcheck.transport.slurm_nodes import SlurmNode, parse_sinfo_state_reason
from healthcheck.transport.slurm_step import SlurmStepTransport, _unusable
from tests.conftest import fixture_text


@pytest.mark.parametrize(("state", "reason", "expected"), [
    ("idle", "", None),
    ("idle*", "", "Slurm node n1 left out of the sweep's job step: not responding (node state idle*)"),
    ("drained", "xid 79", "Slurm node n1 left out of the sweep's job step: node state drained (reason: xid 79)"),
    ("draining", "psu", "Slurm node n1 left out of the sweep's job step: node state draining (reason: psu)"),
    ("down*", "Not responding", "Slurm node n1 left out of the sweep's job step: not responding "
                                "(node state down* (reason: Not responding))"),
    ("mixed", "", "Slurm node n1 left out of the sweep's job step: running a job (node state mixed)"),
    ("allocated", "", "Slurm node n1 left out of the sweep's job step: running a job (node state allocated)"),
])
def test_node_states_left_out_with_their_reason(state: str, reason: str, expected: str | None) -> None:
    assert _unusable("n1", SlurmNode(name="n1", state=state, reason=reason)) == expected


def test_unknown_node() -> None:
    assert _unusable("gpu9", None) == "Slurm does not know node gpu9 (set the host var slurm_node?)"


def test_states_from_real_sinfo_layout() -> None:
    """Captured without slurmd: every node not responding (``*``), gpu003 drained by healthcheck."""
    text = fixture_text("slurm/sinfo-node-state-reason-22.05.txt").split("\n", 1)[1]
    states = parse_sinfo_state_reason(text).nodes
    assert _unusable("gpu003", states["gpu003"]) == (
        "Slurm node gpu003 left out of the sweep's job step: not responding (node state drained* "
        "(reason: healthcheck: gpu.ecc.dbe gpu3=2; run=20261121T031500Z))")
    assert _unusable("gpu001", states["gpu001"]) == (
        "Slurm node gpu001 left out of the sweep's job step: not responding (node state idle*)")


def test_one_srun_over_the_folded_nodeset() -> None:
    transport = SlurmStepTransport([Host(name=f"gpu{i:03d}") for i in range(1, 65)], lambda h: [], Path("/x"),
                                   srun_args=("--partition=gpu",), alloc_wait_s=10)
    argv = transport.argv([f"gpu{i:03d}" for i in range(1, 65)], deadline_s=301)
    assert argv == ["srun", "--nodelist=gpu[001-064]", "--nodes=64", "--ntasks=64", "--ntasks-per-node=1",
                    "--job-name=healthcheck", "--time=6", "--immediate=10", "--no-kill", "--kill-on-bad-exit=0",
                    "--quiet", "--partition=gpu"]
