"""probes/xid.py and probes/kernel_log.py: Xid / SXid / GPU-lost events over a window."""

from __future__ import annotations

import dataclasses
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest

from healthcheck import probes as registry
from healthcheck.core.model import CommandResult, Host, Status
from healthcheck.core.profiles import load_profile
from healthcheck.core.spec import EvalContext, ParseError
from healthcheck.probes import parse_memo
from healthcheck.probes.kernel_log import parse_kernel_log, resolve_time
from healthcheck.probes.xid import evaluate_xid, kernel_log_command, load_catalog, parse_xid
from healthcheck.run.fanout import plan_commands
from tests.conftest import corpus_files, corpus_text, fixture_text

# our 8x H100 report: gpu0..7 at 19, 3B, 4C, 5D, 9B, BB, CB, DB, every remap pending/failure No
HEALTHY_XML = fixture_text("nvidia-smi-xml/h100-8x-healthy.xml")


def body(rel: str) -> str:
    return fixture_text(rel).split("\n", 1)[1]


def out(cid: str, text: str, rc: int = 0) -> CommandResult:
    return CommandResult(host="gpu001", command_id=cid, stdout=text.encode(), rc=rc)


def smi_xml(remap: dict[int, tuple[str, str]] | None = None, bus: dict[str, str] | None = None) -> str:
    """HEALTHY_XML with GPU i's remapped_row_pending/failure set to remap[i], bus ids renamed."""
    head, *gpus = HEALTHY_XML.split("<gpu id=")
    for i, (pending, failure) in (remap or {}).items():
        gpus[i] = gpus[i].replace("<remapped_row_pending>No<", f"<remapped_row_pending>{pending}<") \
                         .replace("<remapped_row_failure>No<", f"<remapped_row_failure>{failure}<")
    text = "<gpu id=".join([head, *gpus])
    for old, new in (bus or {}).items():
        text = text.replace(f"00000000:{old}:00.0", f"00000000:{new}:00.0")
    return text


def observe(log: str | None, smi: str | None = HEALTHY_XML, rc: int = 0, smi_id: str = "nvidia-smi-q-x"):
    outputs = {} if log is None else {"kernel-log": out("kernel-log", log, rc)}
    if smi is not None:
        outputs[smi_id] = out(smi_id, smi)
    return parse_xid(outputs)


def grade(obs, now: str, window_h: float = 24.0, profile=None, host_vars=None):
    ctx = EvalContext(host=Host("gpu001", vars=host_vars or {}), profile=profile or load_profile("h100-sxm5-8x"),
                      options={"kernel_log_window_h": window_h}, now=datetime.fromisoformat(now))
    return evaluate_xid(obs, ctx)


def table(findings):
    return {(f.check, f.component): f for f in findings}


# --- our fixtures: the whole grading path ------------------------------------------------------

def test_xid79_names_gpu_and_suppresses_fallen_off_bus_duplicate():
    findings = grade(observe(body("xid/journalctl-k-xid79-gpu2.txt")), "2025-11-21T04:00:00+00:00")
    (f,) = findings
    assert (f.check, f.component, f.status, f.value, f.unit) == ("xid.79", "gpu2", Status.FAIL, 1, "events")
    assert "PCI 0000:4c:00" in f.message and "GPU_HAS_FALLEN_OFF_THE_BUS" in f.message
    assert "action: reboot node" in f.message and "first 2025-11-21T03:12:44Z" in f.message
    assert f.source == "kernel-log" and "power-cycle" in f.remedy


def test_window_lets_old_events_pass():
    (f,) = grade(observe(body("xid/journalctl-k-xid79-gpu2.txt")), "2025-11-25T04:00:00+00:00")
    assert (f.check, f.status) == ("xid.events", Status.PASS)
    assert "2 older events outside the window" in f.message
    (f,) = grade(observe(body("xid/journalctl-k-xid79-gpu2.txt")), "2025-11-25T04:00:00+00:00", window_h=168)
    assert (f.check, f.status) == ("xid.79", Status.FAIL)


def test_mixed_faults_each_graded_with_action():
    obs = observe(body("xid/dmesg-T-mixed-faults.txt"), smi_xml(remap={5: ("Yes", "No")}))
    got = table(grade(obs, "2025-11-21T03:00:00+00:00"))
    assert set(got) == {("xid.13", "gpu0"), ("xid.63", "gpu5"), ("xid.74", "gpu6"), ("xid.154", "gpu6"),
                        ("fabric.sxid.12028", "nvswitch2"), ("xid.gpu_lost", "gpu7"), ("xid.999", "gpu1")}
    x13 = got[("xid.13", "gpu0")]
    assert (x13.status, x13.value) == (Status.WARN, 3)  # the 4th is 42 h old
    assert "first 2025-11-21T01:10:00Z, last 2025-11-21T01:12:30Z" in x13.message
    assert "application" in x13.message and "action: restart app" in x13.message
    x63 = got[("xid.63", "gpu5")]
    assert x63.status is Status.FAIL and "pending until the GPU is reset" in x63.message
    x74 = got[("xid.74", "gpu6")]
    assert x74.status is Status.FAIL and " link 8:" in x74.message and "'GPU Reset Required'" in x74.message
    x154 = got[("xid.154", "gpu6")]
    assert x154.status is Status.FAIL and "action: reset GPU" in x154.message
    sx = got[("fabric.sxid.12028", "nvswitch2")]
    assert (sx.status, sx.value) == (Status.WARN, 1) and "link 61" in sx.message and "Non-fatal" in sx.message
    lost = got[("xid.gpu_lost", "gpu7")]
    assert lost.status is Status.FAIL and "PCI 0000:db:00" in lost.message
    assert got[("xid.999", "gpu1")].status is Status.WARN and "not in the catalog" in got[("xid.999", "gpu1")].message


def test_xid63_with_remap_applied_is_warn_and_failure_is_rma():
    log = body("xid/dmesg-T-mixed-faults.txt")
    x63 = table(grade(observe(log), "2025-11-21T03:00:00+00:00"))[("xid.63", "gpu5")]  # pending No
    assert x63.status is Status.WARN and "already applied" in x63.message
    failed = smi_xml(remap={5: ("No", "Yes")})
    x63 = table(grade(observe(log, failed), "2025-11-21T03:00:00+00:00"))[("xid.63", "gpu5")]
    assert x63.status is Status.FAIL and "action: drain and RMA" in x63.message


def test_without_pci_map_components_name_the_pci_address():
    got = table(grade(observe(body("xid/journalctl-k-xid79-gpu2.txt"), smi=None), "2025-11-21T04:00:00+00:00"))
    assert ("xid.79", "gpu 0000:4c:00") in got


@pytest.mark.parametrize("name", ["not-xml.txt", "truncated-mid-gpu.xml"])
def test_unreadable_nvidia_smi_leaves_the_map_out_not_the_xids(name):
    obs = observe(body("xid/journalctl-k-xid79-gpu2.txt"), fixture_text(f"nvidia-smi-xml/bad/{name}"))
    assert obs.gpus == ()
    (f,) = grade(obs, "2025-11-21T04:00:00+00:00")
    assert (f.check, f.component, f.status) == ("xid.79", "gpu 0000:4c:00", Status.FAIL)


def test_bundle_without_kernel_log_is_skip_not_error():
    (f,) = grade(observe(None), "2025-11-21T04:00:00+00:00")
    assert (f.check, f.status, f.source) == ("xid.kernel_log", Status.SKIP, "kernel-log")
    assert "not collected" in f.message


def test_ignore_list_from_profile_and_host_vars():
    profile = dataclasses.replace(load_profile("h100-sxm5-8x"), settings={"xid": {"ignore": [13]}})
    obs = observe(body("xid/dmesg-T-mixed-faults.txt"))
    got = table(grade(obs, "2025-11-21T03:00:00+00:00", profile=profile, host_vars={"xid_ignore": [999]}))
    assert got[("xid.13", "gpu0")].status is Status.SKIP and "ignored" in got[("xid.13", "gpu0")].message
    assert got[("xid.999", "gpu1")].status is Status.SKIP
    assert got[("xid.74", "gpu6")].status is Status.FAIL


def test_healthy_log_passes():
    (f,) = grade(observe(body("xid/journalctl-k-healthy.txt")), "2025-11-21T04:00:00+00:00")
    assert (f.check, f.status, f.value) == ("xid.events", Status.PASS, 0)


@pytest.mark.parametrize("name", ["dmesg-read-kernel-buffer-failed.txt", "journalctl-insufficient-permissions.txt"])
def test_unreadable_log_is_an_error_not_a_pass(name):
    (f,) = grade(observe(body(f"xid/bad/{name}"), rc=1 if "dmesg" in name else 0), "2025-11-21T04:00:00+00:00")
    assert (f.check, f.status) == ("xid.kernel_log", Status.ERROR) and f.remedy


def test_failed_command_without_output_is_parse_error():
    with pytest.raises(ParseError, match="rc 1"):
        observe("", rc=1)


# --- corpus: every format, concrete values -----------------------------------------------------

def test_629_xid13_and_7_xid43_decode_iso():
    obs = observe(corpus_text("xid/xid13-629lines-xid43-sm-warp-exceptions.txt"), smi=None)
    got = table(grade(obs, "2025-01-21T06:00:00+00:00"))
    assert got[("xid.13", "gpu 0000:38:00")].value == 629 and got[("xid.13", "gpu 0000:38:00")].status is Status.WARN
    assert got[("xid.43", "gpu 0000:38:00")].value == 7
    assert "last 2025-01-21T04:41:44Z" in got[("xid.43", "gpu 0000:38:00")].message


def test_xid74_154_talos_rfc3339():
    obs = observe(corpus_text("xid/xid74-nvlink-fatal-link8-xid45-xid154-reset-required-xid119-a100.txt"), smi=None)
    got = table(grade(obs, "2026-04-23T00:00:00+00:00"))
    assert got[("xid.74", "gpu 0000:48:00")].status is Status.FAIL
    assert got[("xid.154", "gpu 0000:48:00")].status is Status.FAIL
    assert (got[("xid.45", "gpu 0000:48:00")].status, got[("xid.45", "gpu 0000:48:00")].value) == (Status.WARN, 2)


def test_nvlink5_fatal_fails_nonfatal_warns():
    obs = observe(corpus_text("xid/xid144-145-149-nvlink-lines-quoted-in-gpud-prs.txt"), smi=None)
    got = {(f.check, f.component): f.status for f in grade(obs, "2026-01-01T00:00:00+00:00")}
    assert got == {("xid.144", "gpu 0000:01:00"): Status.WARN, ("xid.149", "gpu 0000:00:00"): Status.FAIL,
                   ("xid.149", "gpu 0019:01:00"): Status.FAIL, ("xid.145", "gpu 0018:01:00"): Status.WARN}


def test_journalctl_dbe_incident_with_drain_and_reset():
    obs = observe(corpus_text("xid/xid48-171-63-154-drain-and-reset-rtx-pro-6000-blackwell-journalctl-condensed.txt"),
                  smi_xml(remap={1: ("Yes", "No")}, bus={"3B": "55"}))  # remap pending until the reset
    got = table(grade(obs, "2026-08-10T16:00:00+00:00"))
    assert {k for k in got} == {("xid.48", "gpu1"), ("xid.171", "gpu1"), ("xid.63", "gpu1"), ("xid.154", "gpu1")}
    assert got[("xid.48", "gpu1")].value == 2
    assert "'Drain and Reset'" in got[("xid.154", "gpu1")].message
    assert all(f.status is Status.FAIL for f in got.values())


def test_xid63_remap_pending_from_the_same_nodes_text_report():
    # corpus: the kernel log and the `nvidia-smi -q -d ECC,ROW_REMAPPER -i 52:00.0` of one DGX H100 GPU
    # (Pending Yes); a bundle's text report is read like -q -x, and a one-GPU subset names no index
    log = corpus_text("xid/xid48-63-94-contained-sm-h100-dgx-drv550-dmesg-grep.txt")
    smi = corpus_text("nvidia-smi-q/h100-class-drv550-q-d-ecc-row-remapper-pending-yes-ecc-mode-unknown-error.txt")
    obs = observe(log, smi, smi_id="nvidia-smi-q")
    assert [(g.index, g.pci, g.remap_pending, g.remap_failure) for g in obs.gpus] == [(None, "0000:52:00", True, False)]
    x63 = next(f for f in evaluate_xid(obs, EvalContext(host=Host("gpu001"), profile=load_profile("h100-sxm5-8x"),
                                                        options={"kernel_log_window_h": 24 * 365 * 20},
                                                        now=datetime(2030, 1, 1, tzinfo=timezone.utc)))
               if f.check == "xid.63")
    assert (x63.component, x63.status) == ("gpu 0000:52:00", Status.FAIL)
    assert "row remap pending until the GPU is reset" in x63.message


def test_gpu_lost_without_xid_multiline_and_syslog():
    obs = observe(corpus_text("xid/fallen-off-bus-multiline-no-xid-drv570-open.txt"), smi=None)
    (f,) = grade(obs, "2026-01-01T00:00:00+00:00")  # boot-relative time, no uptime: counted, time unknown
    assert (f.check, f.component, f.status) == ("xid.gpu_lost", "gpu 0000:b3:00", Status.FAIL)
    assert "time unknown" in f.message
    obs = observe(corpus_text("xid/gpu-lost-from-bus-NV_ERR_GPU_IS_LOST-dgx-station-a100.txt"), smi=None)
    (f,) = grade(obs, "2025-02-17T12:00:00+00:00")
    assert (f.check, f.component, f.status, f.value) == ("xid.gpu_lost", "node", Status.FAIL, 3)


def test_raw_dmesg_placed_in_time_by_uptime_header():
    text = "# kernel-log source=dmesg uptime_s=2000.0\n" + \
        corpus_text("xid/fallen-off-bus-multiline-no-xid-drv570-open.txt")
    log = parse_kernel_log(text)
    assert (log.source, log.uptime_s) == ("dmesg", 2000.0)
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    when = resolve_time(log.groups[0].times[0], now, log.uptime_s)
    assert round((now - when).total_seconds(), 3) == round(2000.0 - 1843.308145, 3)


def test_sxid_counts_only_severity_lines():
    log = parse_kernel_log(corpus_text("xid/sxid22013-nvswitch-minion-dlreq-h100-tdx.txt"))
    (g,) = log.groups
    assert (g.kind, g.code, g.device, len(g.times), g.links, g.severities) == \
        ("sxid", 22013, "nvswitch3", 3, (44, 45, 46), ("Non-fatal",))


def test_xid64_and_94_boot_timestamps():
    name = "xid/xid64-all-reserved-rows-remapped-plus-xid94-same-gpu-h100-doctest-lines.txt"
    log = parse_kernel_log(corpus_text(name))
    assert {(g.code, g.pci, g.times) for g in log.groups} == {
        (94, "0000:0f:00", ("boot:2397166.983093",)), (64, "0000:0f:00", ("boot:2397166.923949",))}


XID_FILES = corpus_files("xid")


@pytest.mark.corpus
@pytest.mark.parametrize("path", XID_FILES, ids=[p.name for p in XID_FILES])
def test_conformance_every_xid_corpus_file_yields_events(path: Path):
    log = parse_kernel_log(corpus_text(f"xid/{path.name}"))
    assert log.groups and log.unreadable is None
    findings = grade(observe(corpus_text(f"xid/{path.name}"), smi=None), "2030-01-01T00:00:00+00:00",
                     window_h=24 * 365 * 20)
    assert findings and all(f.status in (Status.WARN, Status.FAIL) for f in findings)


@pytest.mark.corpus
@pytest.mark.parametrize("name", ["dmesg-boot-h100-cx7-mlx5-iso.txt", "kmsg-raw-format-nvswitch-open.txt",
                                  "aer-correctable-data-link-layer-timeout-badtlp-amd-rootport.txt",
                                  "edac-sbridge-ce-memory-read-error-dmesg-T.txt",
                                  "dmesg-pcie-bandwidth-limited-by-gen4-switch-h100.txt"])
def test_conformance_misc_kernel_logs_have_no_gpu_events(name):
    log = parse_kernel_log(corpus_text(f"misc/{name}"))
    assert log.records > 0 and log.groups == () and log.unreadable is None


# --- command and catalog -----------------------------------------------------------------------

def test_kernel_log_command_window_and_fallback():
    cmd = kernel_log_command({"kernel_log_window_h": 2.5})
    assert "journalctl -k --utc --no-pager -o short --since -9000s" in cmd
    assert "dmesg -T 2>/dev/null || dmesg" in cmd and "uptime_s=$up" in cmd
    assert "--since -86400s" in kernel_log_command({})
    with pytest.raises(ValueError):
        kernel_log_command({"kernel_log_window_h": "1; rm -rf /"})


def test_kernel_log_command_runs_in_sh():
    proc = subprocess.run(["sh", "-c", kernel_log_command({"kernel_log_window_h": 1})],
                          capture_output=True, text=True, timeout=60)
    first = proc.stdout.splitlines()[0]
    assert first.startswith("# kernel-log source=") and parse_kernel_log(proc.stdout).source in ("journalctl", "dmesg")


def test_nvidia_smi_q_x_is_collected_once_for_every_reader():
    """xid, fabric and versions read the gpu probe's report: one nvidia-smi -q -x per host, and
    the old per-probe queries are gone (4 nvidia-smi calls in a default sweep, plus dcgm_fields'
    sampler when dcgmi is absent)."""
    readers = [p.name for p in registry.select(None) if "nvidia-smi-q-x" in p.commands({})]
    assert sorted(readers) == ["assets", "fabric", "gpu", "pci", "versions", "xid"]
    commands = plan_commands(registry.select(None), {}, 60.0)
    ids = [c.id for c in commands]
    assert ids.count("nvidia-smi-q-x") == 1
    assert not {"nvidia-smi-gpu-pci", "nvidia-smi-remapped-rows", "nvidia-smi-fabric", "nvidia-smi-versions",
                "nvidia-smi-cuda", "hca-fw"} & set(ids)
    direct = sorted(c.id for c in commands if c.line.startswith("nvidia-smi "))
    assert direct == ["nvidia-smi-nvlink-e", "nvidia-smi-nvlink-s", "nvidia-smi-q-x", "nvidia-smi-topo"]


def test_one_report_is_parsed_once_for_all_readers():
    result = out("nvidia-smi-q-x", smi_xml(remap={2: ("Yes", "No")}))
    before = parse_memo.hits()
    for name in ("gpu", "fabric", "xid", "versions"):
        registry.get(name).parse({"kernel-log": out("kernel-log", body("xid/journalctl-k-healthy.txt")),
                                  "nvidia-smi-q-x": result})
    after = parse_memo.hits()

    def change(name: str) -> tuple[int, int]:  # (misses, hits) since ``before``
        return after[name][1] - before[name][1], after[name][0] - before[name][0]
    assert change("_parse_result") == (1, 3)  # keyed on the result's bytes: decoded once
    assert change("parse_nvidia_smi_output") == (1, 0)


def test_catalog_is_complete_and_follows_policy():
    catalog = load_catalog()
    entries = catalog["xids"]
    for code, e in entries.items():
        assert e["class"] in ("hardware", "software", "application"), code
        assert e["action"] in ("none", "restart app", "reset GPU", "reboot node", "drain and RMA"), code
        assert e["severity"] in ("WARN", "FAIL") and e["mnemonic"] and e["meaning"] and e["remedy"], code
    assert {c for c in (13, 31, 43, 45) if entries[c]["severity"] == "WARN"} == {13, 31, 43, 45}
    hard = (48, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140, *range(144, 151), 154)
    assert {c for c in hard if entries[c]["severity"] == "FAIL"} == set(hard)
    assert entries[79]["action"] == "reboot node" and "docs.nvidia.com/deploy/xid-errors" in catalog["source"]


def test_ignore_list_from_a_site_profile_yaml_and_bad_entries(tmp_path):
    """The documented example: a site profile inheriting a shipped one, plus host vars in any form."""
    (tmp_path / "site-h100.yaml").write_text(
        "name: site-h100\ninherits: h100-sxm5-8x\nsettings:\n  xid:\n    ignore: [13, 43]\n")
    profile = load_profile("site-h100", search=[tmp_path])
    obs = observe(body("xid/dmesg-T-mixed-faults.txt"))
    got = table(grade(obs, "2025-11-21T03:00:00+00:00", profile=profile, host_vars={"xid_ignore": "999, x31"}))
    assert got[("xid.13", "gpu0")].status is Status.SKIP and got[("xid.999", "gpu1")].status is Status.SKIP
    assert got[("xid.74", "gpu6")].status is Status.FAIL
    bad = got[("xid.ignore", "node")]
    assert (bad.status, bad.value) == (Status.WARN, "x31") and "e.g. [13, 43]" in bad.remedy
    single = table(grade(obs, "2025-11-21T03:00:00+00:00", host_vars={"xid": {"ignore": 74}}))
    assert single[("xid.74", "gpu6")].status is Status.SKIP and ("xid.ignore", "node") not in single


def test_contained_xid94_needing_no_reset_is_warn_restart_the_application():
    """Real DGX H100 log (driver 550): Xid 48 DBE, Xid 63 remap, then Xid 94 'Contained: SM (0x1). RST: No, D-RST: No'.
    The driver says no reset and no drain are needed: WARN, restart the app, and the node is not drained."""
    from healthcheck.ops.drain import DrainPolicy, plan_drain
    from healthcheck.store.results import HostResult, RunResults

    obs = observe(corpus_text("xid/xid48-63-94-contained-sm-h100-dgx-drv550-dmesg-grep.txt"), smi=None)
    (g94,) = [g for g in obs.log.groups if g.code == 94]
    assert g94.resets == ("RST: No, D-RST: No",)
    findings = evaluate_xid(obs, EvalContext(host=Host("gpu001"), profile=load_profile("h100-sxm5-8x"),
                                             options={"kernel_log_window_h": 24 * 365 * 20},
                                             now=datetime(2030, 1, 1, tzinfo=timezone.utc)))
    x94 = next(f for f in findings if f.check == "xid.94")
    assert x94.status is Status.WARN
    assert "; driver says RST: No, D-RST: No: contained, no reset needed x1 in the last" in x94.message
    assert "action: restart app." in x94.message
    assert x94.remedy.startswith("The driver contained the error and needs no GPU reset")
    assert next(f for f in findings if f.check == "xid.48").status is Status.FAIL  # no fields: the catalog decides
    plan = plan_drain(RunResults(run={"id": "r"}, hosts={"gpu001": HostResult("gpu001", findings=[x94])}),
                      DrainPolicy())
    assert not plan.decisions


@pytest.mark.parametrize(("fields", "status", "action"), [
    ("RST: Yes, D-RST: No", Status.FAIL, "reset GPU"),
    ("RST: No, D-RST: Yes", Status.FAIL, "drain and reset"),
])
def test_reset_fields_that_ask_for_a_reset_or_drain_fail(fields: str, status: Status, action: str):
    """The same real Xid 94 line with the fields set the other way (the driver's layout unchanged)."""
    log = corpus_text("xid/xid48-63-94-contained-sm-h100-dgx-drv550-dmesg-grep.txt")
    assert "RST: No, D-RST: No" in log
    obs = observe(log.replace("RST: No, D-RST: No", fields), smi=None)
    x94 = next(f for f in evaluate_xid(obs, EvalContext(
        host=Host("gpu001"), profile=load_profile("h100-sxm5-8x"), options={"kernel_log_window_h": 24 * 365 * 20},
        now=datetime(2030, 1, 1, tzinfo=timezone.utc))) if f.check == "xid.94")
    assert x94.status is status and f"action: {action}" in x94.message and fields in x94.message


def test_catalog_reads_as_safe_load_reads_it():
    """load_catalog uses libyaml's safe loader where available: the same catalog as yaml.safe_load."""
    import yaml

    from healthcheck.probes.xid import CATALOG_PATH
    assert load_catalog() == yaml.safe_load(CATALOG_PATH.read_text())


def test_gpu_addresses_memoized_are_what_each_gpu_gives():
    """The memoized address of each GPU is the one built from its own bus id and remap state: the same
    report twice, then with a GPU's remap state and bus ids changed, never a stale entry."""
    from healthcheck.probes.gpu import parse_gpu_sources
    from healthcheck.probes.kernel_log import normalize_pci
    from healthcheck.probes.xid import GpuAddress, gpu_addresses

    for smi in (HEALTHY_XML, HEALTHY_XML, smi_xml({3: ("Yes", "No")}), smi_xml(bus={"18": "19", "2A": "2b"})):
        gpus = parse_gpu_sources({"nvidia-smi-q-x": out("nvidia-smi-q-x", smi)})
        expected = tuple(GpuAddress(g.index, normalize_pci(g.bus_id), g.remap.pending if g.remap else None,
                                    g.remap.failure if g.remap else None) for g in gpus.gpus)
        assert gpu_addresses(gpus) == expected
