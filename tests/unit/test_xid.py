"""probes/xid.py and probes/kernel_log.py: Xid / SXid / GPU-lost events over a window."""

from __future__ import annotations

import dataclasses
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest

from healthcheck.model import CommandResult, Host, Status
from healthcheck.profiles import load_profile
from healthcheck.spec import EvalContext, ParseError
from probes.kernel_log import parse_kernel_log, resolve_time
from probes.xid import evaluate_xid, kernel_log_command, load_catalog, parse_xid
from tests.conftest import corpus_files, corpus_text, fixture_text

PCI_MAP = "xid/nvidia-smi-gpu-pci-8gpu.txt"


def body(rel: str) -> str:
    return fixture_text(rel).split("\n", 1)[1]


def out(cid: str, text: str, rc: int = 0) -> CommandResult:
    return CommandResult(host="gpu001", command_id=cid, stdout=text.encode(), rc=rc)


def observe(log: str, pci: str | None = body(PCI_MAP), remap: str | None = None, rc: int = 0):
    outputs = {"kernel-log": out("kernel-log", log, rc)}
    if pci is not None:
        outputs["nvidia-smi-gpu-pci"] = out("nvidia-smi-gpu-pci", pci)
    if remap is not None:
        outputs["nvidia-smi-remapped-rows"] = out("nvidia-smi-remapped-rows", remap)
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
    obs = observe(body("xid/dmesg-T-mixed-faults.txt"), remap=body("xid/nvidia-smi-remapped-rows-gpu5-pending.txt"))
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
    applied = body("xid/nvidia-smi-remapped-rows-gpu5-pending.txt").replace("Yes, No", "No, No")
    x63 = table(grade(observe(log, remap=applied), "2025-11-21T03:00:00+00:00"))[("xid.63", "gpu5")]
    assert x63.status is Status.WARN and "already applied" in x63.message
    failed = body("xid/nvidia-smi-remapped-rows-gpu5-pending.txt").replace("Yes, No", "No, Yes")
    x63 = table(grade(observe(log, remap=failed), "2025-11-21T03:00:00+00:00"))[("xid.63", "gpu5")]
    assert x63.status is Status.FAIL and "action: drain and RMA" in x63.message


def test_without_pci_map_components_name_the_pci_address():
    got = table(grade(observe(body("xid/journalctl-k-xid79-gpu2.txt"), pci=None), "2025-11-21T04:00:00+00:00"))
    assert ("xid.79", "gpu 0000:4c:00") in got


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
    obs = observe(corpus_text("xid/xid13-629lines-xid43-sm-warp-exceptions.txt"), pci=None)
    got = table(grade(obs, "2025-01-21T06:00:00+00:00"))
    assert got[("xid.13", "gpu 0000:38:00")].value == 629 and got[("xid.13", "gpu 0000:38:00")].status is Status.WARN
    assert got[("xid.43", "gpu 0000:38:00")].value == 7
    assert "last 2025-01-21T04:41:44Z" in got[("xid.43", "gpu 0000:38:00")].message


def test_xid74_154_talos_rfc3339():
    obs = observe(corpus_text("xid/xid74-nvlink-fatal-link8-xid45-xid154-reset-required-xid119-a100.txt"), pci=None)
    got = table(grade(obs, "2026-04-23T00:00:00+00:00"))
    assert got[("xid.74", "gpu 0000:48:00")].status is Status.FAIL
    assert got[("xid.154", "gpu 0000:48:00")].status is Status.FAIL
    assert (got[("xid.45", "gpu 0000:48:00")].status, got[("xid.45", "gpu 0000:48:00")].value) == (Status.WARN, 2)


def test_nvlink5_fatal_fails_nonfatal_warns():
    obs = observe(corpus_text("xid/xid144-145-149-nvlink-lines-quoted-in-gpud-prs.txt"), pci=None)
    got = {(f.check, f.component): f.status for f in grade(obs, "2026-01-01T00:00:00+00:00")}
    assert got == {("xid.144", "gpu 0000:01:00"): Status.WARN, ("xid.149", "gpu 0000:00:00"): Status.FAIL,
                   ("xid.149", "gpu 0019:01:00"): Status.FAIL, ("xid.145", "gpu 0018:01:00"): Status.WARN}


def test_journalctl_dbe_incident_with_drain_and_reset():
    obs = observe(corpus_text("xid/xid48-171-63-154-drain-and-reset-rtx-pro-6000-blackwell-journalctl-condensed.txt"),
                  pci="1, 00000000:55:00.0, GPU-455e672a-...\n")
    got = table(grade(obs, "2026-08-10T16:00:00+00:00"))
    assert {k for k in got} == {("xid.48", "gpu1"), ("xid.171", "gpu1"), ("xid.63", "gpu1"), ("xid.154", "gpu1")}
    assert got[("xid.48", "gpu1")].value == 2
    assert "'Drain and Reset'" in got[("xid.154", "gpu1")].message
    assert all(f.status is Status.FAIL for f in got.values())


def test_gpu_lost_without_xid_multiline_and_syslog():
    obs = observe(corpus_text("xid/fallen-off-bus-multiline-no-xid-drv570-open.txt"), pci=None)
    (f,) = grade(obs, "2026-01-01T00:00:00+00:00")  # boot-relative time, no uptime: counted, time unknown
    assert (f.check, f.component, f.status) == ("xid.gpu_lost", "gpu 0000:b3:00", Status.FAIL)
    assert "time unknown" in f.message
    obs = observe(corpus_text("xid/gpu-lost-from-bus-NV_ERR_GPU_IS_LOST-dgx-station-a100.txt"), pci=None)
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
    findings = grade(observe(corpus_text(f"xid/{path.name}"), pci=None), "2030-01-01T00:00:00+00:00",
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
    assert entries[79]["action"] == "reboot node" and "hardware-expectations.md section 4" in catalog["source"]
