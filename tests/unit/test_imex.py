"""probes/imex.py and probes/imex_parse.py: the IMEX service and nvidia-imex-ctl -N domain view."""

from __future__ import annotations

import pytest

from healthcheck.core.model import CommandResult, Host, Status
from healthcheck.core.profiles import load_profile
from healthcheck.core.spec import EvalContext, ParseError
from healthcheck.probes.imex import evaluate_imex, imex_summary, parse_imex
from healthcheck.probes.imex_parse import ImexLink, parse_imex_ctl_nodes, parse_nodes_config
from healthcheck.store.jsoncodec import to_jsonable
from tests.conftest import fixture_text

UP18 = fixture_text("imex/ctl-N-18-nodes-up.txt")
LOST5 = fixture_text("imex/ctl-N-18-nodes-peer5-disconnected.txt")
ONE = fixture_text("imex/ctl-N-1-node-idle.txt")
CONFIG18 = fixture_text("imex/nodes_config-18.cfg")


def out(cid: str, text: str, rc: int = 0, err: str = "") -> CommandResult:
    return CommandResult(host="tray01", command_id=cid, stdout=text.encode(), stderr=err.encode(), rc=rc)


def grade(service="active\n", config: str | None = CONFIG18, ctl: str | None = UP18, ctl_rc=0,
          profile="gb200-nvl72-tray", ctl_err=""):
    outputs = {"imex-service": out("imex-service", service, 0 if service.startswith("active") else 3)}
    outputs["imex-nodes-config"] = out("imex-nodes-config", config or "", 0 if config is not None else 1,
                                       "" if config is not None else "cat: /etc/nvidia-imex/nodes_config.cfg: "
                                                                     "No such file or directory")
    if ctl is not None:
        outputs["imex-ctl-nodes"] = out("imex-ctl-nodes", ctl, ctl_rc, ctl_err)
    obs = parse_imex(outputs)
    return obs, evaluate_imex(obs, EvalContext(host=Host("tray01"), profile=load_profile(profile)))


def test_parse_18_node_domain():
    domain = parse_imex_ctl_nodes(UP18)
    assert len(domain.nodes) == 18 and domain.state == "UP" and domain.connected == 324 and domain.broken == ()
    assert (domain.nodes[10].index, domain.nodes[10].address, domain.nodes[10].status,
            domain.nodes[10].version) == (10, "10.40.7.21", "READY", "580.95.05")


def test_parse_single_node_layout_without_version_column():
    domain = parse_imex_ctl_nodes(ONE)
    assert [(n.address, n.status, n.version) for n in domain.nodes] == [("10.40.7.11", "READY", None)]
    assert domain.connected == 1 and domain.state == "UP"


def test_parse_rejects_garbage_and_truncated_rows():
    with pytest.raises(ParseError, match="not nvidia-imex-ctl -N output"):
        parse_imex_ctl_nodes("IMEX daemon is not running\n")
    truncated = UP18.replace("       3        C   C   C   C   C   C   C   C   C   C   C   C   C   C   C   C   C   C",
                             "       3        C   C   C")
    with pytest.raises(ParseError, match="row 3 has 3 cells for 18 nodes"):
        parse_imex_ctl_nodes(truncated)
    assert parse_nodes_config("# rack 7\n10.0.0.1\n\n10.0.0.2  # tray 2\n") == ("10.0.0.1", "10.0.0.2")


def test_healthy_domain_passes_with_counts():
    _, findings = grade()
    assert {(f.check, f.status) for f in findings} == {("imex.service", Status.PASS),
                                                       ("imex.domain_state", Status.PASS),
                                                       ("imex.peer", Status.PASS)}
    (peer,) = [f for f in findings if f.check == "imex.peer"]
    assert peer.message == "all 18 IMEX nodes connected (324 links C)"


def test_disconnected_peer_is_fail_naming_only_that_peer():
    obs, findings = grade(ctl=LOST5)
    bad = [(f.check, f.component, f.status, f.value) for f in findings if f.status is not Status.PASS]
    assert bad == [("imex.domain_state", "node", Status.FAIL, "DOWN"),
                   ("imex.peer", "peer #5 10.40.7.16", Status.FAIL, "D/N")]
    (peer,) = [f for f in findings if f.check == "imex.peer"]
    assert "34 links not connected" in peer.message and "D Disconnected" in peer.message and peer.remedy
    assert ImexLink(0, 5, "D") in obs.domain.broken
    assert imex_summary(to_jsonable(obs)) == "fault"


def test_idle_node_without_config_is_skip_with_reason():
    obs, findings = grade(service="inactive\n", config=None, ctl="", ctl_rc=1)
    assert [(f.check, f.status) for f in findings] == [("imex.domain", Status.SKIP)]
    assert "not configured for multi-node IMEX" in findings[0].message and "inactive" in findings[0].message
    assert imex_summary(to_jsonable(obs)) == "idle"


def test_node_config_elsewhere_still_grades_the_domain_the_daemon_lists():
    _, findings = grade(config=None, ctl=LOST5)
    assert ("imex.peer", Status.FAIL) in {(f.check, f.status) for f in findings}


def test_single_node_domain_is_skip_even_with_service_active():
    _, findings = grade(config="10.40.7.11\n", ctl=ONE)
    assert [(f.check, f.status) for f in findings] == [("imex.domain", Status.SKIP)]
    assert "single-node IMEX domain" in findings[0].message
    # configured for 18 but the daemon lists only itself: also single-node, never PASS
    _, findings = grade(ctl=ONE)
    assert Status.PASS not in {f.status for f in findings if f.check.startswith("imex.domain")}


def test_no_systemd_is_not_a_parse_error():
    nosystemd = "System has not been booted with systemd as init system (PID 1). Can't operate.\n"
    obs, findings = grade(service=nosystemd, config=None, ctl=None)
    assert obs.service is None and "not a unit state" in obs.service_error
    assert [(f.check, f.status) for f in findings] == [("imex.domain", Status.SKIP)]
    _, findings = grade(service=nosystemd)
    (service,) = [f for f in findings if f.check == "imex.service"]
    assert service.status is Status.ERROR and "state unknown" in service.message
    assert ("imex.peer", Status.PASS) in {(f.check, f.status) for f in findings}


def test_configured_domain_with_service_down_is_fail():
    _, findings = grade(service="failed\n", ctl="", ctl_rc=1, ctl_err="Connection refused")
    got = {(f.check, f.status) for f in findings}
    assert got == {("imex.service", Status.FAIL), ("imex.domain", Status.SKIP)}


def test_unknown_or_empty_domain_is_never_pass():
    _, findings = grade(ctl="Nodes:\nDomain State: UP\n")
    assert [(f.check, f.status) for f in findings if f.check != "imex.service"] == [("imex.domain", Status.ERROR)]
    _, findings = grade(ctl="garbage\n")
    (domain,) = [f for f in findings if f.check == "imex.domain"]
    assert domain.status is Status.ERROR and "unreadable" in domain.message
    _, findings = grade(ctl=None)
    (domain,) = [f for f in findings if f.check == "imex.domain"]
    assert domain.status is Status.ERROR and "not collected" in domain.message


def test_fault_without_imex_expectations_is_warn():
    _, findings = grade(ctl=LOST5, profile="h100-sxm5-8x")
    (peer,) = [f for f in findings if f.check == "imex.peer"]
    assert peer.status is Status.WARN
