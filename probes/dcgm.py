"""DCGM probe: ``dcgmi discovery -l``, ``dcgmi diag -r LEVEL -j`` and ``dcgmi health -c -j``.

    dcgmi-discovery -> "8 GPUs found." + boxed table (Name, PCI Bus ID, Device UUID per GPU)
    dcgmi-diag      -> {"DCGM Diagnostic": {"test_categories": [...]}, "metadata": {...}}
                       (exit code 205/226: the diag ran and found errors)
    dcgmi-health    -> {"body": {"Overall Health": {"value": "Healthy"}, ...},
                        "header": ["Health Monitor Report"]}

The diag level is the run option ``dcgm_diag_level``, else 3 for ``--plan acceptance`` and 1 otherwise.
When dcgmi is not installed or nv-hostengine is not running, every DCGM check is SKIP with that reason,
never PASS or FAIL. Diag parsing lives in ``probes/dcgm_diag.py``, health and discovery parsing in
``probes/dcgm_health.py``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from healthcheck.core.grading import finding_from_expectation
from healthcheck.core.model import CommandResult, Finding, Status
from healthcheck.core.spec import EvalContext, ParseError, ProbeSpec
from healthcheck.probes import register
from healthcheck.probes.dcgm_diag import DiagReport, DiagTest, DiagWarning, parse_dcgmi_diag, report_level
from healthcheck.probes.dcgm_health import DcgmDiscovery, HealthReport, parse_dcgmi_discovery, parse_dcgmi_health

NOT_INSTALLED = "healthcheck: dcgmi not installed"
_GUARD = f"command -v dcgmi >/dev/null 2>&1 || {{ echo '{NOT_INSTALLED}'; exit 0; }}; "
DIAG_RAN_WITH_ERRORS = (205, 226)  # DCGM_ST_NVVS_ISOLATE_ERROR (-51), DCGM_ST_NVVS_ERROR (-30) as exit codes
# Per diag level: level 1 (deployment/readiness) returns in well under a minute, level 2 in a few
# minutes, level 3 takes ~15-30 min on 8 GPUs and level 4 over an hour (DCGM diagnostics docs). A
# nightly level-1 sweep must not inherit the acceptance level's hour-long bound (host deadline).
DIAG_TIMEOUT_S = {1: 300.0, 2: 900.0, 3: 3600.0, 4: 7200.0}
_ENGINE_DOWN = re.compile(r"unable to (?:establish a connection|connect to host engine)", re.IGNORECASE)
_STATUS = {"pass": Status.PASS, "fail": Status.FAIL, "warn": Status.WARN, "skip": Status.SKIP}
_REMEDY = {
    "ISOLATE": "DCGM says this GPU cannot run workloads: drain the node, isolate the GPU and run the field "
               "diagnostic / open an RMA",
    "RESET": "Drain the node and reset the GPU (nvidia-smi -r -i <gpu>), then rerun dcgmi diag",
    "CONFIG": "A configuration problem, not hardware: fix the setting the message names, then rerun "
              "dcgmi diag",
    "MONITOR": "The GPU can still run work: watch it and rerun dcgmi diag at the next maintenance window",
}
_REMEDY_DEFAULT = ("Follow the DCGM message; rerun `dcgmi diag -r 3` and read the nv-hostengine and nvvs "
                   "logs (/var/log/nvidia-dcgm) before returning the node to service")


def diag_level(options: Mapping[str, Any]) -> int:
    """``dcgm_diag_level`` when given, else 3 for the acceptance plan and 1 otherwise (DCGM's doctrine:
    level 1 as a readiness check, level 3 by an administrator)."""
    if options.get("dcgm_diag_level") is not None:
        return int(options["dcgm_diag_level"])
    return 3 if options.get("plan") == "acceptance" else 1


def command_timeouts(options: Mapping[str, Any]) -> dict[str, float]:
    """The ``dcgmi-diag`` timeout for the level this run plans (see ``DIAG_TIMEOUT_S``)."""
    return {"dcgmi-diag": DIAG_TIMEOUT_S.get(diag_level(options), DIAG_TIMEOUT_S[4])}


def render_commands(options: Mapping[str, Any]) -> dict[str, str]:
    level = diag_level(options)
    if level not in (1, 2, 3, 4):
        raise ValueError(f"dcgm_diag_level must be 1-4, got {level}")
    return {"dcgmi-discovery": _GUARD + "dcgmi discovery -l",
            "dcgmi-diag": _GUARD + f"dcgmi diag -r {level} -j",
            "dcgmi-health": _GUARD + "dcgmi health -c -j"}


@dataclass(frozen=True)
class DcgmObservation:
    discovery: DcgmDiscovery | None = None
    diag: DiagReport | None = None
    diag_rc: int | None = None
    health: HealthReport | None = None
    unavailable: Mapping[str, str] = field(default_factory=dict)  # command id -> why DCGM could not answer
    errors: Mapping[str, str] = field(default_factory=dict)       # command id -> unparseable output


def _may_say_engine_down(text: str) -> bool:
    """False when no line of ``text`` can match ``_ENGINE_DOWN``: for ASCII text a substring search of its
    lower case (the pattern is ASCII words, matched ignoring case), far cheaper than the case-insensitive
    pattern on every line; other text: the pattern on the whole text (it never spans a line break)."""
    if text.isascii():
        return "unable to " in text.lower()
    return _ENGINE_DOWN.search(text) is not None


def dcgm_unavailable(result: CommandResult) -> str | None:
    """Why dcgmi could not answer at all (not installed, host engine down), or None."""
    text = result.text + result.err_text
    if NOT_INSTALLED in text or result.rc == 127:
        return "dcgmi is not installed on this node"
    if not _may_say_engine_down(text):
        return None
    said = [ln.strip().removeprefix("Error: ") for ln in text.splitlines() if _ENGINE_DOWN.search(ln)]
    if said:
        return f"the DCGM host engine (nv-hostengine) is not reachable: {' / '.join(said)}"
    return None


def parse_dcgm(outputs: Mapping[str, CommandResult]) -> DcgmObservation:
    parsed: dict[str, Any] = {}
    unavailable, errors = {}, {}
    parsers = {"dcgmi-discovery": parse_dcgmi_discovery, "dcgmi-diag": parse_dcgmi_diag,
               "dcgmi-health": parse_dcgmi_health}
    for cid, parser in parsers.items():
        result = outputs.get(cid)
        if result is None:
            continue
        if (why := dcgm_unavailable(result)) is not None:
            unavailable[cid] = why
            continue
        try:
            parsed[cid] = parser(result.text)
        except ParseError as exc:
            first = (result.text + result.err_text).strip().splitlines()[:1]
            errors[cid] = f"exit code {result.rc}: {first[0] if first else exc}"
    diag = outputs.get("dcgmi-diag")
    return DcgmObservation(discovery=parsed.get("dcgmi-discovery"), diag=parsed.get("dcgmi-diag"),
                           diag_rc=diag.rc if diag is not None else None, health=parsed.get("dcgmi-health"),
                           unavailable=unavailable, errors=errors)


def evaluate_dcgm(obs: DcgmObservation, ctx: EvalContext) -> list[Finding]:
    host = ctx.host.name
    findings: list[Finding] = []
    for cid, check in (("dcgmi-discovery", "dcgm.discovery"), ("dcgmi-diag", "dcgm.diag"),
                       ("dcgmi-health", "dcgm.health")):
        if cid in obs.unavailable:
            findings.append(Finding(host=host, check=check, status=Status.SKIP, source=cid,
                                    message=f"{check} skipped: {obs.unavailable[cid]}",
                                    remedy="Install DCGM (datacenter-gpu-manager) and enable "
                                           "nvidia-dcgm.service if this node should be checked by DCGM"))
        elif cid in obs.errors:
            findings.append(Finding(host=host, check=check, status=Status.ERROR, source=cid,
                                    message=f"{cid} output could not be read ({obs.errors[cid]})"))
    if obs.discovery is not None:
        findings += _discovery_findings(host, obs.discovery, ctx)
    if obs.diag is not None:
        findings += evaluate_diag(host, obs.diag, obs.diag_rc, diag_level(ctx.options))
    if obs.health is not None:
        findings += _health_findings(host, obs.health)
    return findings


def _discovery_findings(host: str, disc: DcgmDiscovery, ctx: EvalContext) -> list[Finding]:
    out = [finding_from_expectation(
        host, "dcgm.discovery.gpu_count", ctx.profile.expect("gpu.count"), len(disc.gpus),
        source="dcgmi-discovery", profile=ctx.profile,
        remedy="DCGM sees fewer GPUs than the node should have: compare with nvidia-smi -L and lspci; a GPU "
               "missing in both is off the bus")]
    for gpu in disc.gpus:
        if gpu.name.startswith("<<<"):
            out.append(Finding(
                host=host, check="dcgm.discovery.gpu_name", component=f"gpu{gpu.gpu_id}", status=Status.WARN,
                value=gpu.name, source="dcgmi-discovery",
                message=f"gpu{gpu.gpu_id}: DCGM reports its name as {gpu.name} (bus {gpu.bus_id}): this DCGM "
                        "release does not know this GPU model",
                remedy="Upgrade DCGM to a release that supports this GPU; its diag results are unreliable"))
    return out


def test_slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") or "test"


def evaluate_diag(host: str, report: DiagReport, rc: int | None, level: Any) -> list[Finding]:
    """Every test and every entity result of one ``dcgmi diag`` run, plus a run summary."""
    findings: list[Finding] = []
    for test in report.tests:
        findings += _test_findings(host, test)
    version = f"DCGM {report.dcgm_version}" if report.dcgm_version else "DCGM"
    ran = report_level(report)  # the level comes from the output, not from this run's options
    asked = f"; the run options ask for -r {level}" if ran is not None and str(ran) != str(level) else ""
    shown = f"dcgmi diag -r {ran}" if ran is not None else "dcgmi diag"
    what = f"{shown} ({version}, {report.format}, exit code {rc}, level from the tests in the output{asked})"
    if report.runtime_error:
        status, message = Status.ERROR, f"{what} could not run its tests: {report.runtime_error}"
    elif not report.tests:
        status, message = Status.ERROR, f"{what} reported no test results"
    else:
        bad = [f for f in findings if f.status in (Status.FAIL, Status.WARN, Status.ERROR)]
        status = max((f.status for f in findings), key=lambda s: s.rank, default=Status.PASS)
        if status is Status.SKIP:
            status = Status.PASS if any(f.status is Status.PASS for f in findings) else Status.SKIP
        names = sorted({f.check.rsplit(".", 1)[-1] for f in bad})
        message = f"{what}: {len(report.tests)} tests, " + (
            f"problems in {', '.join(names)}" if names else "no failures")
        if rc in DIAG_RAN_WITH_ERRORS and not bad:
            status = Status.ERROR
            message += f"; but exit code {rc} means DCGM found errors it did not list"
    findings.insert(0, Finding(host=host, check="dcgm.diag", status=status, value=rc, source="dcgmi-diag",
                               message=message, remedy=None if status is Status.PASS else _REMEDY_DEFAULT))
    return findings


def _test_findings(host: str, test: DiagTest) -> list[Finding]:
    check = f"dcgm.diag.{test_slug(test.name)}"
    label = f"{test.category}/{test.name}" if test.category and test.category != test.name else test.name
    bad = [r for r in test.results if r.status != "pass"]
    out = []
    for result in bad:
        warnings = result.warnings + tuple(w for w in test.warnings if _mentions(w.message, result.entity))
        out.append(_diag_finding(host, check, result.entity, label, result.status, warnings, result.info))
    if not bad and test.status != "pass":
        out.append(_diag_finding(host, check, "node", label, test.status, test.warnings, test.info))
    if not out:
        who = ", ".join(r.entity for r in test.results) or "all GPUs"
        out.append(Finding(host=host, check=check, status=Status.PASS, value="pass", source="dcgmi-diag",
                           message=f"{label}: pass ({who})"))
    return out


def _mentions(message: str, entity: str) -> bool:
    """A test-level warning belongs to gpuN when it names GPU N, or to everyone when it names no GPU."""
    named = set(re.findall(r"\bGPU\s*(\d+)", message))
    ids = set(re.findall(r"\d+", entity)) if entity.startswith("gpu") else set()
    return not named or not ids or bool(named & ids)


def _diag_finding(host: str, check: str, entity: str, label: str, status_word: str,
                  warnings: tuple[DiagWarning, ...], info: tuple[str, ...]) -> Finding:
    status = _STATUS.get(status_word, Status.ERROR)
    severities = [w.severity for w in warnings if w.severity]
    if status is Status.WARN and {"ISOLATE", "RESET"} & set(severities):
        status = Status.FAIL  # DCGM: "cannot perform workload" / "drain and reset" is never just a warning
    component = "all GPUs" if entity == "all" else entity
    detail = "; ".join(f"[{w.severity}] {w.message}" if w.severity else w.message for w in warnings)
    if not detail and info and status is not Status.SKIP:
        detail = "; ".join(info)
    message = f"{component}: {label} {status_word}" + (f": {detail}" if detail else "")
    remedy = next((_REMEDY[s] for s in ("ISOLATE", "RESET", "CONFIG", "MONITOR") if s in severities),
                  _REMEDY_DEFAULT)
    return Finding(host=host, check=check, component=component, status=status, value=status_word,
                   expected="pass", message=message, source="dcgmi-diag",
                   remedy=None if status in (Status.PASS, Status.SKIP) else remedy)


def _health_findings(host: str, health: HealthReport) -> list[Finding]:
    if health.watches_disabled:
        return [Finding(host=host, check="dcgm.health", status=Status.SKIP, source="dcgmi-health",
                        message=f"dcgm.health skipped: {health.watches_disabled}",
                        remedy="Enable DCGM health watches once per boot (`dcgmi health -s a`); PCIe, "
                               "thermal and power watches need at least a minute of samples")]
    words = {"healthy": Status.PASS, "warning": Status.WARN, "failure": Status.FAIL}
    overall = words.get(health.overall.lower(), Status.ERROR)
    out = [Finding(host=host, check="dcgm.health", status=overall, value=health.overall, expected="Healthy",
                   source="dcgmi-health", message=f"DCGM overall health: {health.overall}",
                   remedy=None if overall is Status.PASS else _REMEDY_DEFAULT)]
    for incident in health.incidents:
        status = words.get(incident.health.lower(), Status.ERROR)
        out.append(Finding(
            host=host, check=f"dcgm.health.{test_slug(incident.system.replace(' system', ''))}",
            component=incident.entity, status=status, value=incident.health, expected="Healthy",
            source="dcgmi-health", message=f"{incident.entity}: {incident.system} {incident.health}: "
                                           f"{incident.message}",
            remedy=None if status is Status.PASS else _REMEDY_DEFAULT))
    return out


PROBE = register(ProbeSpec(
    name="dcgm",
    description="DCGM discovery, diagnostics (dcgmi diag -r LEVEL) and health watches",
    command_map=render_commands({}),
    render_commands=render_commands,
    parse_fn=parse_dcgm,
    evaluate_fn=evaluate_dcgm,
    command_timeouts=command_timeouts,
    command_tools={cid: ("dcgmi",) for cid in render_commands({})},
))
