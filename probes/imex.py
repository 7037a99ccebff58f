"""IMEX: the nvidia-imex service and its own view of the NVLink domain (GB200/GB300 NVL72 compute trays).

    imex-service       systemctl is-active nvidia-imex            -> active (rc 0; inactive: rc 3)
    imex-nodes-config  cat /etc/nvidia-imex/nodes_config.cfg      -> one peer IP per line (absent: rc 1)
    imex-ctl-nodes     nvidia-imex-ctl -N                         -> nodes, connection matrix, Domain State

Graded so that nothing idle is a fault and nothing unknown passes: a node with no (or an empty) node
config is not configured for multi-node use, and a node config with one entry is a single-node domain:
both SKIP saying why (the daemon may be idle between jobs, or run per job in a DRA ComputeDomain pod).
With two or more configured nodes the service must be active (``imex.service``), the domain state UP
(``imex.domain_state``), every node READY (``imex.node``) and every link Connected (``imex.peer``, one
FAIL per peer the daemon cannot reach, naming it). An empty or unreadable ``-N`` output is ERROR.
The config path is the IMEX guide's default (docs.nvidia.com/multi-node-nvlink-systems/imex-guide/config.html); a
daemon whose -N view lists two or more nodes is graded wherever its config lives.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from healthcheck.core.grading import expected_text, finding_from_expectation
from healthcheck.core.model import CommandResult, Finding, Status
from healthcheck.core.profiles import Profile
from healthcheck.core.spec import EvalContext, ParseError, ProbeSpec
from healthcheck.probes import register
from healthcheck.probes.fabric import parse_systemctl_is_active
from healthcheck.probes.imex_parse import LETTERS, ImexDomain, ImexLink, parse_imex_ctl_nodes, parse_nodes_config

SERVICE_ID, CONFIG_ID, CTL_ID = "imex-service", "imex-nodes-config", "imex-ctl-nodes"
CONFIG_PATH = "/etc/nvidia-imex/nodes_config.cfg"
REMEDY_SERVICE = ("Start IMEX (systemctl enable --now nvidia-imex) and read `journalctl -u nvidia-imex`; its "
                  "version must match the driver's")
REMEDY_PEER = ("The IMEX daemon cannot reach this peer: check the peer tray is up and its nvidia-imex service "
               "active, the IMEX port (default 50000) open between the trays, and that every tray has the same "
               "nodes_config.cfg; then restart nvidia-imex on both")


@dataclass(frozen=True)
class ImexObservation:
    service: str | None = None                # systemctl is-active word; None: not collected or unreadable
    service_error: str | None = None           # why systemctl printed no unit state
    configured: tuple[str, ...] | None = None  # nodes_config.cfg entries; None: file absent or unreadable
    domain: ImexDomain | None = None
    domain_error: str | None = None            # why no domain view: the tool's error, or its output unreadable


def _first_line(result: CommandResult) -> str:
    text = (result.err_text or result.text).strip()
    return text.splitlines()[0][:200] if text else f"rc {result.rc}, no output"


def parse_imex(outputs: Mapping[str, CommandResult]) -> ImexObservation:
    service = outputs.get(SERVICE_ID)
    config = outputs.get(CONFIG_ID)
    ctl = outputs.get(CTL_ID)
    domain, error = None, None
    if ctl is not None:
        if ctl.rc != 0:
            error = f"nvidia-imex-ctl -N failed (rc {ctl.rc}): {_first_line(ctl)}"
        else:
            try:
                domain = parse_imex_ctl_nodes(ctl.text)
            except ParseError as exc:
                error = f"nvidia-imex-ctl -N output unreadable: {exc}"
    state, service_error = None, None
    if service is not None:
        try:
            state = parse_systemctl_is_active(service.text)
        except ParseError as exc:  # no systemd (a container), no bus: unknown, graded where it matters
            service_error = f"{exc}: {_first_line(service)}"
    return ImexObservation(
        service=state, service_error=service_error,
        configured=parse_nodes_config(config.text) if config is not None and config.rc == 0 else None,
        domain=domain, domain_error=error)


def evaluate_imex(obs: ImexObservation, ctx: EvalContext) -> list[Finding]:
    host, profile = ctx.host.name, ctx.profile
    idle = _not_multinode(obs)
    if idle is not None:
        return [Finding(host=host, check="imex.domain", status=Status.SKIP, source=CONFIG_ID,
                        message=f"{idle}; IMEX service {obs.service or 'state unknown'}")]
    out = []
    if obs.service_error is not None:
        out.append(Finding(host=host, check="imex.service", source=SERVICE_ID, message=f"IMEX service state "
                           f"unknown: {obs.service_error}", status=Status.ERROR if profile.expect("imex.service")
                           else Status.SKIP))
    if obs.service is not None:
        out.append(finding_from_expectation(host, "imex.service", profile.expect("imex.service"), obs.service,
                                            source=SERVICE_ID, remedy=REMEDY_SERVICE, profile=profile))
    if obs.domain is None:
        down = obs.service is not None and obs.service != "active"
        out.append(Finding(host=host, check="imex.domain", status=Status.SKIP if down else Status.ERROR,
                           source=CTL_ID, expected="the IMEX daemon's view of the domain",
                           message=f"no IMEX domain view: {obs.domain_error or 'nvidia-imex-ctl -N not collected'}"
                                   + (" (the service is not active: see imex.service)" if down else ""),
                           remedy=None if down else REMEDY_SERVICE))
        return out
    return out + domain_findings(host, obs.domain, profile)


def _not_multinode(obs: ImexObservation) -> str | None:
    """Why this node has no multi-node IMEX domain to grade, or None when it has one (a daemon listing two
    or more nodes has one, wherever its node config lives)."""
    if obs.domain is not None and len(obs.domain.nodes) > 1:
        return None
    if obs.configured is None:
        return f"not configured for multi-node IMEX ({CONFIG_PATH} absent or unreadable)"
    if not obs.configured:
        return f"not configured for multi-node IMEX ({CONFIG_PATH} lists no node)"
    if len(obs.configured) == 1:
        return f"single-node IMEX domain ({CONFIG_PATH} lists only {obs.configured[0]}): no peer to connect"
    return None


def _fault(profile: Profile, key: str) -> tuple[Status, str]:
    """The status of a reported fault and the expected text: the profile's severity, else WARN (the daemon
    reports the fault itself; without an expectation it is not graded harder)."""
    exp = profile.expect(key)
    if exp is None:
        return Status.WARN, f"(no expectation for {key} in profile {profile.name})"
    return Status(exp.severity), f"{expected_text(exp)} (source: {exp.source})"


def domain_findings(host: str, domain: ImexDomain, profile: Profile) -> list[Finding]:
    """Domain state, node states and links of one ``nvidia-imex-ctl -N`` view."""
    if not domain.nodes:
        return [Finding(host=host, check="imex.domain", status=Status.ERROR, source=CTL_ID,
                        value=domain.state, expected="the configured nodes",
                        message="nvidia-imex-ctl -N lists no node: an empty IMEX domain is never healthy",
                        remedy=REMEDY_SERVICE)]
    if len(domain.nodes) == 1:
        return [Finding(host=host, check="imex.domain", status=Status.SKIP, source=CTL_ID, value=domain.state,
                        message=f"single-node IMEX domain ({domain.nodes[0].address}): no peer to connect")]
    out = []
    if domain.state is None:
        out.append(Finding(host=host, check="imex.domain_state", status=Status.ERROR, source=CTL_ID,
                           message="nvidia-imex-ctl -N printed no 'Domain State:' line (truncated output?)"))
    else:
        out.append(finding_from_expectation(host, "imex.domain_state", profile.expect("imex.domain_state"),
                                            domain.state, source=CTL_ID, remedy=REMEDY_PEER, profile=profile))
    status, expected = _fault(profile, "imex.node")
    for node in domain.nodes:
        if node.status != "READY":
            out.append(Finding(host=host, check="imex.node", status=status, component=_name(node.index, domain),
                               value=node.status, expected=f"READY {expected}", source=CTL_ID,
                               message=f"IMEX node {_name(node.index, domain)} is {node.status}, not READY",
                               remedy=REMEDY_PEER))
    return out + _peer_findings(host, domain, profile)


def _name(index: int, domain: ImexDomain) -> str:
    address = next((n.address for n in domain.nodes if n.index == index), "?")
    return f"#{index} {address}"


def culprits(broken: tuple[ImexLink, ...]) -> list[tuple[int, list[ImexLink]]]:
    """The nodes that explain the broken links, most links first: a node that lost the domain breaks its
    whole row and column, so each other node has one broken link to it and is not named for that."""
    left, out = list(broken), []
    while left:
        counts: dict[int, int] = {}
        for link in left:
            for node in {link.source, link.target}:
                counts[node] = counts.get(node, 0) + 1
        node = min(counts, key=lambda n: (-counts[n], n))
        mine = [link for link in left if node in (link.source, link.target)]
        out.append((node, mine))
        left = [link for link in left if link not in mine]
    return out


def _peer_findings(host: str, domain: ImexDomain, profile: Profile) -> list[Finding]:
    if not domain.broken:
        found = finding_from_expectation(host, "imex.peer", profile.expect("imex.peer"), "C", source=CTL_ID,
                                         remedy=REMEDY_PEER, profile=profile)
        if found.status is Status.PASS:
            found = replace(found, message=f"all {len(domain.nodes)} IMEX nodes connected ({domain.connected} "
                                           "links C)")
        return [found]
    status, expected = _fault(profile, "imex.peer")
    out = []
    for node, links in culprits(domain.broken):
        letters = sorted({link.letter for link in links})
        words = ", ".join(f"{letter} {LETTERS.get(letter, 'unknown')}" for letter in letters)
        out.append(Finding(host=host, check="imex.peer", status=status, component=f"peer {_name(node, domain)}",
                           value="/".join(letters), expected=f"C {expected}", source=CTL_ID, remedy=REMEDY_PEER,
                           message=f"IMEX peer {_name(node, domain)}: {len(links)} links not connected ({words})"))
    return out


def _command_map() -> dict[str, str]:
    return {SERVICE_ID: "systemctl is-active nvidia-imex", CONFIG_ID: f"cat {CONFIG_PATH}",
            CTL_ID: "nvidia-imex-ctl -N"}


PROBE = register(ProbeSpec(
    name="imex",
    description="IMEX (multi-node NVLink): nvidia-imex active, every configured peer READY and connected",
    command_map=_command_map(),
    command_tools={SERVICE_ID: ("systemctl",)},
    command_timeouts={CTL_ID: 30.0},
    parse_fn=parse_imex,
    evaluate_fn=evaluate_imex,
))


def imex_summary(obs: Mapping[str, Any]) -> str:
    """One word for the domain view of a host's ``imex`` observations (JSON form): ok, fault, unknown (a
    multi-node config but no view of the domain), idle (no multi-node domain: graded SKIP)."""
    domain = obs.get("domain")
    nodes = domain.get("nodes") if isinstance(domain, Mapping) else None
    if nodes and len(nodes) > 1:
        ready = all(n.get("status") == "READY" for n in nodes)
        return "ok" if domain.get("state") == "UP" and ready and not domain.get("broken") else "fault"
    configured = obs.get("configured")
    return "unknown" if configured and len(configured) > 1 and domain is None else "idle"
