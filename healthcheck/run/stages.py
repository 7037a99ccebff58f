"""Per-host stage loop: gate -> parse -> evaluate, every failure turned into a finding.

    findings, observations = grade_host(host, collection, probes, profile, options=opts)

Gating follows pytest's runtestprotocol: no parse without output, no evaluate without a parse.
A command that failed is recorded once and every probe that needs it reports ERROR citing it.
Used identically by live sweeps and by replay, so a replay gives the same verdicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date, datetime, timezone
from typing import Any

from healthcheck.core.defaults import DEFAULTS
from healthcheck.core.grading import apply_known_issues, apply_observe
from healthcheck.core.model import CommandResult, Finding, Host, HostCollection, Status
from healthcheck.core.profiles import Profile
from healthcheck.core.spec import PREVIOUS_AT, EvalContext, ParseError, Probe, recorded_time
from healthcheck.run.gradelimit import GradingTimeout, host_time_bound
from healthcheck.run.nodetools import TOOL_HANG, command_tools, tool_hang_findings

MISSING_TOOL_RC = 127


def probe_command_ids(probe: Probe, options: Mapping[str, Any]) -> list[str]:
    return [*probe.commands(options), *[c for c in probe.accepts if c not in probe.commands(options)]]


def _gate_finding(host: str, probe: Probe, result: CommandResult) -> Finding:
    cid = result.command_id
    if result.not_run is not None:
        return Finding(host=host, check=f"{probe.name}.collect", status=Status.SKIP, source=cid,
                       message=f"{cid} {result.not_run}",
                       remedy=f"See {TOOL_HANG} or the {probe.name}.collect finding of the command that hung")
    if result.transport_error is not None:
        return Finding(host=host, check=f"{probe.name}.collect", status=Status.ERROR, source=cid,
                       expected=f"{cid} output", message=f"{cid} could not run: {result.transport_error}",
                       remedy="See host.reachable for this host; rerun once it is reachable")
    if result.timed_out:
        return Finding(host=host, check=f"{probe.name}.collect", status=Status.ERROR, source=cid,
                       value=f"rc {result.rc}", expected="exit within the command timeout",
                       message=f"{cid} timed out (rc {result.rc}); the tool hung on the node",
                       remedy="Log in and check why the command hangs (hung driver, D-state process, "
                              "dead mount); raise --timeout only if the tool is just slow")
    status = probe.missing_tool_status
    return Finding(host=host, check=f"{probe.name}.collect", status=status, source=cid,
                   value="rc 127", expected="tool installed",
                   message=f"{cid}: command not found on the node ({result.err_text.strip()[:200]})",
                   remedy="Install the tool on the node, or deselect this probe"
                   if status is not Status.SKIP else None)


def _evaluate(probe: Probe, observations: Any, ctx: EvalContext, sources: str,
              gated: list[Finding]) -> list[Finding]:
    try:
        return gated + list(probe.evaluate(observations, ctx))
    except Exception as exc:
        return [*gated, Finding(host=ctx.host.name, check=f"{probe.name}.evaluate", status=Status.ERROR,
                                source=sources, message=f"evaluation failed: {type(exc).__name__}: {exc}",
                                remedy="A healthcheck bug or a malformed profile: check the profile "
                                       f"{ctx.profile.name}")]


def run_probe(probe: Probe, host: Host, results: Mapping[str, CommandResult],
              ctx: EvalContext, preparsed: Any = None) -> tuple[list[Finding], Any]:
    """Findings and observations of one probe on one host; never raises.

    ``preparsed`` are observations gathered another way (NVML in local mode): they skip
    gating and parsing and are evaluated exactly like parsed ones."""
    name = host.name
    if preparsed is not None:
        return _evaluate(probe, preparsed, ctx, "nvml", []), preparsed
    if getattr(probe, "unavailable", None):
        return [Finding(host=name, check=f"{probe.name}.collect", status=Status.SKIP,
                        message=f"probe {probe.name} unavailable: {probe.unavailable}")], None
    ids = probe_command_ids(probe, ctx.options)
    present = {cid: results[cid] for cid in ids if cid in results}
    if not present:
        return [Finding(host=name, check=f"{probe.name}.collect", status=Status.SKIP,
                        message=f"no output for {', '.join(ids)} (not collected or not in the bundle)")], None
    usable = {cid: r for cid, r in present.items() if r.ok and r.rc != MISSING_TOOL_RC}
    gated = [_gate_finding(name, probe, r) for cid, r in present.items() if cid not in usable]
    if not usable:
        return gated, None
    truncated = [cid for cid, r in usable.items() if r.stdout_truncated]
    try:
        observations = probe.parse(usable)
    except ParseError as exc:
        more = f" (output truncated at the cap: {', '.join(truncated)})" if truncated else ""
        excerpt = f"; output starts: {exc.excerpt[:120]!r}" if exc.excerpt else ""
        return [Finding(host=name, check=f"{probe.name}.parse", status=Status.ERROR, expected="parsable output",
                        source=",".join(usable), message=f"cannot parse {', '.join(usable)}: {exc}{more}{excerpt}",
                        remedy="Run the command on the node by hand; if its output is valid, "
                               "attach the raw file from the run directory to a healthcheck bug")], None
    except Exception as exc:
        return [Finding(host=name, check=f"{probe.name}.parse", status=Status.ERROR, source=",".join(usable),
                        message=f"parser crashed on {', '.join(usable)}: {type(exc).__name__}: {exc}",
                        remedy="A healthcheck bug: attach the raw output from the run directory")], None
    return _evaluate(probe, observations, ctx, ",".join(usable), gated), observations


def reachability_finding(host: Host, collection: HostCollection, transport: str) -> Finding:
    if collection.transport_error is None:
        return Finding(host=host.name, check="host.reachable", status=Status.PASS, value=collection.duration_s,
                       unit="s", source=transport,
                       message=f"{len(collection.results)} commands collected in {collection.duration_s:g}s")
    error = collection.transport_error
    if collection.busy:
        return Finding(host=host.name, check="host.reachable", status=Status.SKIP, source=transport, value=error,
                       message=f"{host.name}: not checked, the node is running a job ({error})")
    return Finding(host=host.name, check="host.reachable", status=Status.ERROR, source=transport,
                   value=error, expected=f"one {transport} session completing every command",
                   message=f"{host.name}: {error}", remedy=_reach_remedy(error))


def _reach_remedy(error: str) -> str:
    lowered = error.lower()
    if "host key" in lowered:
        return ("Verify the node's host key out of band (console, provisioning record) and update "
                "known_hosts; --accept-new-host-keys only trusts keys never seen before")
    if "authentication" in lowered:
        return "Check the user and IdentityFile for this host (inventory user, ssh_config)"
    if "session start hung" in lowered:
        return ("sshd authenticated but the session never started: on the console or BMC check what runs at "
                "login (PAM modules, systemd-logind: journalctl -u systemd-logind, the home directory's mount)")
    if "silent" in lowered:
        return ("The node stopped sending while the named command ran: check it on the console or BMC; a "
                "process in D state (hung GPU driver, dead NFS mount) or a frozen node is the usual cause")
    if "deadline" in lowered:
        return "A command hung: see which one in the findings; the node may have a hung driver or mount"
    if "slurm" in lowered or "srun" in lowered:
        return ("Check the node in Slurm (scontrol show node NODE): resume it once fixed, or fix the host's "
                "slurm_node var or the --srun-arg partition/account/reservation")
    if "refused" in lowered or "timeout" in lowered or "reach" in lowered or "resolve" in lowered:
        return "Check the node is up and sshd runs (ping, console, BMC); fix the inventory address if wrong"
    return "Check connectivity to the node and rerun"


def grade_host(host: Host, collection: HostCollection, probes: Sequence[Probe], profile: Profile,
               transport: str, previous: Mapping[str, Any] | None = None,
               options: Mapping[str, Any] | None = None,
               preparsed: Mapping[str, Any] | None = None) -> tuple[list[Finding], dict[str, Any]]:
    """All findings and observations of one host: each probe's parsed records (dataclasses), which
    ``observation_store`` writes as JSON (``encode_observations``, ``key_observations``).

    Bounded in time where a timer can be armed (``run.gradelimit``: ``DEFAULTS.grade_host_timeout_s``, or
    the ``grade_timeout_s`` option): a probe still parsing at the bound is ERROR naming its commands,
    the probes after it one ``host.grade`` ERROR, and the sweep goes on."""
    opts = dict(options or {})
    findings = [reachability_finding(host, collection, transport),
                *tool_hang_findings(host.name, collection.results, command_tools(probes))]
    observations: dict[str, Any] = {}
    if collection.transport_error is not None and not any(r.ok for r in collection.results.values()):
        return findings, observations
    recorded = recorded_time(collection.collected_at)
    now = recorded or datetime.now(timezone.utc)
    before = dict(previous or {})
    previous_at = recorded_time(before.pop(PREVIOUS_AT, None))
    ctx = EvalContext(host=host, profile=profile, previous=before, options=opts, now=now, collected_at=recorded,
                      previous_at=previous_at)
    limit = float(opts.get("grade_timeout_s") or DEFAULTS.grade_host_timeout_s)
    try:
        with host_time_bound(limit):
            for index, probe in enumerate(probes):
                try:
                    probe_findings, obs = run_probe(probe, host, collection.results, ctx,
                                                    (preparsed or {}).get(probe.name))
                except GradingTimeout:
                    findings += stopped_findings(host.name, probe, probes[index + 1:], collection, ctx, limit)
                    break
                findings.extend(probe_findings)
                if obs is not None:
                    observations[probe.name] = obs
    except GradingTimeout:
        pass  # the timer fired as the block ended, after the last probe: nothing was cut short
    today = now.date() if isinstance(now, datetime) else date.today()
    return apply_observe(apply_known_issues(findings, profile, today), profile), observations


def stopped_findings(host: str, probe: Probe, rest: Sequence[Probe], collection: HostCollection,
                     ctx: EvalContext, limit: float) -> list[Finding]:
    """``probe`` ran past the host's grading bound: an ERROR naming its commands (and their sizes), and one
    ``host.grade`` ERROR for the probes not graded after it."""
    ids = [cid for cid in probe_command_ids(probe, ctx.options) if cid in collection.results]
    sizes = ", ".join(f"{cid} ({len(collection.results[cid].stdout)} bytes)" for cid in ids) or "no output"
    out = [Finding(host=host, check=f"{probe.name}.parse", status=Status.ERROR, source=",".join(ids) or None,
                   value=f"> {limit:g} s", expected=f"graded within {limit:g} s",
                   message=f"grading stopped: parsing {sizes} ran past {limit:g} s (a parser that does not end "
                           "on this output)",
                   remedy="A healthcheck bug or a hostile output: attach the raw file from the run directory "
                          f"(raw/{host}/) to a healthcheck bug")]
    if rest:
        names = ", ".join(p.name for p in rest)
        out.append(Finding(host=host, check="host.grade", status=Status.ERROR, expected="every probe graded",
                           message=f"not graded: the host's grading time ({limit:g} s) ran out in {probe.name}: "
                                   f"{names}",
                           remedy="See the probe that ran past the bound; rerun this host once it is fixed"))
    return out
