"""DCGM probe: diag JSON (3.x and 4.x) and text tables, health, discovery, exit codes, absent DCGM."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from healthcheck.core.model import CommandResult, Host, Status
from healthcheck.core.profiles import load_profile
from healthcheck.core.spec import EvalContext, ParseError
from healthcheck.probes.dcgm import PROBE, evaluate_dcgm, parse_dcgm, render_commands
from healthcheck.probes.dcgm_diag import parse_dcgmi_diag, report_level, severity_name
from healthcheck.probes.dcgm_health import parse_dcgmi_discovery, parse_dcgmi_health
from healthcheck.run.fanout import plan_commands
from tests.conftest import corpus_files, corpus_text, fixture_text

H100 = load_profile("h100-sxm5-8x")
SNIPPET_NOT_JSON = "diag-r4-j-dcgm4-8gpu-diagnostic-test-entity-results-info-truncated-snippet.txt"


def own(rel: str) -> str:
    return fixture_text(f"dcgmi/{rel}").split("\n", 1)[1]


def run(outputs: dict[str, tuple[str, int]], level: int = 1):
    results = {cid: CommandResult(host="gpu001", command_id=cid, stdout=text.encode(), rc=rc)
               for cid, (text, rc) in outputs.items()}
    obs = parse_dcgm(results)
    ctx = EvalContext(host=Host(name="gpu001"), profile=H100, options={"dcgm_diag_level": level})
    return obs, evaluate_dcgm(obs, ctx)


def checks(findings, prefix):
    return [f for f in findings if f.check.startswith(prefix)]


@pytest.mark.parametrize("path", corpus_files("dcgmi", "diag-*.txt"), ids=lambda p: p.name)
def test_diag_conformance(path):
    text = corpus_text(f"dcgmi/{path.name}")
    if path.name == SNIPPET_NOT_JSON:  # one test object ending in '},': not a document
        with pytest.raises(ParseError):
            parse_dcgmi_diag(text)
        return
    report = parse_dcgmi_diag(text)
    assert report.tests
    for test in report.tests:
        assert test.status in ("pass", "fail", "warn", "skip"), (test.name, test.status)


def test_severity_names_follow_the_release():
    assert severity_name(1, "3.1.8") == "ISOLATE"
    assert severity_name(1, "3.3.3") == "MONITOR"
    assert severity_name(2, "4.2.3") == "ISOLATE"
    assert severity_name(6, "4.2.3") == "RESET"
    assert severity_name(5, None) == "CONFIG"
    assert severity_name(None, "4.2.3") is None


def test_dcgm4_json_gb10_exit_226_is_a_result_not_an_error():
    text = corpus_text("dcgmi/diag-r1-j-dcgm4.2.3-gb10-software-fail-persistence-off-sram-threshold-unreadable.txt")
    report = parse_dcgmi_diag(text)
    assert (report.format, report.dcgm_version, report.driver_version) == ("json-4", "4.2.3", "580.82.09")
    test = report.tests[0]
    assert (test.category, test.name, test.status) == ("Deployment", "software", "fail")
    warning = test.results[0].warnings[0]
    assert (test.results[0].entity, warning.error_id, warning.severity) == ("gpu0", 29, "CONFIG")
    _, findings = run({"dcgmi-diag": (text, 226)})
    software = checks(findings, "dcgm.diag.software")[0]
    assert (software.status, software.component) == (Status.FAIL, "gpu0")
    assert "[CONFIG] Persistence Mode" in software.message and "configuration problem" in software.remedy
    summary = checks(findings, "dcgm.diag")[0]
    assert summary.check == "dcgm.diag" and summary.status is Status.FAIL and summary.value == 226


def test_dcgm3_text_pass_all_tests():
    report = parse_dcgmi_diag(corpus_text("dcgmi/diag-r2-8x-a100-80gb-p4de-dcgm3.3.3-pass.txt"))
    assert (report.format, report.dcgm_version, report.driver_version) == ("text", "3.3.3", "535.104.12")
    assert [t.name for t in report.tests][-2:] == ["PCIe", "GPU Memory"]
    assert len(report.tests) == 11
    _, findings = run({"dcgmi-diag": (corpus_text("dcgmi/diag-r2-8x-a100-80gb-p4de-dcgm3.3.3-pass.txt"), 0)}, 2)
    assert {f.status for f in checks(findings, "dcgm.diag")} == {Status.PASS}
    assert "dcgmi diag -r 2 (DCGM 3.3.3" in checks(findings, "dcgm.diag")[0].message


def test_dcgm3_text_gpu_memory_fail_all_and_pcie_skip():
    text = corpus_text("dcgmi/diag-r3-8x-h100-cuinit-system-not-yet-initialized-gpu-memory-fail.txt")
    _, findings = run({"dcgmi-diag": (text, 226)}, 3)
    memory = checks(findings, "dcgm.diag.gpu_memory")
    assert [(f.component, f.status) for f in memory] == [("all GPUs", Status.FAIL)]
    assert "system not yet initialized" in memory[0].message and "GPU 7 Error using CUDA API" in memory[0].message
    assert [f.status for f in checks(findings, "dcgm.diag.pcie")] == [Status.SKIP]
    persistence = checks(findings, "dcgm.diag.persistence_mode")[0]
    assert persistence.status is Status.PASS


def test_wrapped_warning_joins_mid_word_and_names_gpu0():
    text = corpus_text("dcgmi/diag-r2-gpu-memory-fail-thermal-violation-snippet.txt")
    _, findings = run({"dcgmi-diag": (text, 226)}, 2)
    bad = [f for f in checks(findings, "dcgm.diag.gpu_memory") if f.status is not Status.PASS]
    assert [(f.component, f.status) for f in bad] == [("gpu0", Status.FAIL)]
    assert "Thermal violations totaling 13.3 seconds started at 9.7 seconds" in bad[0].message


def test_dcgm4_text_pcie_fail_while_every_gpu_passes():
    text = corpus_text("dcgmi/diag-r2-dcgm4.2.3-4x-l40s-26b9-pcie-fail-child-process-error.txt")
    report = parse_dcgmi_diag(text)
    pcie = next(t for t in report.tests if t.name == "pcie")
    assert pcie.status == "fail" and len(pcie.warnings) == 4
    assert "'A child process (152) exited with non-zero status 1'" in pcie.warnings[0].message
    _, findings = run({"dcgmi-diag": (text, 226)}, 2)
    node = checks(findings, "dcgm.diag.pcie")
    assert [(f.component, f.status) for f in node] == [("node", Status.FAIL)]
    assert [f.status for f in checks(findings, "dcgm.diag.memory")] == [Status.PASS]


def test_deployment_error_row_snippet():
    report = parse_dcgmi_diag(corpus_text("dcgmi/diag-deployment-error-uncorrectable-row-remap-pending-snippet.txt"))
    assert [(t.name, t.status) for t in report.tests] == [("Deployment", "fail")]
    assert report.tests[0].warnings[0].message == ("GPU 3 has uncorrectable memory errors and row remappings "
                                                   "are pending")


def test_dcgm3_json_own_fixture_isolate_on_gpu3():
    report = parse_dcgmi_diag(own("diag-r2-j-dcgm3.3-8gpu-gpu3-memory-fail.json"))
    assert (report.format, report.dcgm_version) == ("json-3", "3.3.8")
    assert len(report.tests) == 10  # 9 deployment tests (null entries skipped) + GPU Memory
    _, findings = run({"dcgmi-diag": (own("diag-r2-j-dcgm3.3-8gpu-gpu3-memory-fail.json"), 226)}, 2)
    memory = [f for f in checks(findings, "dcgm.diag.gpu_memory") if f.status is not Status.PASS]
    assert [(f.component, f.status) for f in memory] == [("gpu3", Status.FAIL)]
    assert "[ISOLATE]" in memory[0].message and "RMA" in memory[0].remedy
    denylist = checks(findings, "dcgm.diag.denylist")[0]
    assert denylist.status is Status.PASS and "gpu0,gpu1" in denylist.message


def test_old_severity_table_escalates_warn_to_fail():
    _, findings = run({"dcgmi-diag": (own("diag-r2-j-dcgm3.1-gpu5-pcie-warn-old-severity-isolate.json"), 0)}, 2)
    pcie = [f for f in checks(findings, "dcgm.diag.pcie") if f.status is not Status.PASS]
    assert [(f.component, f.status, f.value) for f in pcie] == [("gpu5", Status.FAIL, "warn")]
    assert "[ISOLATE] GPU 5 PCIe replay count 96" in pcie[0].message


def test_dcgm4_pass_fixture_and_exit_226_without_failures_is_error():
    text = own("diag-r1-j-dcgm4.2-8x-h100-pass.json")
    _, findings = run({"dcgmi-diag": (text, 0)})
    assert {f.status for f in findings} == {Status.PASS}
    _, findings = run({"dcgmi-diag": (text, 226)})
    summary = checks(findings, "dcgm.diag")[0]
    assert summary.status is Status.ERROR and "exit code 226" in summary.message


def test_truncated_diag_json_is_an_error_finding():
    _, findings = run({"dcgmi-diag": (own("bad/diag-r3-j-truncated.json"), 137)})
    assert [(f.check, f.status) for f in findings] == [("dcgm.diag", Status.ERROR)]
    assert "could not be read" in findings[0].message


def test_dcgmi_absent_or_host_engine_down_is_skip():
    marker = "healthcheck: dcgmi not installed\n"
    _obs, findings = run({"dcgmi-discovery": (marker, 0), "dcgmi-diag": (marker, 0), "dcgmi-health": (marker, 0)})
    assert [(f.check, f.status) for f in findings] == [("dcgm.discovery", Status.SKIP), ("dcgm.diag", Status.SKIP),
                                                       ("dcgm.health", Status.SKIP)]
    assert "not installed" in findings[1].message
    down = own("discovery-hostengine-down.txt")
    _, findings = run({"dcgmi-discovery": (down, 255), "dcgmi-health": (down, 255)})
    assert {f.status for f in findings} == {Status.SKIP}
    assert "nv-hostengine" in findings[0].message and "Host engine connection invalid" in findings[0].message


def test_health_json_and_text():
    healthy = parse_dcgmi_health(corpus_text("dcgmi/health-c-j-healthy-false-negative-gpu-needs-reset.txt"))
    assert (healthy.overall, healthy.incidents) == ("Healthy", ())
    text = parse_dcgmi_health(corpus_text("dcgmi/health-c-text-dcgm4.6.1-l4-warning-power-violation-clocks-event.txt"))
    assert text.overall == "Warning"
    incident = text.incidents[0]
    assert (incident.entity, incident.system, incident.health) == ("gpu0", "Power system", "Warning")
    assert incident.message == ("Detected clocks event due to power violation in GPU 0. Monitor the power "
                                "conditions. This GPU can still perform workload.")
    _, findings = run({"dcgmi-health": (own("health-c-j-gpu1-pcie-failure-gpu3-thermal-warning.json"), 0)})
    assert [(f.check, f.component, f.status) for f in findings] == [
        ("dcgm.health", "node", Status.FAIL), ("dcgm.health.pcie", "gpu1", Status.FAIL),
        ("dcgm.health.thermal", "gpu3", Status.WARN)]
    assert "412" in findings[1].message


def test_health_watches_not_enabled_and_garbage():
    _, findings = run({"dcgmi-health": (own("health-c-watches-not-enabled.txt"), 255)})
    assert [(f.check, f.status) for f in findings] == [("dcgm.health", Status.SKIP)]
    assert "dcgmi health -s a" in findings[0].remedy
    with pytest.raises(ParseError):
        parse_dcgmi_health(own("bad/health-c-garbage.txt"))
    _, findings = run({"dcgmi-health": (own("bad/health-c-garbage.txt"), 0)})
    assert [(f.check, f.status) for f in findings] == [("dcgm.health", Status.ERROR)]


@pytest.mark.parametrize("path", corpus_files("dcgmi", "discovery-*.txt"), ids=lambda p: p.name)
def test_discovery_conformance(path):
    disc = parse_dcgmi_discovery(corpus_text(f"dcgmi/{path.name}"))
    assert disc.gpus and all(g.bus_id and g.uuid.startswith("GPU-") for g in disc.gpus)
    assert disc.nvswitch_count == 0


def test_discovery_null_names_and_gpu_count():
    text = corpus_text("dcgmi/discovery-l-4x-h100-sxm-name-NULL-0-nvswitches-dcgm3.1.7.txt")
    _, findings = run({"dcgmi-discovery": (text, 0)})
    count = checks(findings, "dcgm.discovery.gpu_count")[0]
    assert (count.status, count.value) == (Status.FAIL, 4)
    names = checks(findings, "dcgm.discovery.gpu_name")
    assert [(f.component, f.status) for f in names] == [(f"gpu{i}", Status.WARN) for i in range(4)]
    _, findings = run({"dcgmi-discovery": (own("discovery-l-8x-h100.txt"), 0)})
    assert [(f.check, f.status, f.value) for f in findings] == [("dcgm.discovery.gpu_count", Status.PASS, 8)]


def test_commands_level_and_timeout():
    assert render_commands({"dcgm_diag_level": 3})["dcgmi-diag"].endswith("dcgmi diag -r 3 -j")
    assert render_commands({})["dcgmi-health"].endswith("dcgmi health -c -j")
    assert render_commands({"plan": "acceptance"})["dcgmi-diag"].endswith("-r 3 -j")
    assert render_commands({"plan": "quick"})["dcgmi-diag"].endswith("-r 1 -j")
    with pytest.raises(ValueError):
        render_commands({"dcgm_diag_level": 7})



def test_diag_timeout_follows_the_planned_level():
    """The runner plans level 1 (nightly) with a short bound and level 3 (acceptance) with the long one."""
    def planned(options):
        return {c.id: c for c in plan_commands([PROBE], options, 30.0)}
    nightly, acceptance = planned({"plan": "quick"}), planned({"plan": "acceptance"})
    assert nightly["dcgmi-diag"].line.endswith("dcgmi diag -r 1 -j") and nightly["dcgmi-diag"].timeout_s == 300.0
    assert acceptance["dcgmi-diag"].line.endswith("-r 3 -j") and acceptance["dcgmi-diag"].timeout_s == 3600.0
    assert planned({"dcgm_diag_level": 4})["dcgmi-diag"].timeout_s == 7200.0
    assert nightly["dcgmi-health"].timeout_s == 30.0  # other DCGM commands keep the run's default


def test_acceptance_plan_reaches_the_diag_level_without_probe_options(tmp_path):
    """`healthcheck sweep --plan acceptance` builds RunOptions(plan=...) with no probe_options: the
    planned diag must still be level 3 with the long timeout (it was level 1 before)."""
    import json

    from healthcheck.run.execute import execute_run
    from healthcheck.run.options import OutputOptions, RunOptions, SelectionOptions, TargetOptions

    raw = tmp_path / "bundle" / "raw" / "gpu001"
    raw.mkdir(parents=True)
    (raw / "dcgmi-health.out").write_text("healthcheck: dcgmi not installed\n")
    (raw / "dcgmi-health.rc").write_text("0")
    for plan, level, timeout in (("acceptance", 3, 3600.0), ("quick", 1, 300.0)):
        execute_run(RunOptions(target=TargetOptions(replay=tmp_path / "bundle", profile="h100-sxm5-8x"),
                               selection=SelectionOptions(probes=["dcgm"], plan=plan),
                               outputs=OutputOptions(run_dir=tmp_path / plan)))
        manifest = json.loads((tmp_path / plan / "manifest.json").read_text())
        [diag] = [c for c in manifest["commands_by_profile"]["h100-sxm5-8x"] if c["id"] == "dcgmi-diag"]
        assert diag["line"].endswith(f"dcgmi diag -r {level} -j") and diag["timeout_s"] == timeout


@pytest.mark.parametrize(("relpath", "level"), [
    ("dcgmi/diag-r1-j-dcgm4.2.3-gb10-software-fail-persistence-off-sram-threshold-unreadable.txt", 1),
    ("dcgmi/diag-r2-8x-a100-80gb-p4de-dcgm3.3.3-pass.txt", 2),
    ("dcgmi/diag-r2-dcgm4.4.1-8x-b200-2901-pcie-fail-slurm-numa.txt", 2),
    ("dcgmi/diag-r3-8x-h100-cuinit-system-not-yet-initialized-gpu-memory-fail.txt", 3),
])
def test_diag_level_comes_from_the_output_not_the_run_options(relpath: str, level: int):
    """A bundle graded by a quick plan (-r 1) said '-r 1' for outputs that ran level 2 or 3."""
    assert report_level(parse_dcgmi_diag(corpus_text(relpath))) == level
    _, findings = run({"dcgmi-diag": (corpus_text(relpath), 0)}, 1)
    summary = checks(findings, "dcgm.diag")[0]
    assert summary.message.startswith(f"dcgmi diag -r {level} (")
    assert ("the run options ask for -r 1" in summary.message) == (level != 1)


def test_health_json_of_the_wrong_shape_is_a_parse_error_not_a_crash():
    """Found by the fuzz test without the corpus: an entity that is a string, not an object, raised
    AttributeError. Entities without children have no incidents; an incident that is not an object is refused."""
    body = '{"body": {"Overall Health": {"value": "Healthy"}, "GPU": {"children": {"0": "x"}}}}'
    assert parse_dcgmi_health(body).incidents == ()
    bad = ('{"body": {"Overall Health": {"value": "Warning"}, "GPU": {"children": {"0": {"children": '
           '{"Errors": {"children": {"PCIe": "x"}}}}}}}}')
    with pytest.raises(ParseError, match="GPU 0 PCIe is not an object"):
        parse_dcgmi_health(bad)


_CELL_LINES = [line for path in corpus_files("dcgmi", "discovery*")  # corpus rows, when the corpus is there
               for line in path.read_text(errors="replace").splitlines()[1:] if line.startswith("|")] + [
    "| 0      | Name: NVIDIA H100 80GB HBM3                                          |",
    "|        | PCI Bus ID: 00000000:18:00.0                                         |",
    "| GPU ID | Device Information |"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_CELL_LINES), st.lists(st.tuples(st.integers(0, 200), st.sampled_from(
    ["|", " ", "\t", "\u00a0", "\u2003", "\x1c", "0", "7", "\u0663", "\u00b2", ":", "Name", "PCI Bus ID",
     "Device UUID", "x", "-", ""]), st.integers(0, 3)), max_size=4))
def test_discovery_cell_reader_is_the_pattern(line, edits):
    """``gpu_cell`` (``str`` methods) reads a table row exactly as ``_GPU_CELL`` does, on real rows and on
    rows with bars, Unicode spaces and digits, keys and colons inserted or cut anywhere."""
    from healthcheck.probes.dcgm_health import _CELL_KEYS, _GPU_CELL, gpu_cell

    for at, insert, cut in edits:
        at = min(at, len(line))
        line = line[:at] + insert + line[at + cut:]
    m = _GPU_CELL.match(line.rstrip())
    assert gpu_cell(line) == (None if m is None else (m["id"], _CELL_KEYS[m["key"]], m["value"]))


def test_host_engine_down_found_in_any_case_as_by_the_pattern_per_line():
    from healthcheck.probes.dcgm import _ENGINE_DOWN, dcgm_unavailable

    text = fixture_text("dcgmi/discovery-hostengine-down.txt")
    for variant in (text, text.upper(), "\u00e9\n" + text, text.replace("establish", "e\u017ftablish"),
                    "Unable To Connect To Host Engine", "unable to  connect to host engine", "unable to", ""):
        said = [ln.strip().removeprefix("Error: ") for ln in variant.splitlines() if _ENGINE_DOWN.search(ln)]
        got = dcgm_unavailable(CommandResult(host="h", command_id="dcgmi-discovery", stdout=variant.encode(), rc=1))
        assert got == (f"the DCGM host engine (nv-hostengine) is not reachable: {' / '.join(said)}" if said else None)
