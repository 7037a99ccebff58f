"""RAS probe: EDAC and AER counters (sysfs), their growth, and the published EDAC/AER/ras-mc-ctl forms."""

from __future__ import annotations

import pytest

from healthcheck.core.model import CommandResult, Host, Status
from healthcheck.core.profiles import load_profile
from healthcheck.core.spec import EvalContext, ParseError
from healthcheck.probes.ras import evaluate_ras, parse_ras
from healthcheck.probes.ras_parse import (
    parse_aer_kernel_log,
    parse_aer_sysfs,
    parse_edac_kernel_log,
    parse_edac_sysfs,
    parse_ras_mc_ctl_error_count,
)
from healthcheck.store.jsoncodec import to_jsonable
from tests.conftest import corpus_text, fixture_text

H100 = load_profile("h100-sxm5-8x")


def own(rel: str) -> str:
    return fixture_text(f"system/{rel}").split("\n", 1)[1]


def evaluate(outputs: dict[str, str], previous=None):
    obs = parse_ras({cid: CommandResult(host="gpu001", command_id=cid, stdout=t.encode(), rc=0)
                     for cid, t in outputs.items()})
    return obs, evaluate_ras(obs, EvalContext(host=Host(name="gpu001"), profile=H100, previous=previous or {}))


def test_edac_corpus_listing_and_ras_mc_ctl():
    assert parse_edac_sysfs(corpus_text("misc/edac-sysfs-ce-ue-count-listing-all-zero.txt")) == \
        {"mc0": parse_edac_sysfs("/sys/devices/system/edac/mc/mc0/ce_count:0\n")["mc0"]}
    table = parse_ras_mc_ctl_error_count(corpus_text("misc/ras-mc-ctl-error-count-all-zero.txt"))
    assert sorted(table) == ["mc#0csrow#2channel#0", "mc#0csrow#2channel#1", "mc#0csrow#3channel#0",
                             "mc#0csrow#3channel#1"]
    assert {(c.ce, c.ue) for c in table.values()} == {(0, 0)}
    with pytest.raises(ParseError):
        parse_ras_mc_ctl_error_count("no table\n")


def test_edac_and_aer_kernel_log_corpus():
    read = parse_edac_kernel_log(corpus_text("misc/edac-sbridge-ce-memory-read-error-dmesg-T.txt"))
    assert [(e.controller, e.kind, e.count, e.location) for e in read] == [
        ("mc0", "CE", 1, "CPU_SrcID#0_Ha#0_Chan#2_DIMM#0")]
    scrub = parse_edac_kernel_log(corpus_text("misc/edac-sbridge-ce-memory-scrubbing-error-syslog.txt"))
    assert scrub[0].message == "memory scrubbing error" and scrub[0].controller == "mc1"
    new = parse_aer_kernel_log(corpus_text("misc/aer-correctable-data-link-layer-timeout-badtlp-amd-rootport.txt"))
    assert [(e.device, e.severity, e.layer, e.errors) for e in new] == [
        ("0000:00:03.1", "Correctable", "Data Link Layer", ("Timeout",)),
        ("0000:00:03.1", "Correctable", "Data Link Layer", ("BadTLP",))]
    old = parse_aer_kernel_log(corpus_text("misc/aer-corrected-physical-layer-receiver-error-old-format.txt"))
    assert len(old) == 3 and {(e.severity, e.errors) for e in old} == {("Corrected", ("Receiver Error",))}


def test_aer_sysfs_totals_and_detail():
    aer = parse_aer_sysfs(own("pcie-aer-gpu-fatal-cmplto.txt"))
    assert sorted(aer) == ["0000:18:00.0", "0000:1b:00.0", "0000:2a:00.0"]
    gpu = aer["0000:1b:00.0"]
    assert (gpu.correctable, gpu.fatal, gpu.nonfatal) == (900, 1, 0)
    assert gpu.detail == {"RxErr": 900, "CmpltTO": 1}


def test_uncorrected_edac_and_fatal_aer_fail():
    _, findings = evaluate({"edac-sysfs": own("edac-sysfs-mc1-uncorrected.txt"),
                            "pcie-aer": own("pcie-aer-gpu-fatal-cmplto.txt")})
    ue = {f.component: f for f in findings if f.check == "ras.edac.uncorrected"}
    assert (ue["mc0"].status, ue["mc1"].status, ue["mc1"].value) == (Status.PASS, Status.FAIL, 1)
    fatal = [f for f in findings if f.check == "ras.aer.fatal"]
    assert [(f.component, f.status, f.value) for f in fatal] == [("0000:1b:00.0", Status.FAIL, 1)]
    assert "CmpltTO 1" in fatal[0].message
    assert [f.status for f in findings if f.check == "ras.aer.nonfatal"] == [Status.PASS]
    # mc1 repaired: both controllers within the bound share one PASS
    _, findings = evaluate({"edac-sysfs": own("edac-sysfs-mc1-uncorrected.txt").replace("ue_count:1", "ue_count:0")})
    [ue] = [f for f in findings if f.check == "ras.edac.uncorrected"]
    assert (ue.component, ue.status, ue.value) == ("node", Status.PASS, 0)
    assert ue.message == "all 2 memory controllers: uncorrected errors 0 errors, within <= 0 errors"


def test_growth_since_previous_run():
    before, _ = evaluate({"edac-sysfs": own("edac-sysfs-mc1-uncorrected.txt").replace("ce_count:12", "ce_count:1"),
                          "pcie-aer": own("pcie-aer-previous-run.txt")})
    _, findings = evaluate({"edac-sysfs": own("edac-sysfs-mc1-uncorrected.txt"),
                            "pcie-aer": own("pcie-aer-gpu-fatal-cmplto.txt")},
                           previous={"ras": to_jsonable(before)})
    ce = {f.component: f for f in findings if f.check == "ras.edac.corrected_growth"}
    assert (ce["mc0"].value, ce["mc0"].status) == (11, Status.WARN)
    assert (ce["mc1"].value, ce["mc1"].status) == (0, Status.PASS)
    grown = [f for f in findings if f.check == "ras.aer.correctable_growth"]
    assert [(f.component, f.value, f.status) for f in grown] == [("0000:1b:00.0", 800, Status.WARN)]


def test_no_edac_driver_is_skip_and_truncation_is_error():
    _, findings = evaluate({"edac-sysfs": "# edac: no /sys/devices/system/edac/mc\n"})
    assert [(f.check, f.status) for f in findings] == [("ras.edac", Status.SKIP)]
    with pytest.raises(ParseError, match="truncated"):
        parse_ras({"pcie-aer": CommandResult(host="h", command_id="pcie-aer", stdout=b"/sys/bus/pci/devices/", rc=0)})
    with pytest.raises(ParseError):
        parse_edac_sysfs("/sys/devices/system/edac/mc/mc0/ce_count:lots\n")
