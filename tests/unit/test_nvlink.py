"""probes/nvlink.py: nvidia-smi nvlink -s / -e over the real corpus and our fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from healthcheck.core.model import CommandResult, Host, Status
from healthcheck.core.profiles import load_profile
from healthcheck.core.spec import EvalContext, ParseError
from healthcheck.probes.nvlink import (
    evaluate_nvlink,
    parse_nvidia_smi_nvlink_e,
    parse_nvidia_smi_nvlink_s,
    parse_nvlink,
)
from healthcheck.store.jsoncodec import to_jsonable
from tests.conftest import corpus_files, corpus_text, fixture_text


def body(rel: str) -> str:
    return fixture_text(rel).split("\n", 1)[1]


def result(cid: str, text: str, rc: int = 0) -> CommandResult:
    return CommandResult(host="gpu001", command_id=cid, stdout=text.encode(), rc=rc)


def observe(status: str, errors: str | None = None):
    outputs = {"nvidia-smi-nvlink-s": result("nvidia-smi-nvlink-s", status)}
    if errors is not None:
        outputs["nvidia-smi-nvlink-e"] = result("nvidia-smi-nvlink-e", errors)
    return parse_nvlink(outputs)


def ctx(profile: str = "h100-sxm5-8x", previous=None) -> EvalContext:
    return EvalContext(host=Host("gpu001"), profile=load_profile(profile), previous=previous or {})


def bad(findings):
    return [f for f in findings if f.status not in (Status.PASS, Status.SKIP)]


# --- corpus: concrete values -------------------------------------------------------------------

def test_v100_two_inactive_links():
    text = corpus_text("nvlink/v100-sxm2-gpu3-status-2-of-6-links-inactive-elided.txt")
    (gpu,) = parse_nvidia_smi_nvlink_s(text)
    assert gpu.index == 3 and gpu.state == "ok" and len(gpu.links) == 6
    assert [ln.link for ln in gpu.links if not ln.active] == [3, 5]
    assert gpu.links[0].speed_gbps == 25.781


def test_h100_18_links_and_a100_12_links():
    (h100,) = parse_nvidia_smi_nvlink_s(corpus_text("nvlink/h100-sxm-status-18links-26.562GBs.txt"))
    assert len(h100.links) == 18 and {ln.speed_gbps for ln in h100.links} == {26.562}
    a100 = parse_nvidia_smi_nvlink_s(corpus_text("nvlink/a100-sxm4-8gpu-status-12links-25GBs.txt"))
    assert [g.index for g in a100] == list(range(8)) and {len(g.links) for g in a100} == {12}


@pytest.mark.parametrize("name,index,state", [
    ("a100-sxm4-gpu6-all-links-inactive.txt", 6, "all_inactive"),
    ("b200-gpu2-all-links-inactive-uuid-redacted.txt", 2, "all_inactive"),   # 'inActive' casing
    ("h100-mig-status-not-supported.txt", 0, "mig"),
    ("l40s-status-no-nvlink.txt", 0, "no_nvlink"),
])
def test_gpu_level_states(name, index, state):
    (gpu,) = parse_nvidia_smi_nvlink_s(corpus_text(f"nvlink/{name}"))
    assert (gpu.index, gpu.state, gpu.links) == (index, state, ())


def test_h100_error_counters_with_elision():
    counters = parse_nvidia_smi_nvlink_e(corpus_text("nvlink/h100-nvlink-e-error-counters-elided.txt"))
    assert [(c.gpu, c.link) for c in counters] == [(0, 0), (0, 1), (0, 17)]
    assert {(c.replay, c.recovery, c.crc) for c in counters} == {(0, 0, 0)}


STATUS_FILES = [p for p in corpus_files("nvlink")
                if not any(k in p.name for k in ("nvlink-e", "capabilities", "throughput", "nvlink-info"))]


@pytest.mark.corpus
@pytest.mark.parametrize("path", STATUS_FILES, ids=[p.name for p in STATUS_FILES])
def test_conformance_status_files(path: Path):
    gpus = parse_nvidia_smi_nvlink_s(corpus_text(f"nvlink/{path.name}"))
    assert gpus and all(g.links or g.state != "ok" for g in gpus)


@pytest.mark.corpus
@pytest.mark.parametrize("name", ["h800-capabilities-c-gpu0.txt",
                                  "h800-gpu0-throughput-gt-d-and-r-under-training.txt",
                                  "gb200-nvlink-info-nvle-disabled-firmware-versions-excerpt.txt"])
def test_other_nvlink_subcommands_are_rejected_not_misread(name):
    with pytest.raises(ParseError, match="unexpected line"):
        parse_nvidia_smi_nvlink_s(corpus_text(f"nvlink/{name}"))


# --- grading on our fixtures -------------------------------------------------------------------

def test_healthy_h100_passes():
    obs = observe(body("nvlink/h100-8gpu-status-18links-healthy.txt"),
                  body("nvlink/h100-8gpu-errors-all-zero.txt"))
    findings = evaluate_nvlink(obs, ctx())
    assert not bad(findings)
    [links] = [f for f in findings if f.check == "nvlink.links"]  # the 8 GPUs that pass: one finding
    assert (links.component, links.value) == ("node", 18)
    assert links.message == "all 8 GPUs: NVLinks active 18 links, within >= 18 links"
    replay = next(f for f in findings if f.check == "nvlink.errors.replay")
    assert replay.status is Status.PASS and replay.value == 144  # 8 GPUs x 18 links graded
    assert not [f for f in findings if f.check.endswith(".growth")]  # no previous run


def test_inactive_and_slow_links_named():
    obs = observe(body("nvlink/h100-8gpu-status-gpu3-link5-inactive-gpu6-link2-1.562.txt"))
    findings = bad(evaluate_nvlink(obs, ctx()))
    got = {(f.check, f.component, f.status, f.value) for f in findings}
    assert got == {
        ("nvlink.link.active", "gpu3 link 5", Status.FAIL, "inactive"),
        ("nvlink.links", "gpu3", Status.FAIL, 17),
        ("nvlink.link.speed_gbps", "gpu6 link 2", Status.FAIL, 1.562),
    }
    speed = next(f for f in findings if f.check == "nvlink.link.speed_gbps")
    assert speed.expected == ">= 26.562 GB/s" and speed.remedy and speed.source == "nvidia-smi-nvlink-s"
    # the seven GPUs with 18 active links share one PASS naming them; gpu3 keeps its FAIL
    [passed] = [f for f in evaluate_nvlink(obs, ctx()) if f.check == "nvlink.links" and f.status is Status.PASS]
    assert (passed.component, passed.value, passed.source) == ("node", 18, "nvidia-smi-nvlink-s")
    assert passed.message == "gpu0,gpu1,gpu2,gpu4,gpu5,gpu6,gpu7: NVLinks active 18 links, within >= 18 links"


def test_all_inactive_gpu_fails_with_zero_links():
    obs = observe(corpus_text("nvlink/a100-sxm4-gpu6-all-links-inactive.txt"))
    (f,) = evaluate_nvlink(obs, ctx("a100-sxm4-80gb-8x"))
    assert (f.check, f.component, f.status, f.value) == ("nvlink.links", "gpu6", Status.FAIL, 0)
    assert "all NVLinks inactive" in f.message


def test_mig_and_l40s_are_skip():
    (mig,) = evaluate_nvlink(observe(corpus_text("nvlink/h100-mig-status-not-supported.txt")), ctx())
    assert mig.status is Status.SKIP and "MIG" in mig.message
    (l40s,) = evaluate_nvlink(observe(corpus_text("nvlink/l40s-status-no-nvlink.txt")), ctx("l40s-pcie-4x"))
    assert l40s.status is Status.SKIP and "no NVLink" in l40s.message


def test_no_nvlink_output_under_an_nvlink_profile_fails():
    (f,) = evaluate_nvlink(observe(corpus_text("nvlink/l40s-status-no-nvlink.txt")), ctx())
    assert f.status is Status.FAIL and f.value == 0 and "no NVLink support" in f.message


def test_counters_over_threshold_warn_per_link():
    obs = observe(body("nvlink/h100-8gpu-status-18links-healthy.txt"),
                  body("nvlink/h100-8gpu-errors-gpu1-link4-replay12-recovery1-crc40.txt"))
    findings = bad(evaluate_nvlink(obs, ctx()))
    got = {(f.check, f.component, f.status, f.value) for f in findings}
    assert got == {
        ("nvlink.errors.replay", "gpu1 link 4", Status.WARN, 12),
        ("nvlink.errors.recovery", "gpu1 link 4", Status.WARN, 1),
        ("nvlink.errors.crc", "gpu1 link 4", Status.WARN, 40),
        ("nvlink.errors.crc", "gpu7 link 17", Status.WARN, 3),
    }
    assert all("since driver load" in f.message for f in findings)


def test_growth_since_previous_run_fails():
    status = body("nvlink/h100-8gpu-status-18links-healthy.txt")
    before = observe(status, body("nvlink/h100-8gpu-errors-all-zero.txt"))
    after = observe(status, body("nvlink/h100-8gpu-errors-gpu1-link4-replay12-recovery1-crc40.txt"))
    findings = evaluate_nvlink(after, ctx(previous={"nvlink": to_jsonable(before)}))
    growth = {(f.check, f.component, f.status, f.value) for f in findings
              if f.check.endswith(".growth") and f.status is not Status.PASS}
    assert growth == {
        ("nvlink.errors.replay.growth", "gpu1 link 4", Status.FAIL, 12),
        ("nvlink.errors.recovery.growth", "gpu1 link 4", Status.FAIL, 1),
        ("nvlink.errors.crc.growth", "gpu1 link 4", Status.WARN, 40),
        ("nvlink.errors.crc.growth", "gpu7 link 17", Status.WARN, 3),
    }


def test_no_growth_and_counter_reset():
    status = body("nvlink/h100-8gpu-status-18links-healthy.txt")
    errors = body("nvlink/h100-8gpu-errors-gpu1-link4-replay12-recovery1-crc40.txt")
    same = observe(status, errors)
    findings = evaluate_nvlink(same, ctx(previous={"nvlink": to_jsonable(same)}))
    assert all(f.status is Status.PASS for f in findings if f.check.endswith(".growth"))
    # previous run saw more errors than now: the driver was reloaded, growth = current value
    reset = observe(status, body("nvlink/h100-8gpu-errors-all-zero.txt"))
    findings = evaluate_nvlink(reset, ctx(previous={"nvlink": to_jsonable(same)}))
    assert all(f.status is Status.PASS for f in findings if f.check.endswith(".growth"))


# --- bad inputs --------------------------------------------------------------------------------

@pytest.mark.parametrize("name,reason", [
    ("status-truncated-mid-line.txt", "unexpected line 'Link 11: 26.5'"),
    ("status-nvml-driver-mismatch.txt", "before any 'GPU N:' header"),
])
def test_bad_inputs_raise_with_reason(name, reason):
    with pytest.raises(ParseError, match=reason):
        parse_nvidia_smi_nvlink_s(body(f"nvlink/bad/{name}"))


def test_empty_status_output_is_no_gpus():
    obs = observe("")
    (f,) = evaluate_nvlink(obs, ctx())
    assert f.status is Status.FAIL and "listed no GPU" in f.message


def test_value_grades_give_what_finding_from_expectation_gives():
    """A finding built from a grade shared between components (GPUs, links) of equal value is exactly the
    one graded alone: PASS, FAIL, WARN past a ``warn`` bound, ERROR for what cannot be graded, SKIP without
    an expectation, and the values that are never shared (zero floats, unhashables), any component."""
    from healthcheck.core.grading import ValueGrades, finding_from_expectation
    from healthcheck.core.profiles import Expectation

    profile = load_profile("h100-sxm5-8x")
    exps = [profile.expect("nvlink.links"), profile.expect("nvlink.errors.replay"), None,
            Expectation("x.y", "src; more", op="le", value=100, warn=0, unit="errors"),
            Expectation("x.y", "src", op="in", value=["Completed", "Success"]),
            Expectation("x.y", "src", op="match", value="^1$")]
    values = [18, 17, 0, 1, True, 1.0, -0.0, 0.0, 150, "18", "Completed", "x", None, float("nan"), [1], (1, 2)]
    components = ["gpu0", "gpu1", "gpu7 link 3", "node", ""]
    for exp in exps:
        grades = ValueGrades("gpu001", "nvlink.links", exp, source="s", remedy="r", profile=profile)
        for _ in range(2):
            for value in values:
                for component in components:
                    alone = finding_from_expectation("gpu001", "nvlink.links", exp, value, source="s",
                                                     remedy="r", component=component, profile=profile)
                    shared = grades.finding(component, value)
                    assert repr(shared) == repr(alone), (exp, value, component)


def test_all_pass_is_every_value_passing():
    """``ValueGrades.all_pass`` is exactly "every value that is not None passes", whatever the types."""
    from healthcheck.core.grading import ValueGrades, passes
    from healthcheck.core.profiles import Expectation

    exps = (Expectation("x", "s", op="match", value="^0$"), Expectation("x", "s", op="le", value=0))
    cases = ([0, 0, None], [0.0, None, 0.0], [], [None], [1, 0], [26.562] * 18, [26.562, 25.781],
             [0, 0.0], [0, False], ["0"], [0, "0"], [float("nan")], [[0]])
    for exp in exps:
        for values in cases:
            every = all(passes(exp, v) for v in values if v is not None)
            assert ValueGrades("h", "x", exp, source="s", remedy="r").all_pass(list(values)) == every, (values, exp.op)


def test_counters_fast_path_equals_the_loop_on_real_layouts(monkeypatch):
    """The counters of every GPU settled at once when all pass, else the per-link loop: both give the
    findings of grading every link (clean, counters over threshold, N/A)."""
    from healthcheck.core.grading import ValueGrades
    from healthcheck.probes import nvlink

    status = body("nvlink/h100-8gpu-status-18links-healthy.txt")
    for name in ("h100-8gpu-errors-all-zero.txt", "h100-8gpu-errors-gpu1-link4-replay12-recovery1-crc40.txt"):
        errors = body(f"nvlink/{name}")
        for variant in (errors, errors.replace(": 0\n", ": N/A\n", 7)):
            obs = observe(status, variant)
            fast = nvlink._grade_counters(obs, ctx())
            with monkeypatch.context() as patched:
                patched.setattr(ValueGrades, "all_pass", lambda self, values: False)  # every value through the loop
                slow = nvlink._grade_counters(obs, ctx())
            assert fast == slow
