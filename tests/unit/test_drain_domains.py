"""drain --domain-policy: a tray is drained by its own findings, or (domain) with every tray of a failing domain."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from healthcheck.cli.main import main
from healthcheck.core.model import Finding, Status
from healthcheck.ops.drain import DrainPolicy, plan_drain
from healthcheck.store.results import HostResult, RunResults, write_results

TRAYS = [f"r1t{s:02d}" for s in range(1, 19)]
BAD = ["r1t02", "r1t03", "r1t08", "r1t13", "r1t17"]


def service(host: str) -> Finding:
    status = Status.FAIL if host in BAD else Status.WARN
    return Finding(host=host, check="nvl.domain.service", status=status, component="domain", value=0.278,
                   message="rack needs service: NVLink domain 6f1d2c9e: 5 bad trays")


def results(verdict: str = "FAIL") -> RunResults:
    hosts = {}
    for h in TRAYS:
        own = [Finding(host=h, check="fabric.health.bandwidth", status=Status.FAIL, component="gpu1",
                       value="Degraded", message="degraded")] if h in BAD else []
        hosts[h] = HostResult(name=h, findings=[*own, service(h)])
    hosts["hgx01"] = HostResult(name="hgx01", findings=[Finding(host="hgx01", check="gpu.count", status=Status.PASS,
                                                                message="8 GPUs")])
    domain = {"cluster_uuid": "6f1d2c9e-41b7-4e0a-9c35-8b2a7d5e0c14", "verdict": verdict, "bad_trays": BAD,
              "bad_share": 0.278, "members": [{"host": h} for h in TRAYS]}
    return RunResults(run={"id": "R1"}, hosts=hosts, extra={"domains": [domain]})


def test_tray_policy_drains_the_bad_trays_only_and_may_resume_the_healthy_ones():
    plan = plan_drain(results(), DrainPolicy(), max_fraction=0.5)
    assert sorted(d.host for d in plan.decisions) == BAD
    # a WARN never blocks a resume: under the tray policy the 13 healthy trays pass
    assert sorted(plan.passing) == sorted(["hgx01", *(h for h in TRAYS if h not in BAD)])
    assert plan.breaker.allowed


def test_domain_policy_drains_every_tray_of_a_failing_domain_with_a_domain_reason():
    plan = plan_drain(results(), DrainPolicy(domains="domain"), max_fraction=0.5)
    assert sorted(d.host for d in plan.decisions) == TRAYS
    healthy = next(d for d in plan.decisions if d.host == "r1t01")
    assert healthy.reason == ("healthcheck: FAIL nvl.domain.service domain=6f1d2c9e bad_trays=5 share=0.278 "
                              "(rack needs service) run=R1")
    assert [f.check for f in healthy.findings] == ["nvl.domain.service"]
    assert next(d for d in plan.decisions if d.host == "r1t02").reason.startswith(
        "healthcheck: FAIL fabric.health.bandwidth gpu1")
    assert plan.passing == ("hgx01",)
    # the breaker counts trays: 18 of 19 hosts is over half the fleet
    assert not plan.breaker.allowed and "18 nodes to drain exceeds the limit of 9" in plan.breaker.reasons[0]


def test_domain_policy_leaves_a_domain_within_its_threshold_alone():
    plan = plan_drain(results(verdict="WARN"), DrainPolicy(domains="domain"), max_fraction=0.5)
    assert sorted(d.host for d in plan.decisions) == BAD


def test_unknown_domain_policy_is_refused():
    with pytest.raises(ValueError, match="not one of tray, domain"):
        DrainPolicy(domains="rack")


def test_cli_dry_run_prints_every_tray_of_the_domain(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_results(run_dir, results())
    out = CliRunner().invoke(main, ["drain", str(run_dir), "--domain-policy", "domain", "--max-fraction", "1",
                                    "--controller", "localhost"])
    assert "18 node(s) to drain" in out.output, out.output
    bad = CliRunner().invoke(main, ["drain", str(run_dir), "--domain-policy", "rack"])
    assert bad.exit_code == 2
