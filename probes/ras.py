"""RAS probe: memory-controller EDAC counts and PCIe AER counters, absolute and grown since the last run.

    edac-sysfs -> /sys/devices/system/edac/mc/mc0/ce_count:0       ("path:value", as grep -H)
    pcie-aer   -> /sys/bus/pci/devices/0000:17:00.0/aer_dev_correctable:BadTLP 3   (kernel >= 4.19 AER stats:
                  one "<ErrName> <count>" line per error type plus a TOTAL_ERR_COR/_FATAL/_NONFATAL line)

Parsers for the same data in other published forms (the ``find ... | while read f; echo; cat`` EDAC listing,
``ras-mc-ctl --error-count``, and AER kernel-log lines) are in ``probes/ras_parse.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from healthcheck.core.grading import Outcome, finding_from_expectation, fold, grade_value
from healthcheck.core.model import CommandResult, Finding, Status
from healthcheck.core.spec import EvalContext, ParseError, ProbeSpec
from healthcheck.probes import register
from healthcheck.probes.ras_parse import AerCounts, EdacCounts, parse_aer_sysfs, parse_edac_sysfs

_AER_FILES = ("aer_dev_correctable", "aer_dev_fatal", "aer_dev_nonfatal", "aer/err_cor", "aer/err_fatal",
              "aer/err_nonfatal")
COMMANDS = {
    "edac-sysfs": "if [ -d /sys/devices/system/edac/mc ]; then grep -H -s . "
                  "/sys/devices/system/edac/mc/mc*/ce_count /sys/devices/system/edac/mc/mc*/ue_count; "
                  "echo '# edac end'; "
                  "else echo '# edac: no /sys/devices/system/edac/mc'; fi",
    "pcie-aer": "grep -H -s . " + " ".join(f"/sys/bus/pci/devices/*/{f}" for f in _AER_FILES)
                + "; echo '# pcie-aer end'",
}
_REMEDY_UE = ("Uncorrected memory errors crash jobs: find the DIMM (edac-util -v, BMC SEL), drain the node "
              "and replace the DIMM")
_REMEDY_CE = "Correctable errors are growing on this memory controller: schedule the DIMM for replacement"
_REMEDY_AER = ("PCIe errors on this device: check `lspci -vvv -s <bdf>` link status, reseat the card or "
               "riser/cable, update firmware; uncorrectable errors warrant draining the node")


@dataclass(frozen=True)
class RasObservation:
    edac: Mapping[str, EdacCounts] | None = None   # None: no EDAC memory-controller driver loaded
    aer: Mapping[str, AerCounts] | None = None     # None: AER statistics not collected


def _completed(result: CommandResult | None, marker: str, cid: str) -> str | None:
    if result is None:
        return None
    if marker not in result.text:
        raise ParseError(f"{cid} output is truncated (no '{marker}' line)", result.text[-200:])
    return result.text


def parse_ras(outputs: Mapping[str, CommandResult]) -> RasObservation:
    edac_text = _completed(outputs.get("edac-sysfs"), "# edac", "edac-sysfs")
    aer_text = _completed(outputs.get("pcie-aer"), "# pcie-aer end", "pcie-aer")
    edac = parse_edac_sysfs(edac_text) if edac_text is not None and "# edac end" in edac_text else None
    return RasObservation(edac=edac or None, aer=parse_aer_sysfs(aer_text) if aer_text is not None else None)


def _previous(ctx: EvalContext, section: str) -> Mapping[str, Mapping[str, Any]]:
    prev = ctx.previous.get("ras")
    value = prev.get(section) if isinstance(prev, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _growth(now: int, before: Any) -> int | None:
    if not isinstance(before, int):
        return None
    return now - before if now >= before else now  # a drop means the counters were reset (reboot)


def evaluate_ras(obs: RasObservation, ctx: EvalContext) -> list[Finding]:
    return _edac_findings(obs, ctx) + _aer_findings(obs, ctx)


def _edac_findings(obs: RasObservation, ctx: EvalContext) -> list[Finding]:
    host, profile = ctx.host.name, ctx.profile
    if obs.edac is None:
        return [Finding(host=host, check="ras.edac", status=Status.SKIP, source="edac-sysfs",
                        message="no EDAC memory-controller driver loaded: DIMM errors cannot be counted",
                        remedy="Load the platform EDAC driver (e.g. skx_edac, i10nm_edac, amd64_edac)")]
    out: list[Outcome] = []
    before = _previous(ctx, "edac")
    for mc, counts in sorted(obs.edac.items()):
        out.append(Outcome(mc, grade_value("ras.edac.uncorrected", profile.expect("ras.edac.uncorrected"), counts.ue,
                                           profile=profile, remedy=_REMEDY_UE)))
        if profile.expect("ras.edac.corrected") is not None:
            out.append(Outcome(mc, grade_value("ras.edac.corrected", profile.expect("ras.edac.corrected"), counts.ce,
                                               profile=profile, remedy=_REMEDY_CE)))
        growth = _growth(counts.ce, (before.get(mc) or {}).get("ce"))
        if growth is not None:
            out.append(Outcome(mc, grade_value("ras.edac.corrected_growth", profile.expect("ras.edac.corrected_growth"),
                                               growth, profile=profile, remedy=_REMEDY_CE)))
    # a controller over its bound keeps its own finding; those within it fold into one a check
    return fold(host, "edac-sysfs", out, total=len(obs.edac), noun="memory controllers", names=_EDAC_NAMES)


_EDAC_NAMES = {"ras.edac.uncorrected": "uncorrected errors", "ras.edac.corrected": "corrected errors",
               "ras.edac.corrected_growth": "corrected errors since the previous run"}


def _aer_findings(obs: RasObservation, ctx: EvalContext) -> list[Finding]:
    host, profile = ctx.host.name, ctx.profile
    if obs.aer is None:
        return []
    if not obs.aer:
        return [Finding(host=host, check="ras.aer", status=Status.SKIP, source="pcie-aer",
                        message="no PCIe AER statistics in sysfs (kernel older than 4.19 or AER disabled)")]
    out: list[Finding] = []
    before = _previous(ctx, "aer")
    for kind in ("fatal", "nonfatal"):
        check = f"ras.aer.{kind}"
        bad = {bdf: c for bdf, c in obs.aer.items() if getattr(c, kind)}
        for bdf, counts in sorted(bad.items()):
            grade = grade_value(check, profile.expect(check), getattr(counts, kind), profile=profile,
                                remedy=_REMEDY_AER)
            out.append(grade.finding(host, bdf, "pcie-aer", note=_detail(counts)))
        if not bad:
            out.append(finding_from_expectation(host, check, profile.expect(check), 0, source="pcie-aer",
                                                profile=profile, remedy=_REMEDY_AER))
    exp = profile.expect("ras.aer.correctable_growth")
    grown = []
    for bdf, counts in sorted(obs.aer.items()):
        growth = _growth(counts.correctable, (before.get(bdf) or {}).get("correctable"))
        if growth:
            grade = grade_value("ras.aer.correctable_growth", exp, growth, profile=profile, remedy=_REMEDY_AER)
            grown.append(grade.finding(host, bdf, "pcie-aer", note=_detail(counts)))
    return out + grown


def _detail(counts: AerCounts) -> str:
    """`` [BadTLP 3, ...]``: the AER errors by name, for a finding's message ("" when none is named)."""
    named = ", ".join(f"{k} {v}" for k, v in sorted(counts.detail.items()))
    return f" [{named}]" if named else ""


PROBE = register(ProbeSpec(
    name="ras",
    description="EDAC memory-controller error counts and PCIe AER counters (absolute and growth)",
    command_map=COMMANDS,
    parse_fn=parse_ras,
    evaluate_fn=evaluate_ras,
))
