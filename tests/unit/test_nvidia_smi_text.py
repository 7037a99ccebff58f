"""Text nvidia-smi -q parser: every corpus layout (drivers 510-610, -d subsets, excerpts, MIG)."""

from __future__ import annotations

import pytest

from healthcheck.core.spec import ParseError
from healthcheck.probes.gpu_model import observations_from_log
from healthcheck.probes.nvidia_smi_text import parse_nvidia_smi_q
from healthcheck.probes.nvidia_smi_xml import parse_nvidia_smi_xml
from tests.conftest import corpus_files, corpus_text, fixture_text


def _obs(text: str):
    return observations_from_log(parse_nvidia_smi_q(text), "nvidia-smi-q")


@pytest.mark.parametrize("path", corpus_files("nvidia-smi-q"), ids=lambda p: p.name)
def test_conformance_every_corpus_text_parses(path):
    obs = _obs(path.read_text(errors="replace").split("\n", 1)[1])
    assert obs.gpus
    assert obs.count is None or obs.count >= len(obs.gpus)


def test_h100_8gpu_drv535_full_report():
    obs = _obs(corpus_text("nvidia-smi-q/h100-8gpu-drv535.161-gpud.txt"))
    assert (obs.driver_version, obs.cuda_version, obs.count, obs.partial) == ("535.161.08", "12.2", 8, False)
    g = obs.gpus[6]
    assert (g.bus_id, g.name, g.pcie_replays) == ("00000000:CB:00.0", "NVIDIA H100 80GB HBM3", 82)
    assert (g.fabric_state, g.fabric_status) == ("Completed", "Success")
    assert g.clock_events == ("hw_slowdown", "hw_power_brake_slowdown")  # nested under "HW Slowdown"
    assert (g.sm_clock_mhz, g.sm_clock_max_mhz) == (86, 1980)
    assert (g.tlimit_c, g.slowdown_tlimit_c, g.shutdown_tlimit_c, g.max_operating_tlimit_c) == (55, -2, -8, 0)
    assert g.remap.banks_max == 2560 and g.remap.pending is False


def test_h100_drv590_under_load():
    g = _obs(corpus_text("nvidia-smi-q/h100-80gb-hbm3-drv590-load.txt")).gpus[0]
    assert (g.utilization_pct, g.pcie_gen_current, g.pcie_gen_max) == (100, 5, 5)
    assert (g.temp_c, g.tlimit_c, g.shutdown_tlimit_c, g.slowdown_tlimit_c) == (59, 26, -8, -2)
    assert (g.memory_temp_c, g.memory_max_operating_tlimit_c) == (55, 0)
    assert (g.power_draw_w, g.power_limit_w) == (588.39, 700)  # "Instantaneous Power Draw" first
    assert (g.ecc_aggregate.sram_uncorrectable, g.sram_threshold_exceeded) == (0, False)
    assert (g.recovery_action, g.module_id) == ("None", 7)


def test_h800_drv525_throttle_naming_and_absolute_thresholds():
    g = _obs(corpus_text("nvidia-smi-q/h800-gpu0-drv525-fabric-completed.txt")).gpus[0]
    assert g.clock_events == ("gpu_idle",)
    assert (g.shutdown_c, g.slowdown_c, g.max_operating_c, g.tlimit_c) == (92, 89, 87, 51)
    assert (g.power_draw_w, g.power_limit_w) == (74.71, 700)  # pre-535 "Power Readings"
    assert g.ecc_current == "Disabled"  # "Ecc Mode" label on 525


def test_a10_remap_pending():
    g = _obs(corpus_text("nvidia-smi-q/a10-drv535-remap-pending-uncorr4.txt")).gpus[0]
    assert (g.remap.uncorrectable, g.remap.pending, g.remap.failure, g.remap.banks_max) == (4, True, False, 192)
    assert (g.reset_required, g.drain_and_reset_recommended) == (False, None)


def test_ecc_rowremapper_subset_with_unknown_error_and_annotation():
    obs = _obs(corpus_text(
        "nvidia-smi-q/h100-class-drv550-q-d-ecc-row-remapper-pending-yes-ecc-mode-unknown-error.txt"))
    assert (obs.count, obs.partial, len(obs.gpus)) == (8, True, 1)  # "-i 52:00.0": 8 attached
    g = obs.gpus[0]
    assert g.remap.pending is True  # "Yes                      <===" (author annotation)
    assert (g.remap.banks_max, g.remap.banks_high) == (2559, 1)
    assert g.ecc_current is None and g.unreadable == ("ecc_mode/current_ecc", "ecc_mode/pending_ecc")


def test_excerpts_without_gpu_header_are_one_anonymous_gpu():
    sram = _obs(corpus_text("nvidia-smi-q/ecc-sram-uncorrectable-volatile1-aggregate5-snippet.txt"))
    assert (sram.count, sram.gpus[0].bus_id) == (None, None)
    assert (sram.gpus[0].ecc_volatile.sram_uncorrectable, sram.gpus[0].ecc_aggregate.sram_uncorrectable) == (1, 5)
    assert sram.gpus[0].ecc_aggregate.dram_uncorrectable is None  # the snippet is cut before it
    retired = _obs(corpus_text("nvidia-smi-q/retired-pages-pending-blacklist-yes-snippet.txt")).gpus[0]
    assert (retired.retired_sbe, retired.retired_dbe, retired.retired_pending) == (2, 0, True)
    v100 = _obs(corpus_text(
        "nvidia-smi-q/v100-sxm2-32gb-dell-c4130-hw-power-brake-slowdown-active-382mhz-snippet.txt")).gpus[0]
    assert v100.clock_events == ("hw_slowdown", "hw_power_brake_slowdown") and v100.sm_clock_mhz == 382


def test_page_retirement_subset_8_gpus():
    obs = _obs(corpus_text("nvidia-smi-q/azure-8gpu-page-retirement-table-full-UPSTREAM-EDITED.txt"))
    assert obs.count == 8 and obs.gpus[1].bus_id == "00000002:00:00.0"
    assert [(g.retired_sbe, g.retired_dbe, g.retired_pending) for g in obs.gpus][:2] == [(60, 5, False),
                                                                                        (2, 61, True)]


def test_mig_devices_and_hidden_remapper():
    g = _obs(corpus_text("nvidia-smi-q/h100-mig-enabled-drv590-load.txt")).gpus[0]
    assert (g.mig_current, g.mig_devices, g.remap) == ("Enabled", 4, None)


def test_driver_610_deprecated_version_fields():
    obs = _obs(corpus_text("nvidia-smi-q/rtx2080super-drv610-idle-newformat.txt"))
    assert (obs.driver_version, obs.cuda_version) == ("610.57.04", "13.3")


def test_titan_v_pre_ampere_remapped_rows_na():
    g = _obs(corpus_text("nvidia-smi-q/titanv-drv560-gpud.txt")).gpus[0]
    assert g.remap is None and (g.slowdown_c, g.shutdown_c) == (97, 100)


def test_text_and_xml_of_the_same_fields_agree():
    """The same kind of GPU through both parsers gives the same observation fields."""
    xml = observations_from_log(parse_nvidia_smi_xml(fixture_text("nvidia-smi-xml/h100-8x-healthy.xml")),
                                "x").gpus[0]
    text = _obs(corpus_text("nvidia-smi-q/h100-8gpu-drv535.183-gpud.txt")).gpus[0]
    for field in ("name", "persistence_mode", "mig_current", "ecc_current", "memory_total_mib",
                  "pcie_gen_max", "pcie_width_max", "power_limit_w", "slowdown_tlimit_c", "fabric_state"):
        assert getattr(xml, field) == getattr(text, field), field


def test_not_nvidia_smi_output_raises():
    with pytest.raises(ParseError, match="no GPU section"):
        parse_nvidia_smi_q(fixture_text("nvidia-smi-q/bad/no-gpu-section.txt"))
