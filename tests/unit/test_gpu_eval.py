"""GPU grading: our healthy/faulty fixtures, the corpus's faulty captures, and every corpus file."""

from __future__ import annotations

import dataclasses
import json

import pytest

from healthcheck.core.model import Host, Status
from healthcheck.core.profiles import EMPTY_PROFILE, Expectation, Profile, load_profile
from healthcheck.core.spec import EvalContext
from healthcheck.probes.gpu import parse_nvidia_smi_output
from healthcheck.probes.gpu_eval import evaluate_gpu
from healthcheck.probes.gpu_model import GpuObservation, GpuObservations
from healthcheck.store.jsoncodec import to_jsonable
from tests.conftest import corpus_files, corpus_text, fixture_text

H100 = load_profile("h100-sxm5-8x")


def _ctx(profile: Profile = H100) -> EvalContext:
    return EvalContext(host=Host("gpu001"), profile=profile)


def _grade(command_id: str, text: str, profile: Profile = H100, rc: int = 0):
    return evaluate_gpu(parse_nvidia_smi_output(command_id, text, rc), _ctx(profile))


def _bad(findings) -> set[tuple[str, str, str]]:
    return {(f.check, f.component, f.status.value) for f in findings if f.status not in (Status.PASS, Status.SKIP)}


def test_healthy_h100_fixture_passes_every_check():
    findings = _grade("nvidia-smi-q-x", fixture_text("nvidia-smi-xml/h100-8x-healthy.xml"))
    assert _bad(findings) == set()
    by_check = {f.check: f for f in findings}
    assert by_check["gpu.count"].value == 8
    assert by_check["gpu.temp"].message == ("all 8 GPUs: temp 29-34 C, within T.Limit reading > -2 C (slowdown)")
    assert by_check["gpu.pcie.gen"].status is Status.SKIP  # idle: generation not graded
    assert all(f.source == "nvidia-smi-q-x" for f in findings)


def test_faulty_h100_fixture_names_each_bad_gpu():
    findings = _grade("nvidia-smi-q-x", fixture_text("nvidia-smi-xml/h100-8x-faulty.xml"))
    assert _bad(findings) == {("gpu.row_remap.pending", "gpu2", "FAIL"), ("gpu.pcie.width", "gpu5", "FAIL"),
                              ("gpu.clock_events", "gpu6", "FAIL")}
    remap = next(f for f in findings if f.check == "gpu.row_remap.pending" and f.component == "gpu2")
    assert remap.message.startswith("gpu2 (00000000:4C:00.0): row remap pending: Yes (0 correctable, 1 uncorr")
    assert "reset the GPU" in remap.remedy and remap.value == "Yes" and remap.expected == "No"
    width = next(f for f in findings if f.check == "gpu.pcie.width" and f.component == "gpu5")
    assert (width.value, width.expected, width.unit) == (8, "== 16 lanes", "lanes")
    clocks = next(f for f in findings if f.check == "gpu.clock_events" and f.component == "gpu6")
    assert clocks.value == "hw_slowdown, hw_power_brake_slowdown" and "power-brake" in clocks.remedy
    passing = next(f for f in findings if f.check == "gpu.row_remap.pending" and f.status is Status.PASS)
    assert passing.message.startswith("gpu0,gpu1,gpu3,gpu4,gpu5,gpu6,gpu7:")


def test_without_profile_widths_still_fail_and_thresholds_skip_once():
    findings = _grade("nvidia-smi-q-x", fixture_text("nvidia-smi-xml/h100-8x-faulty.xml"), EMPTY_PROFILE)
    assert _bad(findings) == {("gpu.row_remap.pending", "gpu2", "FAIL"), ("gpu.pcie.width", "gpu5", "FAIL"),
                              ("gpu.clock_events", "gpu6", "FAIL")}
    width = next(f for f in findings if f.check == "gpu.pcie.width" and f.status is Status.FAIL)
    assert width.message == "gpu5 (00000000:BB:00.0): PCIe link downtrained to x8 of x16"
    skips = [f for f in findings if f.check == "gpu.memory_mib"]
    assert [(f.status, f.component, f.message) for f in skips] == [
        (Status.SKIP, "node", "no expectation for gpu.memory_mib in profile (none)")]


@pytest.mark.parametrize("relpath, expected", [
    ("nvidia-smi-q/a10-drv535-remap-pending-uncorr4.txt", ("gpu.row_remap.pending", "gpu0", "FAIL")),
    ("nvidia-smi-q/a100-sxm4-80gb-remap-pending-xid63-excerpt.txt", ("gpu.row_remap.pending", "gpu0", "FAIL")),
    ("nvidia-smi-q/rtx-pro-6000-blackwell-q-d-row-remapper-pending-yes-uncorr1-max511-high1.txt",
     ("gpu.row_remap.pending", "gpu0", "FAIL")),
    ("nvidia-smi-q/h100-class-drv550-q-d-ecc-row-remapper-pending-yes-ecc-mode-unknown-error.txt",
     ("gpu.unreadable", "gpu0", "FAIL")),
    ("nvidia-smi-q/ecc-sram-uncorrectable-volatile1-aggregate5-snippet.txt",
     ("gpu.ecc.sram_uncorrectable", "gpu0", "FAIL")),
    ("nvidia-smi-q/retired-pages-pending-blacklist-yes-snippet.txt", ("gpu.retired_pages.pending", "gpu0", "FAIL")),
    # a flag is not a fault until the clocks agree: the snippet lacks the SM maximum and utilization (WARN);
    # 535.161: hw_slowdown with SM at 86 of 1980 MHz (FAIL); 535.183: flags with SM at 1980 of 1980 MHz (WARN)
    ("nvidia-smi-q/v100-sxm2-32gb-dell-c4130-hw-power-brake-slowdown-active-382mhz-snippet.txt",
     ("gpu.clock_events", "gpu0", "WARN")),
    ("nvidia-smi-q/h100-8gpu-drv535.161-gpud.txt", ("gpu.clock_events", "gpu0", "FAIL")),
    ("nvidia-smi-q/h100-8gpu-drv535.183-gpud.txt", ("gpu.clock_events", "gpu2", "WARN")),
    ("nvidia-smi/rtx-geforce-drv525-fan-ERR.txt", ("gpu.fan", "gpu0", "FAIL")),
    ("nvidia-smi/h100-8gpu-drv560-persistence-off-fabricmanager-down.txt",
     ("gpu.persistence_mode", "gpu3", "WARN")),
    ("nvidia-smi/unable-to-determine-device-handle-unknown-error-after-xid79.txt",
     ("gpu.lost", "gpu 00000000:A1:00.0", "FAIL")),
    ("nvidia-smi/unable-to-determine-device-handle-unknown-error-after-xid79.txt", ("gpu.count", "node", "FAIL")),
])
def test_corpus_faults_produce_the_right_findings(relpath, expected):
    command_id = "nvidia-smi-q" if relpath.startswith("nvidia-smi-q/") else "nvidia-smi"
    assert expected in _bad(_grade(command_id, corpus_text(relpath)))


def test_page_retirement_table_full_flags_the_four_pending_gpus():
    text = corpus_text("nvidia-smi-q/azure-8gpu-page-retirement-table-full-UPSTREAM-EDITED.txt")
    profile = Profile("v100", expectations={"gpu.retired_pages.count": Expectation(
        key="gpu.retired_pages.count", op="lt", value=63, unit="pages", source="test: DCGM limit 63")})
    bad = _bad(_grade("nvidia-smi-q", text, profile))
    assert {c for (k, c, s) in bad if k == "gpu.retired_pages.pending"} == {"gpu1", "gpu3", "gpu5", "gpu7"}
    assert {c for (k, c, s) in bad if k == "gpu.retired_pages.count"} == {"gpu0", "gpu1", "gpu5", "gpu7"}


def test_tlimit_margin_and_absolute_limits():
    base = GpuObservation(index=3, bus_id="00000000:5D:00.0", temp_c=90, tlimit_c=-3, slowdown_tlimit_c=-2,
                          shutdown_tlimit_c=-8, max_operating_tlimit_c=0)
    obs = GpuObservations(source="nvidia-smi-q-x", gpus=(base,), count=1)
    temp = next(f for f in evaluate_gpu(obs, _ctx(EMPTY_PROFILE)) if f.check == "gpu.temp")
    assert (temp.status, temp.component) == (Status.FAIL, "gpu3")
    assert temp.message == "gpu3 (00000000:5D:00.0): 90 C, 1 C past slowdown (T.Limit), 3 C past max operating"
    near = dataclasses.replace(base, temp_c=88, tlimit_c=-1)   # past max operating, 1 C short of slowdown
    temp = next(f for f in evaluate_gpu(GpuObservations(source="x", gpus=(near,), count=1), _ctx(EMPTY_PROFILE))
                if f.check == "gpu.temp")
    assert (temp.status, temp.value, temp.expected) == (Status.WARN, 88, "T.Limit reading > -2 C (slowdown)")
    assert temp.message.endswith("88 C, 1 C below slowdown (T.Limit), 1 C past max operating")
    only_shutdown = GpuObservation(index=0, temp_c=93, shutdown_c=92)   # no slowdown limit reported
    temp = next(f for f in evaluate_gpu(GpuObservations(source="x", gpus=(only_shutdown,), count=1),
                                        _ctx(EMPTY_PROFILE)) if f.check == "gpu.temp")
    assert (temp.status, temp.expected) == (Status.FAIL, "< 92 C (shutdown)")
    assert temp.message == "gpu0: 93 C, 1 C past shutdown (absolute limits)"
    warm = GpuObservation(index=0, temp_c=86, slowdown_c=89, shutdown_c=92, max_operating_c=85)
    temp = next(f for f in evaluate_gpu(GpuObservations(source="x", gpus=(warm,), count=1), _ctx(EMPTY_PROFILE))
                if f.check == "gpu.temp")
    assert (temp.status, temp.expected) == (Status.WARN, "< 89 C (slowdown, max operating 85 C)")


def test_driver_not_loaded_is_a_fail_with_a_remedy():
    findings = _grade("nvidia-smi-q-x", fixture_text("nvidia-smi-errors/driver-not-loaded.txt"), rc=9)
    driver = next(f for f in findings if f.check == "gpu.driver")
    assert driver.status is Status.FAIL and "lsmod" in driver.remedy
    assert next(f for f in findings if f.check == "gpu.count").value == 0


def test_inforom_warning_and_report_both_graded():
    findings = _grade("nvidia-smi-q-x", fixture_text("nvidia-smi-errors/inforom-warning-before-xml.xml"))
    inforom = next(f for f in findings if f.check == "gpu.inforom")
    assert (inforom.status, inforom.component) == (Status.FAIL, "gpu0")
    assert next(f for f in findings if f.check == "gpu.temp").status is Status.PASS


def test_pending_mode_changes_and_recovery_action_warn_or_fail():
    gpu = GpuObservation(index=1, ecc_current="Disabled", ecc_pending="Enabled", recovery_action="Reset",
                         reset_required=True, fabric_state="In Progress", fabric_status="N/A")
    findings = evaluate_gpu(GpuObservations(source="nvml", gpus=(gpu,), count=1), _ctx(EMPTY_PROFILE))
    assert {("gpu.ecc_mode.pending", "gpu1", "WARN"), ("gpu.recovery_action", "gpu1", "FAIL"),
            ("gpu.reset_required", "gpu1", "FAIL")} <= _bad(findings)
    assert not [f for f in findings if "fabric" in f.check]  # graded once, by the fabric probe


def _all_corpus():
    for folder, command_id in (("nvidia-smi-q", "nvidia-smi-q"), ("nvidia-smi-xml", "nvidia-smi-q-x"),
                               ("nvidia-smi", "nvidia-smi")):
        for path in corpus_files(folder):
            yield pytest.param(path, command_id, id=f"{folder}/{path.name}")


@pytest.mark.parametrize("path, command_id", list(_all_corpus()))
def test_conformance_every_corpus_file_grades_with_complete_findings(path, command_id):
    text = path.read_text(errors="replace").split("\n", 1)[1]
    try:
        obs = parse_nvidia_smi_output(command_id, text, 0)
    except Exception as exc:  # only the CSV/reset files of nvidia-smi/, see test_nvidia_smi_errors
        assert command_id == "nvidia-smi" and type(exc).__name__ == "ParseError"
        return
    json.dumps(to_jsonable(obs))
    for profile in (H100, EMPTY_PROFILE):
        for f in evaluate_gpu(obs, _ctx(profile)):
            assert f.check.startswith("gpu.") and f.message and f.source == command_id
            if f.status in (Status.FAIL, Status.WARN):
                assert f.remedy and f.component, f


def test_pinned_driver_cuda_vbios_give_one_fail_each_across_gpu_and_versions_probes():
    """The gpu probe only records versions; the versions probe grades them (also legacy gpu.* pins)."""
    from dataclasses import replace as dc_replace

    from healthcheck.core.model import CommandResult
    from healthcheck.probes.versions import evaluate_versions, parse_versions

    text = fixture_text("nvidia-smi-xml/h100-8x-healthy.xml")   # 535.183.01, CUDA 12.2, 96.00.99.00.01
    pins = {"gpu.driver_version": ("ge", "550.90.07"), "version.cuda": ("ge", "12.4"),
            "gpu.vbios": ("eq", "96.00.A1.00.01")}
    profile = dc_replace(H100, expectations={**H100.expectations, **{
        k: Expectation(key=k, op=op, value=v, source="site pin") for k, (op, v) in pins.items()}})
    gpu = _grade("nvidia-smi-q-x", text, profile)
    assert not [f for f in gpu if "version" in f.check or "vbios" in f.check]
    result = CommandResult(host="gpu001", command_id="nvidia-smi-q-x", stdout=text.encode(), rc=0)
    versions = evaluate_versions(parse_versions({"nvidia-smi-q-x": result}), _ctx(profile))
    failed = [(f.check, f.component) for f in gpu + versions if f.status is Status.FAIL]
    assert sorted(failed) == sorted([("version.driver", "node"), ("version.cuda", "node")]
                                    + [("version.vbios", f"gpu{i}") for i in range(8)])
    driver = next(f for f in versions if f.check == "version.driver")
    assert driver.value == "535.183.01" and "site pin" in driver.message


def test_pcie_replays_graded_by_growth_not_the_since_reset_counter():
    """Healthy HGX H100s (gpud, driver 535) carry 58-120 replays since reset: no WARN on a first run."""
    text = corpus_text("nvidia-smi-q/h100-8gpu-drv535.183-gpud.txt")
    first = [f for f in _grade("nvidia-smi-q", text) if f.check == "gpu.pcie.replays"]
    assert [(f.status, f.component, f.value) for f in first] == [(Status.SKIP, "node", "58-120")]
    assert first[0].message == ("all 8 GPUs: PCIe replay counter since driver load (value) not graded: no "
                                "previous run to measure growth against")
    obs = parse_nvidia_smi_output("nvidia-smi-q", text, 0)
    before = json.loads(json.dumps(to_jsonable(obs)))
    for g in before["gpus"]:   # 120, 111, 58, ... now; 3 fewer in the previous run except:
        g["pcie_replays"] = {"00000000:53:00.0": 10, "00000000:64:00.0": 611}.get(g["bus_id"], g["pcie_replays"] - 3)
    ctx = EvalContext(host=Host("gpu001"), profile=H100, previous={"gpu": before})
    replays = [f for f in evaluate_gpu(obs, ctx) if f.check == "gpu.pcie.replays"]
    bad = {f.component: f for f in replays if f.status is not Status.PASS}
    assert {c: (f.status, f.value, f.expected) for c, f in bad.items()} == {
        "gpu0": (Status.WARN, 110, "<= 80 replays"), "gpu1": (Status.WARN, 111, "<= 80 replays")}
    assert "10 -> 120 since the previous run" in bad["gpu0"].message
    assert "counter reset since the previous run (611 before)" in bad["gpu1"].message
    (ok,) = [f for f in replays if f.status is Status.PASS]
    assert (ok.value, ok.message) == (3, "gpu2,gpu3,gpu4,gpu5,gpu6,gpu7: PCIe replay growth since the previous "
                                         "run 3 replays, within <= 80 replays")
    assert "AER" in bad["gpu0"].remedy and bad["gpu0"].message.startswith("gpu0 (00000000:53:00.0): PCIe replay")
    passing = [f for f in replays if f.status is Status.PASS]
    assert len(passing) == 1 and passing[0].value in (3, "3")


def test_nightly_history_leaves_pcie_replay_growth_to_the_gpu_probe():
    """One grown replay counter gives one finding (gpu.pcie.replays), not a second history WARN."""
    from healthcheck.run.regression import Measurement, growth_findings

    ms = [Measurement("gpu001", "errors", "counter", "gpu.pcie.replays", "gpu0", 200.0),
          Measurement("gpu001", "errors", "counter", "gpu.row_remap.correctable", "gpu0", 3.0)]
    previous = {("gpu001", "gpu.pcie.replays", "gpu0"): (10.0, "night1"),
                ("gpu001", "gpu.row_remap.correctable", "gpu0"): (1.0, "night1")}
    assert [(f.check, f.message) for f in growth_findings(ms, previous)] == [
        ("history.counter.growth", "gpu.row_remap.correctable gpu0 grew by 2 since run night1 (was 1, now 3)")]


def test_slowdown_flags_at_full_clock_are_warn_and_the_finding_states_flag_and_clocks():
    """Real 8x H100 (driver 535.183): GPU 2 idle (0 %, 39 C) with its SM clock at 1980 of 1980 MHz and
    hw_power_brake/sw_thermal flags set, one nvidia-smi sample. NVML: these flags are also reported during
    P-state or clock changes, so the flag alone is not a fault."""
    findings = _grade("nvidia-smi-q", corpus_text("nvidia-smi-q/h100-8gpu-drv535.183-gpud.txt"))
    [gpu2] = [f for f in findings if f.check == "gpu.clock_events" and f.component == "gpu2"]
    assert gpu2.status is Status.WARN
    assert gpu2.message.endswith("active clock event reasons: sw_power_cap, hw_power_brake_slowdown, "
                                 "sw_thermal_slowdown; SM 1980 of 1980 MHz (100%: clocks not reduced), "
                                 "0% utilization")
    assert "the flag alone is not a fault" in gpu2.remedy
    # the same flags with the clocks cut (the 535.161 capture: SM 86 of 1980 MHz) are a FAIL
    cut = _grade("nvidia-smi-q", corpus_text("nvidia-smi-q/h100-8gpu-drv535.161-gpud.txt"))
    statuses = {f.status for f in cut if f.check == "gpu.clock_events"}
    assert statuses == {Status.FAIL}
    assert "SM 86 of 1980 MHz (4%: clocks reduced)" in next(f for f in cut if f.check == "gpu.clock_events").message


def test_a_gpu_passing_alone_keeps_its_full_finding_and_eight_fold_into_one():
    obs = parse_nvidia_smi_output("nvidia-smi-q-x", fixture_text("nvidia-smi-xml/h100-8x-healthy.xml"), 0)
    one = {f.check: f for f in evaluate_gpu(dataclasses.replace(obs, gpus=obs.gpus[:1], count=1), _ctx())}
    assert one["gpu.ecc.dram_uncorrectable"].to_json() == {
        "host": "gpu001", "check": "gpu.ecc.dram_uncorrectable", "status": "PASS", "component": "gpu0",
        "message": "gpu0 (00000000:19:00.0): gpu ecc dram uncorrectable 0 errors, within <= 20000000 errors "
                   "(volatile 0, aggregate 0)",
        "value": 0, "expected": "<= 20000000 errors", "unit": "errors", "remedy": None, "source": "nvidia-smi-q-x"}
    assert (one["gpu.reset_required"].component, one["gpu.reset_required"].message) == (
        "gpu0", "gpu0 (00000000:19:00.0): no reset required")
    eight = [f for f in evaluate_gpu(obs, _ctx()) if f.check == "gpu.ecc.dram_uncorrectable"]
    assert [(f.component, f.message) for f in eight] == [
        ("node", "all 8 GPUs: ecc dram uncorrectable 0 errors, within <= 20000000 errors")]
