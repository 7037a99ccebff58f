"""drain.py (decisions, reasons, circuit breaker) and the Slurm/Kubernetes command builders and parsers."""

from __future__ import annotations

import json
import shlex

import pytest

from healthcheck.core.model import Finding, Status
from healthcheck.core.spec import ParseError
from healthcheck.ops.drain import DrainPolicy, build_reason, drain_limit, plan_drain, triggers
from healthcheck.ops.schedulers import NodeRef, get_scheduler
from healthcheck.ops.schedulers.controller import Controller, read_states
from healthcheck.ops.schedulers.kubernetes import KUBERNETES, parse_kubectl_nodes_json
from healthcheck.ops.schedulers.slurm import SLURM
from healthcheck.store.results import HostResult, RunResults
from healthcheck.transport.slurm_nodes import (
    REASON_PREFIX,
    parse_scontrol_show_node,
    parse_sinfo_fleet,
    parse_sinfo_state_reason,
)
from tests.conftest import fixture_text


def ok(host: str, check: str = "gpu.count") -> Finding:
    return Finding(host=host, check=check, status=Status.PASS, message="ok", value=8, unit="GPUs")


def bad(host: str, check: str, status: Status = Status.FAIL, component: str = "node", value=None,
        unit: str | None = None, remedy: str | None = None) -> Finding:
    return Finding(host=host, check=check, status=status, component=component, value=value, unit=unit,
                   message=f"{check} bad", remedy=remedy)


def run(hosts: dict[str, list[Finding]], run_id: str = "20261122T031500Z") -> RunResults:
    return RunResults(run={"id": run_id}, hosts={h: HostResult(name=h, findings=f) for h, f in hosts.items()})


def fleet(n: int, failing: dict[str, list[Finding]] | None = None) -> RunResults:
    hosts = {f"gpu{i:03d}": [ok(f"gpu{i:03d}")] for i in range(1, n + 1)}
    hosts.update(failing or {})
    return run(hosts)


def strip_header(text: str) -> str:
    return text.split("\n", 1)[1]


# --- decisions ------------------------------------------------------------------------------
def test_plan_drains_failing_host_with_reason_from_worst_findings():
    results = fleet(20, {"gpu003": [ok("gpu003"),
                                    bad("gpu003", "nvlink.link.active", Status.WARN, "gpu1 link 2"),
                                    bad("gpu003", "gpu.ecc.dbe", component="gpu3", value=2),
                                    bad("gpu003", "xid.79", component="gpu3")]})
    plan = plan_drain(results, node_names={"gpu003": "node-a-003"})
    assert [d.host for d in plan.decisions] == ["gpu003"]
    d = plan.decisions[0]
    assert d.node == "node-a-003"
    # FAIL findings only (WARN without a drain remedy does not trigger), sorted by check
    assert d.reason == "healthcheck: FAIL gpu.ecc.dbe gpu3=2; FAIL xid.79 gpu3 run=20261122T031500Z"
    assert d.categories == ("gpu", "xid")
    assert "gpu003" not in plan.passing and "gpu001" in plan.passing
    assert plan.breaker.allowed


def test_warn_never_drains_whatever_its_remedy_says_and_ignored_checks_do_not():
    """Issue 29.4: a 1 s HW-slowdown flag (WARN, docs/verdicts.md) whose remedy says "drain the node if it
    repeats" was planned for DRAIN. Data decides (status, check id, observe-only), never remedy words."""
    policy = DrainPolicy(ignore=("xid.13",))
    slowdown = bad("h", "dcgm_fields.clock_event.hw_slowdown", Status.WARN, "gpu6", value=1, unit="s",
                   remedy="HW slowdown for one sample: drain the node if it repeats")
    assert not triggers(slowdown, policy)
    assert plan_drain(fleet(20, {"gpu004": [ok("gpu004"), slowdown]})).decisions == ()
    assert not triggers(bad("h", "gpu.reset", Status.WARN, remedy="Drain the node and reset the GPU"), policy)
    assert not triggers(bad("h", "gpu.temp", Status.ERROR, remedy="Drain the node"), policy)  # ERROR: not asked
    assert not triggers(bad("h", "xid.13"), policy)
    assert triggers(bad("h", "xid.79"), policy)
    only_gpu = DrainPolicy(checks=("gpu.*",), statuses=frozenset({Status.FAIL, Status.ERROR}))
    assert triggers(bad("h", "gpu.count", Status.ERROR), only_gpu)
    assert not triggers(bad("h", "ib.port.state"), only_gpu)
    for never in (Status.WARN, Status.PASS, Status.SKIP):
        with pytest.raises(ValueError, match=f"{never.value} never drains a node"):
            DrainPolicy(statuses=frozenset({Status.FAIL, never}))


def test_observe_only_and_advisory_findings_never_drain():
    observed = Finding(host="h", check="ib.counter.symbol_error", status=Status.FAIL, message="x", observe=True)
    assert not triggers(observed, DrainPolicy(statuses=frozenset({Status.FAIL, Status.ERROR})))
    for check in ("fleet.version.driver", "history.regression.baseline", "offender.repeat", "merge.identity",
                  "replay.bundle"):
        assert not triggers(bad("h", check), DrainPolicy()), check


def test_hosts_the_fleet_does_not_know_are_never_counted_or_drained():
    """Issue 29.2: 100 invented hosts with forged FAILs beside 10 real failures in a fleet of 40: the limit
    is 10% of 40 (4), not of the run's 140 hosts, and no invented host is decided on."""
    real = {f"gpu{i:03d}": [bad(f"gpu{i:03d}", "gpu.count")] for i in range(1, 11)}
    fake = {f"fake{i:03d}": [bad(f"fake{i:03d}", "gpu.count")] for i in range(100)}
    results = fleet(40, {**real, **fake})
    known = [f"gpu{i:03d}" for i in range(1, 41)]
    plan = plan_drain(results, known_hosts=known, fleet_size=40, max_fraction=0.10)
    assert [d.host for d in plan.decisions] == sorted(real)
    assert plan.unknown == tuple(sorted(fake))
    assert (plan.breaker.allowed, plan.breaker.limit, plan.breaker.fleet_size) == (False, 4, 40)
    assert plan.breaker.reasons[0].startswith("10 nodes to drain exceeds the limit of 4 (10% of a fleet of 40)")


def test_fleet_mismatch_and_benchmark_warn_do_not_drain_unless_configured():
    mismatch = bad("h", "fleet.version.driver", value="550.54.15", remedy="Align the versions")
    suspect = bad("h", "nccl.all_reduce.pairs.node", Status.WARN,
                  remedy="This node fails with several partners: drain it and check its NICs")
    results = fleet(20, {"gpu002": [ok("gpu002"), mismatch], "gpu005": [ok("gpu005"), suspect]})
    assert plan_drain(results).decisions == ()
    default = DrainPolicy()
    assert not triggers(mismatch, default) and not triggers(suspect, default)
    # configured: fleet checks named in --checks, or --advisory ''; a benchmark WARN never
    assert triggers(mismatch, DrainPolicy(checks=("fleet.version.*",)))
    assert triggers(mismatch, DrainPolicy(advisory=()))
    assert not triggers(suspect, DrainPolicy(checks=("nccl.*",)))
    # a benchmark FAIL (data corruption, a node blamed by attribution) still drains
    assert triggers(bad("h", "nccl.all_reduce.data"), default)
    assert [d.host for d in plan_drain(fleet(20, {"gpu007": [bad("gpu007", "hpl.residual")]})).decisions] == \
        ["gpu007"]
    # what would not drain a node does not keep it drained: gpu002 may be resumed, gpu005 (WARN) too
    assert {"gpu002", "gpu005"} <= set(plan_drain(results).passing)
    assert "gpu002" not in plan_drain(results, DrainPolicy(advisory=())).passing


def test_error_host_is_neither_drained_nor_resumable_by_default():
    results = fleet(20, {"gpu002": [bad("gpu002", "host.reachable", Status.ERROR)]})
    plan = plan_drain(results)
    assert plan.decisions == ()
    assert "gpu002" not in plan.passing


def test_reason_is_bounded_counts_the_rest_and_is_shell_safe():
    findings = [bad("h", f"gpu.check{i:02d}", component=f"gpu{i}", value=i) for i in range(30)]
    findings.append(bad("h", "gpu.aaa", component='gpu"; rm -rf / $(x)`', value="a\nb"))
    reason = build_reason(findings, "RUN1", max_chars=120)
    assert reason.startswith(REASON_PREFIX + " FAIL gpu.aaa gpu ; rm -rf / (x) =a b; FAIL gpu.check00")
    assert len(reason) <= 120
    assert reason.endswith(" more) run=RUN1")
    assert not any(c in reason for c in "\"'`$\\\n")


# --- circuit breaker ------------------------------------------------------------------------
def test_breaker_refuses_more_than_the_fraction_and_says_why():
    failing = {f"gpu{i:03d}": [bad(f"gpu{i:03d}", "gpu.count")] for i in (1, 2, 3)}
    plan = plan_drain(fleet(20, failing), max_fraction=0.10)
    assert len(plan.decisions) == 3
    assert not plan.breaker.allowed and plan.breaker.limit == 2
    assert "3 nodes to drain exceeds the limit of 2 (10% of a fleet of 20)" in plan.breaker.reasons[0]
    assert plan_drain(fleet(20, failing), max_fraction=0.15).breaker.allowed


def test_breaker_uses_inventory_size_when_given():
    failing = {"gpu001": [bad("gpu001", "gpu.count")], "gpu002": [bad("gpu002", "gpu.count")]}
    assert not plan_drain(fleet(4, failing)).breaker.allowed   # 2 of 4, limit 1
    assert plan_drain(fleet(4, failing), fleet_size=40).breaker.allowed  # 2 of 40, limit 4


def test_breaker_refuses_a_broken_run():
    hosts = {f"gpu{i:03d}": [bad(f"gpu{i:03d}", "host.reachable", Status.ERROR)] for i in range(1, 7)}
    hosts.update({"gpu007": [bad("gpu007", "gpu.count")], "gpu008": [ok("gpu008")],
                  "gpu009": [ok("gpu009")], "gpu010": [ok("gpu010")]})
    verdict = plan_drain(run(hosts)).breaker
    assert not verdict.allowed
    assert verdict.reasons == ("the run looks broken: 6 of 10 hosts are ERROR (>= 50%; a bad SSH key, an "
                               "unreachable network or a bad profile?); fix the run, not the nodes",)
    assert not plan_drain(run({})).breaker.allowed


@pytest.mark.parametrize(("fleet_size", "fraction", "limit"), [(10, 0.1, 1), (5, 0.1, 1), (100, 0.1, 10),
                                                                (1000, 0.05, 50), (30, 0.1, 3)])
def test_drain_limit(fleet_size, fraction, limit):
    assert drain_limit(fleet_size, fraction) == limit


# --- Slurm parsing (fixtures captured from a real slurmctld 22.05) -----------------------------
def test_parse_scontrol_show_node_states_and_reasons():
    states = parse_scontrol_show_node(strip_header(fixture_text("slurm/scontrol-show-node-22.05.txt")))
    assert sorted(states.nodes) == ["gpu001", "gpu003", "gpu005", "gpu007"]
    n1, n3, n5, n7 = (states.nodes[n] for n in ("gpu001", "gpu003", "gpu005", "gpu007"))
    assert (n1.state, n1.reason, n1.drained) == ("IDLE+NOT_RESPONDING", "", False)
    assert n3.state == "IDLE+DRAIN+NOT_RESPONDING" and n3.drained and n3.ours
    assert n3.reason == "healthcheck: gpu.ecc.dbe gpu3=2; run=20261121T031500Z"
    assert (n5.reason, n5.reason_user, n5.ours) == ("maintenance by alice: PSU swap", "root", False)
    assert n5.reason_time == "2026-11-22T03:07:02"
    assert n7.state == "DOWN+NOT_RESPONDING" and n7.drained and n7.reason == "Not responding"


def test_parse_scontrol_show_node_missing_node():
    text = strip_header(fixture_text("slurm/scontrol-show-node-missing-22.05.txt"))
    states = parse_scontrol_show_node(text)
    assert list(states.nodes) == ["gpu001"] and states.missing == {"nosuch"}


@pytest.mark.parametrize("name", ["scontrol-show-node-garbage.txt", "scontrol-show-node-truncated.txt"])
def test_parse_scontrol_show_node_bad_input(name):
    with pytest.raises(ParseError):
        parse_scontrol_show_node(strip_header(fixture_text(f"slurm/bad/{name}")))


def test_parse_sinfo_state_reason():
    states = parse_sinfo_state_reason(strip_header(fixture_text("slurm/sinfo-node-state-reason-22.05.txt")))
    assert states.nodes["gpu001"].reason == "" and not states.nodes["gpu001"].drained
    assert states.nodes["gpu005"].state == "drained*" and states.nodes["gpu005"].drained
    assert states.nodes["gpu003"].ours
    with pytest.raises(ParseError):
        parse_sinfo_state_reason("gpu001 idle\n")


# --- Slurm actions --------------------------------------------------------------------------
def slurm_states():
    return parse_scontrol_show_node(strip_header(fixture_text("slurm/scontrol-show-node-22.05.txt")))


def test_slurm_drain_respects_reason_ownership():
    results = fleet(40, {h: [bad(h, "gpu.count", value=7, unit="GPUs")]
                         for h in ("gpu001", "gpu003", "gpu005", "gpu007", "gpu099")})
    plan = plan_drain(results)
    by_node = {a.node: a for a in SLURM.drain_actions(plan.decisions, slurm_states())}
    assert by_node["gpu001"].argvs == (("scontrol", "update", "NodeName=gpu001", "State=DRAIN",
                                        "Reason=healthcheck: FAIL gpu.count=7GPUs run=20261122T031500Z"),)
    assert by_node["gpu001"].commands == [
        "scontrol update NodeName=gpu001 State=DRAIN 'Reason=healthcheck: FAIL gpu.count=7GPUs "
        "run=20261122T031500Z'"]
    assert by_node["gpu003"].argvs and "reason refreshed" in by_node["gpu003"].note   # ours
    assert by_node["gpu005"].skipped and by_node["gpu005"].argvs == ()                 # alice's
    assert "maintenance by alice: PSU swap" in by_node["gpu005"].note
    assert by_node["gpu007"].skipped                                                   # Slurm's own
    assert by_node["gpu099"].skipped and "not a Slurm node" in by_node["gpu099"].note
    unchecked = SLURM.drain_actions(plan.decisions, None)
    assert all(a.unchecked and a.argvs for a in unchecked)


def test_slurm_resume_only_our_reason():
    refs = [NodeRef(n, n) for n in ("gpu001", "gpu003", "gpu005", "gpu007")]
    actions = SLURM.resume_actions(refs, slurm_states())
    by_node = {a.node: a for a in actions}
    assert set(by_node) == {"gpu003", "gpu005", "gpu007"}    # gpu001 is not drained: nothing to say
    assert by_node["gpu003"].argvs == (("scontrol", "update", "NodeName=gpu003", "State=RESUME"),)
    assert by_node["gpu005"].skipped and by_node["gpu007"].skipped


def test_slurm_query_argv():
    assert SLURM.query_argv(["gpu003", "gpu001", "gpu003"]) == ["scontrol", "show", "node", "gpu001,gpu003"]
    assert get_scheduler("slurm") is SLURM
    with pytest.raises(ValueError, match="unknown scheduler"):
        get_scheduler("pbs")


# --- Kubernetes -----------------------------------------------------------------------------
def kube_states():
    return parse_kubectl_nodes_json(strip_header(fixture_text("kubernetes/get-nodes-list.json")))


def test_parse_kubectl_nodes_json():
    states = kube_states()
    assert sorted(states.nodes) == ["gpu001", "gpu002", "gpu003"]
    assert states.nodes["gpu002"].unschedulable and not states.nodes["gpu002"].ours
    assert states.nodes["gpu003"].our_taints == (("healthcheck/gpu", "failed", "NoSchedule"),)
    single = json.dumps({"kind": "Node", "metadata": {"name": "n1"}, "spec": {}})
    assert list(parse_kubectl_nodes_json(single).nodes) == ["n1"]
    for garbage in ("", "not json", json.dumps({"kind": "Pod"}), json.dumps([1, 2])):
        with pytest.raises(ParseError):
            parse_kubectl_nodes_json(garbage)


def test_kubernetes_drain_argv():
    results = fleet(40, {"gpu001": [bad("gpu001", "gpu.ecc.dbe", component="gpu3", value=2),
                                    bad("gpu001", "nvlink.link.active", component="gpu3 link 5")],
                         "gpu002": [bad("gpu002", "ib.port.state", component="mlx5_0/1")]})
    plan = plan_drain(results, max_fraction=0.1)
    by_node = {a.node: a for a in KUBERNETES.drain_actions(plan.decisions, kube_states())}
    assert by_node["gpu001"].commands == [
        "kubectl cordon gpu001",
        "kubectl taint nodes gpu001 healthcheck/gpu=failed:NoSchedule healthcheck/nvlink=failed:NoSchedule "
        "--overwrite",
        "kubectl label nodes gpu001 --overwrite healthcheck/verdict=fail healthcheck/run=20261122T031500Z "
        "healthcheck/cordoned=true",
        "kubectl annotate nodes gpu001 --overwrite 'healthcheck/reason=healthcheck: FAIL gpu.ecc.dbe gpu3=2; "
        "FAIL nvlink.link.active gpu3 link 5 run=20261122T031500Z'"]
    # gpu002 was cordoned by someone else: no cordon of ours, no cordoned label, but our taint
    cmds2 = by_node["gpu002"].commands
    assert not any(c.startswith("kubectl cordon") for c in cmds2)
    assert "healthcheck/ib=failed:NoSchedule" in cmds2[0] and "cordoned" not in cmds2[1]
    assert "someone else" in by_node["gpu002"].note


def test_kubernetes_resume_removes_only_our_taints():
    refs = [NodeRef(n, n) for n in ("gpu001", "gpu002", "gpu003")]
    by_node = {a.node: a for a in KUBERNETES.resume_actions(refs, kube_states())}
    assert by_node["gpu003"].commands == [
        "kubectl taint nodes gpu003 healthcheck/gpu:NoSchedule-",
        "kubectl uncordon gpu003",
        "kubectl label nodes gpu003 healthcheck/cordoned- healthcheck/run- healthcheck/verdict-",
        "kubectl annotate nodes gpu003 healthcheck/reason-"]
    assert "dedicated" not in " ".join(by_node["gpu003"].commands)
    assert by_node["gpu002"].skipped and "gpu001" not in by_node
    assert KUBERNETES.resume_actions(refs, None)[0].skipped


def test_kubernetes_dry_run_without_api_server_marks_actions_unchecked(tmp_path, monkeypatch):
    # A kubectl stand-in that fails like kubectl does with no API server (connection refused).
    fake = tmp_path / "kubectl"
    fake.write_text("#!/bin/sh\necho 'The connection to the server localhost:8080 was refused' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    states, error = read_states(KUBERNETES, Controller(), ["gpu001"])
    assert states is None
    assert "kubectl get nodes on localhost" in error and "refused" in error
    plan = plan_drain(fleet(20, {"gpu001": [bad("gpu001", "gpu.count")]}))
    actions = KUBERNETES.drain_actions(plan.decisions, states)
    assert actions[0].unchecked and actions[0].commands[0] == "kubectl cordon gpu001"


def test_controller_reports_missing_tool_as_transport_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    result = Controller().run(["scontrol", "show", "node", "x"])
    assert result.transport_error == "scontrol: command not found" and result.rc is None
    states, error = read_states(SLURM, Controller(), ["gpu001"])
    assert states is None and "command not found" in error


def test_commands_quote_like_a_shell_would_split_them():
    plan = plan_drain(fleet(20, {"gpu001": [bad("gpu001", "gpu.count", component="gpu 1; reboot")]}))
    action = SLURM.drain_actions(plan.decisions, None)[0]
    assert tuple(shlex.split(action.commands[0])) == action.argvs[0]


def test_parse_sinfo_fleet_keeps_the_reason_time_and_a_bar_in_the_reason():
    states = parse_sinfo_fleet(strip_header(fixture_text("slurm/sinfo-node-state-time-reason-22.05.txt")))
    assert len(states.nodes) == 8
    gpu005 = states.nodes["gpu005"]
    assert (gpu005.reason, gpu005.reason_time) == ("maintenance by alice: PSU swap | ticket 4711",
                                                   "2026-11-28T14:58:18")
    assert states.nodes["gpu007"].ours and states.nodes["gpu007"].reason_time == "2026-11-28T14:58:19"
    assert (states.nodes["gpu001"].reason, states.nodes["gpu001"].reason_time) == ("", "")
    with pytest.raises(ParseError):
        parse_sinfo_fleet("gpu001|idle*|none\n")
