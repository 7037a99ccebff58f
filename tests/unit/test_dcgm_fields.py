"""dcgm_fields probe: dcgmi dmon / nvidia-smi dmon / --query-gpu parsers on the corpus and our fixtures,
the sampler command, and at-rest grading against the profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from healthcheck import probes
from healthcheck.core.model import CommandResult, Host, Status
from healthcheck.core.profiles import EMPTY_PROFILE, Profile, load_profile
from healthcheck.core.spec import EvalContext, ParseError
from healthcheck.probes.dcgm_fields import evaluate_dcgm_fields, field_ids, parse_dcgm_fields, render_commands
from healthcheck.probes.dmon_parse import (
    DEFAULT_FIELD_IDS,
    parse_dcgmi_dmon,
    parse_field_samples,
    parse_nvidia_smi_dmon,
    parse_nvidia_smi_query_csv,
)
from healthcheck.run.fanout import plan_commands
from tests.conftest import FIXTURES, corpus_files, corpus_text, fixture_text

H100 = load_profile("h100-sxm5-8x")


def body(rel: str) -> str:
    """Our fixture without its first line (the comment saying what it is)."""
    return fixture_text(rel).split("\n", 1)[1]


def result(text: str, rc: int = 0, cid: str = "dcgmi-dmon") -> CommandResult:
    return CommandResult("gpu001", cid, stdout=text.encode(), rc=rc)


def graded(text: str, profile=H100, cid: str = "dcgmi-dmon") -> list:
    obs = parse_dcgm_fields({cid: result(text, cid=cid)})
    return evaluate_dcgm_fields(obs, EvalContext(host=Host("gpu001"), profile=profile))


def bad_of(findings: list) -> list[tuple[str, str, str, object]]:
    return sorted((f.check, f.component, f.status.value, f.value) for f in findings if f.status is not Status.PASS)


# --- parsers on the real corpus ---------------------------------------------------------------

@pytest.mark.parametrize("path", corpus_files("dcgmi", "dmon-*.txt"), ids=lambda p: p.name)
def test_every_corpus_dmon_file_parses(path: Path) -> None:
    table = parse_dcgmi_dmon(corpus_text(f"dcgmi/{path.name}"))
    assert table.samples and all(s.entity.startswith("gpu") for s in table.samples)
    assert all(set(s.values) == set(table.quantities) for s in table.samples)


def test_corpus_xid_field_names_gpu1_with_xid_120() -> None:
    table = parse_dcgmi_dmon(corpus_text("dcgmi/dmon-e230-xid-errors-gpu1-xid120.txt"))
    assert table.quantities == ("xid_last",) and table.rounds() == 1
    assert {s.entity: s.values["xid_last"] for s in table.samples} == {
        "gpu0": 0, "gpu1": 120, "gpu2": 0, "gpu3": 0, "gpu4": 0, "gpu5": 0, "gpu6": 0, "gpu7": 0}


def test_corpus_l4_training_skips_the_prompt_and_reads_five_rounds() -> None:
    table = parse_dcgmi_dmon(corpus_text("dcgmi/dmon-e-203-204-252-c5-l4-dcgm4.6.1-under-training.txt"), 1.0)
    assert table.quantities == ("gpu_util_pct", "memory_copy_util_pct", "fb_used_mib")
    assert [s.values["gpu_util_pct"] for s in table.samples] == [97, 97, 100, 100, 100]
    assert [s.values["memory_copy_util_pct"] for s in table.samples] == [64, 64, 68, 67, 69]
    assert [s.t_s for s in table.samples] == [0.0, 1.0, 2.0, 3.0, 4.0] and table.rounds() == 5


def test_corpus_na_values_are_none_and_elision_marks_truncation() -> None:
    table = parse_dcgmi_dmon(corpus_text("dcgmi/dmon-pcie-nvlink-fields-gpu0-h800.txt"))
    first, third = table.samples[0].values, table.samples[2].values
    assert set(first.values()) == {None}
    assert third == {"nvlink_tx_bytes": 0, "nvlink_rx_bytes": 0, "pcie_tx_bytes": 498948, "pcie_rx_bytes": 1555}
    cut = parse_dcgmi_dmon(corpus_text("dcgmi/dmon-nvlink-tx-rx-4gpu-h800-truncated.txt"))
    assert cut.truncated and cut.rounds() == 6 and len(cut.samples) == 24
    assert cut.samples[0].entity == "gpu3" and cut.samples[0].values["nvlink_tx_bytes"] == 19694075554


def test_corpus_nvidia_smi_dmon_under_load() -> None:
    table = parse_nvidia_smi_dmon(corpus_text("misc/nvidia-smi-dmon-h100-load.txt"))
    assert [s.values["power_w"] for s in table.samples] == [631, 634, 633, 634, 636]
    assert [s.values["gpu_temp_c"] for s in table.samples] == [63, 63, 64, 64, 65]
    assert {s.values["sm_clock_mhz"] for s in table.samples} == {1980}
    assert table.samples[0].values["memory_temp_c"] == 57 and table.rounds() == 5


def test_corpus_query_gpu_csv_units_hex_mask_and_flags() -> None:
    load = parse_nvidia_smi_query_csv(corpus_text("nvidia-smi/h100-query-gpu-allfields-csv-load.txt"))
    values = load.samples[0].values
    assert (values["gpu_temp_c"], values["power_w"], values["sm_clock_mhz"]) == (59, 631.95, 1980)
    assert values["clock_event_reasons"] == 0 and values["row_remap_pending"] == 0
    idle = parse_field_samples(corpus_text("nvidia-smi/h200-query-gpu-allfields-csv-idle.txt"))
    assert idle.source == "nvidia-smi-query"
    assert (idle.samples[0].values["clock_event_reasons"], idle.samples[0].values["sm_clock_mhz"]) == (1, 345)


# --- parsers on our fixtures ------------------------------------------------------------------

def test_fixture_load_reads_the_repeated_header_and_all_rounds() -> None:
    text = body("dcgmi-dmon/h100-8gpu-hpl-load-gpu5-hw-slowdown.txt")
    assert text.count("#Entity") == 2  # DCGM reprints the header after 14 rounds
    table = parse_dcgmi_dmon(text, 1.0)
    assert table.rounds() == 20 and len(table.samples) == 160 and not table.truncated
    gpu5 = [s.values for s in table.samples if s.entity == "gpu5"]
    assert gpu5[6]["clock_event_reasons"] == 12 and gpu5[6]["sm_clock_mhz"] == 1035
    assert gpu5[6]["power_w"] == 408.125 and gpu5[6]["slowdown_temp_c"] == 89
    assert gpu5[-1]["power_violation_s"] == pytest.approx(4.0)  # ns -> s


def test_blank_cells_are_read_at_the_header_offsets() -> None:
    lines = body("dcgmi-dmon/h100-8gpu-rest-healthy.txt").splitlines()
    header = lines[0]
    col = header.index("POWER")
    row = lines[2]
    lines[2] = row[:col] + " " * 10 + row[col + 10:]  # dcgmi prints a blank cell for a missing value
    table = parse_dcgmi_dmon("\n".join(lines))
    assert table.samples[0].values["power_w"] is None and table.samples[0].values["sm_clock_mhz"] == 345
    assert table.samples[0].values["gpu_temp_c"] == 31


def test_a_row_cut_off_at_the_end_is_dropped_and_flagged() -> None:
    text = body("dcgmi-dmon/h100-8gpu-rest-healthy.txt").rstrip("\n")
    table = parse_dcgmi_dmon(text[:-200])
    assert table.truncated and len(table.samples) == 39


def test_sampler_marker_names_the_fallback_and_the_stop() -> None:
    table = parse_field_samples(body("dcgmi-dmon/sampler-nvidia-smi-fallback-2gpu-gpu1-hw-slowdown.txt"))
    assert table.source == "nvidia-smi-query" and table.interval_s == 1.0
    assert table.notes == ("dcgmi not used: dcgmi-absent",)
    assert [s.t_s for s in table.samples if s.entity == "gpu1"] == [0.0, 1.0, 2.0]
    assert [s.values["hw_power_brake_s"] for s in table.samples if s.entity == "gpu1"] == [0, 0.5, 1.5]
    stopped = parse_field_samples("healthcheck-sampler: dcgmi interval_ms=500 count=9\n"
                                  + body("dcgmi-dmon/h100-8gpu-rest-healthy.txt")
                                  + "\ndmon was stopped due to receiving a signal\nhealthcheck-sampler: stopped\n")
    assert stopped.stopped and stopped.interval_s == 0.5 and stopped.samples[8].t_s == 0.5


@pytest.mark.parametrize("path", sorted((FIXTURES / "dcgmi-dmon" / "bad").glob("*.txt")), ids=lambda p: p.name)
def test_bad_inputs_raise_parse_error(path: Path) -> None:
    with pytest.raises(ParseError):
        parse_dcgm_fields({"dcgmi-dmon": result(body(f"dcgmi-dmon/bad/{path.name}"))})


# --- the probe's command ------------------------------------------------------------------------

def test_default_command_samples_the_default_fields_with_fallbacks() -> None:
    script = probes.get("dcgm_fields").commands({})["dcgmi-dmon"]
    assert "dcgmi dmon -e 150,140,155,100,112,240,241,230,310,311,396,395,202,409,419,429,439,158 -c 5 -d 1000" \
        in script
    assert "nvidia-smi --query-gpu=$q --format=csv" in script and "healthcheck-sampler: none" in script
    assert "clocks_throttle_reasons.active" in script  # pre-535 drivers
    custom = render_commands({"dcgm_field_ids": "150,155", "dcgm_fields_samples": 3, "dcgm_fields_interval_ms": 500})
    assert "dcgmi dmon -e 150,155 -c 3 -d 500" in custom["dcgmi-dmon"]
    assert field_ids(None) == DEFAULT_FIELD_IDS and field_ids([100, "112"]) == (100, 112)
    with pytest.raises(ValueError):
        field_ids("150,-1")
    with pytest.raises(ValueError):
        render_commands({"dcgm_fields_interval_ms": 10})


def test_profile_field_ids_and_window_reach_the_planned_command_and_its_timeout() -> None:
    """Commands are planned per host profile: its settings.dcgm_fields ids/samples/interval reach the
    node, and a window longer than the default bound gets a timeout that covers it."""
    site = Profile("site", settings={"dcgm_fields": {"ids": [150, 1002], "samples": 45, "interval_ms": 2000}})
    planned = {c.id: c for c in plan_commands([probes.get("dcgm_fields")], {"profile": site}, 30.0)}
    assert "dcgmi dmon -e 150,1002 -c 45 -d 2000" in planned["dcgmi-dmon"].line
    assert planned["dcgmi-dmon"].timeout_s == 120.0  # 45 x 2 s + 30 s start-up, not the fixed 60 s
    default = {c.id: c for c in plan_commands([probes.get("dcgm_fields")], {"profile": Profile("p")}, 30.0)}
    assert "-c 5 -d 1000" in default["dcgmi-dmon"].line and default["dcgmi-dmon"].timeout_s == 60.0
    # a run option still wins over the profile
    ids = {c.id: c for c in plan_commands([probes.get("dcgm_fields")],
                                          {"profile": site, "dcgm_field_ids": "155"}, 30.0)}
    assert "dcgmi dmon -e 155 -c 45" in ids["dcgmi-dmon"].line


# --- grading at rest ------------------------------------------------------------------------------

def test_healthy_node_at_rest_passes_every_check() -> None:
    findings = graded(body("dcgmi-dmon/h100-8gpu-rest-healthy.txt"))
    assert bad_of(findings) == []
    temp = next(f for f in findings if f.check == "dcgm_fields.gpu_temp_c")
    assert temp.expected == "< 89 C" and temp.value == 33 and "worst 33 C on gpu2" in temp.message
    assert {f.check for f in findings} >= {"dcgm_fields.clock_event.hw_slowdown", "dcgm_fields.xid.last",
                                          "dcgm_fields.ecc.dbe_growth", "dcgm_fields.pcie.replay_rate",
                                          "dcgm_fields.nvlink.replay_growth"}
    replay = next(f for f in findings if f.check == "dcgm_fields.pcie.replay_rate")
    assert replay.value == 0  # gpu4's counter is 2 throughout: no growth


def test_dbe_and_xid_appearing_at_rest_name_gpu2() -> None:
    findings = graded(body("dcgmi-dmon/h100-8gpu-rest-gpu2-dbe-xid48-remap-pending.txt"))
    assert bad_of(findings) == [("dcgm_fields.ecc.dbe_growth", "gpu2", "FAIL", 2),
                                ("dcgm_fields.row_remap.pending", "gpu2", "FAIL", 1),
                                ("dcgm_fields.xid.last", "gpu2", "WARN", 48),
                                ("dcgm_fields.xid.new", "gpu2", "FAIL", 48)]
    new = next(f for f in findings if f.check == "dcgm_fields.xid.new")
    assert new.message.startswith("gpu2: ") and "at rest (5 samples over 4 s, dcgmi-dmon)" in new.message
    assert new.remedy and new.source == "dcgmi-dmon"


def test_corpus_xid_120_is_a_warning_at_rest() -> None:
    findings = graded(corpus_text("dcgmi/dmon-e230-xid-errors-gpu1-xid120.txt"))
    assert [b for b in bad_of(findings) if b[2] != "SKIP"] == [("dcgm_fields.xid.last", "gpu1", "WARN", 120)]
    skipped = {f.check for f in findings if f.status is Status.SKIP}
    assert "dcgm_fields.gpu_temp_c" in skipped and "dcgm_fields.clock_event.hw_slowdown" in skipped


def test_nvidia_smi_fallback_grades_throttling_and_skips_what_it_cannot_see() -> None:
    findings = graded(body("dcgmi-dmon/sampler-nvidia-smi-fallback-2gpu-gpu1-hw-slowdown.txt"))
    assert bad_of(findings) == [("dcgm_fields.clock_event.hw_power_brake", "gpu1", "FAIL", 2),
                                ("dcgm_fields.clock_event.hw_slowdown", "gpu1", "FAIL", 2),
                                *[(c, "node", "SKIP", None) for c in (
                                    "dcgm_fields.nvlink.crc_growth", "dcgm_fields.nvlink.recovery_growth",
                                    "dcgm_fields.nvlink.replay_growth", "dcgm_fields.pcie.replay_rate",
                                    "dcgm_fields.power_violation_s", "dcgm_fields.thermal_violation_s",
                                    "dcgm_fields.xid.last", "dcgm_fields.xid.new")]]


def test_no_expectation_is_skip_never_pass() -> None:
    findings = graded(body("dcgmi-dmon/h100-8gpu-rest-healthy.txt"), profile=EMPTY_PROFILE)
    statuses = {f.check: f.status for f in findings}
    assert statuses["dcgm_fields.clock_event.hw_slowdown"] is Status.SKIP
    assert statuses["dcgm_fields.gpu_temp_c"] is Status.PASS  # the GPU's own slowdown limit (field 158)
    skip = next(f for f in findings if f.check == "dcgm_fields.ecc.dbe_growth")
    assert "no expectation dcgm_fields.ecc_dbe_growth in profile (none)" in skip.message


def test_missing_tool_and_engine_down_are_skips() -> None:
    none = graded("healthcheck-sampler: none neither dcgmi (with a reachable nv-hostengine) nor nvidia-smi is "
                  "installed on this node\n")
    assert [(f.check, f.status) for f in none] == [("dcgm_fields.sampler", Status.SKIP)]
    assert "nor nvidia-smi" in none[0].message
    down = parse_dcgm_fields({"dcgmi-dmon": result("Error: unable to establish a connection to the specified "
                                                   "host: localhost\n", rc=255)})
    assert down.unavailable and "nv-hostengine" in down.unavailable


def test_plain_nvidia_smi_dmon_capture_is_accepted() -> None:
    findings = graded(corpus_text("misc/nvidia-smi-dmon-h100-load.txt"), cid="nvidia-smi-dmon")
    temp = next(f for f in findings if f.check == "dcgm_fields.gpu_temp_c")
    assert temp.status is Status.PASS and temp.value == 65
