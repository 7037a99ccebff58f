"""Telemetry under benchmark load: sampling plan, the sampler's stop file (local transport, dcgmi shim),
stored series and their replay, grading (throttling, SM clock sag vs node and fleet), report panel."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from healthcheck.benchmarks.plan import Job
from healthcheck.core.model import CommandResult, Host, Status
from healthcheck.core.profiles import Profile, load_profile
from healthcheck.probes.dmon_parse import parse_field_samples
from healthcheck.reports.host_panels import host_panels
from healthcheck.run.telemetry import (
    MAX_POINTS,
    MAX_SAMPLES,
    TelemetrySeries,
    evaluate_telemetry,
    job_view,
    load_series,
    merge_telemetry,
    read_series,
    sample_during,
    sampling_plan,
    store_series,
    telemetry_on,
)
from tests.conftest import fixture_text

H100 = load_profile("h100-sxm5-8x")
HEALTHY = "dcgmi-dmon/h100-8gpu-hpl-load-healthy.txt"
SLOW = "dcgmi-dmon/h100-8gpu-hpl-load-gpu5-hw-slowdown.txt"


def body(rel: str) -> str:
    return fixture_text(rel).split("\n", 1)[1]


def job(host: str, shape: str = "node", timeout_s: float = 1800.0) -> Job:
    return Job(job_id=f"hpl-hpl-{shape}-{host}", benchmark="hpl", test="hpl", shape=shape, hosts=(host,),
               ranks_per_host=8, timeout_s=timeout_s)


def series(host: str, fixture: str) -> TelemetrySeries:
    return TelemetrySeries(host, job(host), parse_field_samples(body(fixture)), None, (0.2, 18.5))


def not_pass(findings: list) -> list[tuple[str, str, str, str, object]]:
    return sorted((f.host, f.check, f.component, f.status.value, f.value) for f in findings
                  if f.status is not Status.PASS)


def test_only_single_node_jobs_are_sampled_and_the_option_turns_it_off() -> None:
    assert telemetry_on(job("n1"), {}) and not telemetry_on(job("n1", "pair"), {})
    assert not telemetry_on(job("n1"), {"telemetry": False})
    assert telemetry_on(job("n1", "cluster"), {"telemetry_shapes": ["node", "cluster"]})


def test_sampling_plan_covers_the_timeout_and_stretches_long_jobs() -> None:
    ids, count, interval = sampling_plan(job("n1", timeout_s=1800), H100, {})
    assert ids == (150, 140, 155, 100, 112, 240, 241, 230, 310, 311, 396, 395, 202, 409, 419, 429, 439, 158)
    assert (count, interval) == (1861, 1000)
    _, count, interval = sampling_plan(job("n1", timeout_s=7200), H100, {"dcgm_field_ids": "150,112"})
    assert interval == 2017 and count <= MAX_SAMPLES + 1
    site = Profile("p", settings={"dcgm_fields": {"ids": [100], "interval_ms": 250}})
    ids, _, interval = sampling_plan(job("n1", timeout_s=300), site, {})
    assert ids == (100,) and interval == 250


def test_hw_slowdown_under_load_names_the_host_and_gpu_and_the_clock_sag() -> None:
    findings = evaluate_telemetry([series("n1", HEALTHY), series("n2", SLOW), series("n3", HEALTHY)], H100)
    assert not_pass(findings) == [
        ("n2", "telemetry.clock_event.hw_slowdown", "gpu5", "FAIL", 10),
        ("n2", "telemetry.sm_clock.fleet_ratio", "gpu5", "WARN", 0.523),
        ("n2", "telemetry.sm_clock.node_ratio", "gpu5", "WARN", 0.523)]
    slow = next(f for f in findings if f.check == "telemetry.clock_event.hw_slowdown" and f.host == "n2")
    assert slow.message.startswith("gpu5: ") and "during hpl-hpl-node-n2 (20 samples over 19 s" in slow.message
    assert slow.source == "telemetry-hpl-hpl-node-n2" and slow.expected == "<= 1 s" and "drain" in slow.remedy
    node = next(f for f in findings if f.check == "telemetry.sm_clock.node_ratio" and f.host == "n2")
    assert "node median 1980 MHz" in node.message
    checks = {f.check for f in findings if f.host == "n1"}
    assert "telemetry.xid.last" not in checks and "telemetry.power_violation_s" not in checks  # at rest only
    assert {"telemetry.gpu_temp_c", "telemetry.xid.new", "telemetry.ecc.dbe_growth"} <= checks


def test_node_sag_compares_each_gpu_with_the_other_gpus_of_its_node() -> None:
    """On a 2-GPU node the sagging GPU must not pull the reference down with it: gpu5 at 1035 MHz vs
    its peer's 1980 MHz is 0.523 (not 0.687 of the pair's median), and the healthy peer passes."""
    table = parse_field_samples(body(SLOW))
    pair = replace(table, samples=tuple(r for r in table.samples if r.entity in ("gpu0", "gpu5")))
    findings = evaluate_telemetry([TelemetrySeries("n2", job("n2"), pair, None, (0.2, 18.5))], H100)
    node = [(f.component, f.status, f.value) for f in findings if f.check == "telemetry.sm_clock.node_ratio"]
    assert node == [("gpu5", Status.WARN, 0.523)]


def test_fleet_check_needs_three_hosts() -> None:
    findings = evaluate_telemetry([series("n1", HEALTHY), series("n2", SLOW)], H100)
    assert "telemetry.sm_clock.fleet_ratio" not in {f.check for f in findings}


def test_sampler_failures_are_errors_and_a_missing_tool_is_a_skip() -> None:
    meta = {"job": job("n1").to_json(), "job_window_s": [0.1, 3.0], "rc": 0}
    broken = read_series("<html>502</html>", "n1", meta)
    unreachable = read_series("", "n2", {**meta, "transport_error": "connection refused"})
    absent = read_series("healthcheck-sampler: none neither dcgmi nor nvidia-smi\n", "n3", meta)
    empty = read_series("healthcheck-sampler: dcgmi interval_ms=1000 count=9\n#Entity  TMPTR\nID\n", "n4", meta)
    found = {f.host: f for f in evaluate_telemetry([broken, unreachable, absent, empty], H100)}
    assert {h: (f.check, f.status) for h, f in found.items()} == {
        "n1": ("telemetry.sampler", Status.ERROR), "n2": ("telemetry.sampler", Status.ERROR),
        "n3": ("telemetry.sampler", Status.SKIP), "n4": ("telemetry.sampler", Status.SKIP)}
    assert "unreadable (exit code 0)" in found["n1"].message and "connection refused" in found["n2"].message
    assert "ended before the first round" in found["n4"].message


def test_job_view_thins_the_series_and_carries_the_limits() -> None:
    long = "\n".join([body(HEALTHY)] + [line for line in body(HEALTHY).splitlines()
                                          if line.startswith("GPU")] * 9)  # 200 rounds
    view = job_view(TelemetrySeries("n1", job("n1"), parse_field_samples(long), None, (0.0, 190.0)), H100)
    assert view["limits"] == {"gpu_temp_c": 89, "power_w": 700}
    assert view["series_columns"] == ["t_s", "gpu_temp_c", "power_w", "sm_clock_mhz"]
    points = view["series"]["gpu0"]
    assert len(points) <= MAX_POINTS and view["rounds"] == 200
    # per bucket of 4 rounds: the first time, the highest temperature and power, the lowest SM clock
    assert (points[0][0], points[0][1], points[0][3]) == (0.0, 65.0, 345.0)  # idle rounds 0-1, busy 2-3
    assert (points[1][0], points[1][1], points[1][3]) == (4.0, 69.0, 1965.0)
    assert json.loads(json.dumps(view)) == view


def test_store_load_and_merge_round_trip(tmp_path: Path) -> None:
    for host, fixture in (("n1", HEALTHY), ("n2", SLOW), ("n3", HEALTHY)):
        out = CommandResult(host, "telemetry-x", stdout=body(fixture).encode(), rc=0, duration_s=19.2)
        store_series(tmp_path, f"hpl-hpl-node-{host}", host, out,
                     {"job": job(host).to_json(), "host": host, "job_window_s": [0.2, 18.5]})
    loaded = load_series(tmp_path)
    assert [(s.host, s.job.job_id, s.job_window_s) for s in loaded] == [
        (h, f"hpl-hpl-node-{h}", (0.2, 18.5)) for h in ("n1", "n2", "n3")]
    hosts = [Host(h, profile="h100-sxm5-8x") for h in ("n1", "n2", "n3")]
    findings, observations = merge_telemetry(tmp_path, hosts, {"h100-sxm5-8x": H100}, [], {"n1": {"benchmarks": {}}})
    assert ("n2", "telemetry.clock_event.hw_slowdown", "gpu5", "FAIL", 10) in not_pass(findings)
    assert observations["n1"]["benchmarks"] == {}
    view = observations["n2"]["telemetry"]["jobs"][0]
    assert view["job_id"] == "hpl-hpl-node-n2" and view["gpus"][5]["throttle_s"]["hw_slowdown"] == 10
    meta = json.loads((tmp_path / "raw" / "_telemetry" / "hpl-hpl-node-n2" / "n2.json").read_text())
    assert meta["rc"] == 0 and meta["transport_error"] is None


_SHIM = """#!/bin/sh
case "$1" in
  discovery) exit 0;;
  dmon) trap 'echo; echo "dmon was stopped due to receiving a signal"; exit 0' TERM
        echo "#Entity         TMPTR        POWER"; echo "ID               C            W"
        echo "GPU 0           41           301.500"; : > @READY@
        while :; do sleep 0.05; echo "GPU 0           42           302.250"; done;;
esac
"""


def test_sample_during_stops_the_sampler_when_the_job_ends(tmp_path: Path, monkeypatch) -> None:
    import time

    from healthcheck.transport import open_transport

    ready = tmp_path / "first-row-written"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "dcgmi").write_text(_SHIM.replace("@READY@", str(ready)))
    (bindir / "dcgmi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    token = f"unit{os.getpid()}"
    monkeypatch.setattr("healthcheck.run.telemetry.secrets.token_hex", lambda n: token)
    local = Host("localhost", transport="local")

    def launch() -> str:  # the "job" lasts until the sampler has written its first row
        for _ in range(1000):
            if ready.exists():
                return "job done"
            time.sleep(0.01)
        return "sampler never started"

    value = sample_during(tmp_path, job("localhost", timeout_s=60), {"localhost": local}, open_transport("local"), H100,
                          {"telemetry_interval_ms": 100}, launch)
    assert value == "job done"
    stored = tmp_path / "raw" / "_telemetry" / "hpl-hpl-node-localhost"
    text = (stored / "localhost.out").read_text()
    assert text.startswith("healthcheck-sampler: dcgmi interval_ms=100 count=1201\n#Entity")
    assert "dmon was stopped due to receiving a signal" in text
    assert text.rstrip().endswith("healthcheck-sampler: stopped")
    table = load_series(tmp_path)[0].table
    assert table is not None and table.stopped and table.samples[0].values == {"gpu_temp_c": 41, "power_w": 301.5}
    assert json.loads((stored / "localhost.json").read_text())["interval_ms"] == 100
    assert not list(Path("/tmp").glob(f"hc-telemetry-{token}*"))  # stop, pid and done files removed


def test_panel_draws_limits_and_marks_the_throttled_gpu() -> None:
    view = job_view(series("n2", SLOW), H100)
    view["job_id"] = "<script>x</script>"
    panels = {p.title: p for p in host_panels({"telemetry": {"jobs": [view]}})}
    panel = panels["telemetry under load (1 job)"]
    assert panel.attention and panel.view.classes == [["bad", "", "", ""]]
    label, temp, power, clock = panel.view.rows[0]
    assert "HW throttling on gpu5" in label
    assert "limit 89" in temp and "limit 700" in power and "limit" not in clock
    assert 'class="fail" stroke-width="2.0"><title>gpu5</title>' in temp  # the page's one FAIL red
    assert "#dc2626" not in temp + power + clock
    assert "<script>" not in temp and "&lt;script&gt;" in temp


def test_a_sampler_that_ended_before_the_job_leaves_nothing_behind(tmp_path: Path, monkeypatch) -> None:
    import time

    from healthcheck.transport import open_transport

    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # neither dcgmi nor nvidia-smi: the sampler ends at once
    token = f"unitnone{os.getpid()}"
    monkeypatch.setattr("healthcheck.run.telemetry.secrets.token_hex", lambda n: token)
    finished = Path(f"/tmp/hc-telemetry-{token}.finished")

    def launch() -> str:
        for _ in range(1000):
            if finished.exists():
                return "job done"
            time.sleep(0.01)
        return "sampler never finished"

    local = Host("localhost", transport="local")
    assert sample_during(tmp_path, job("localhost", timeout_s=60), {"localhost": local}, open_transport("local"),
                         H100, {}, launch) == "job done"
    assert not list(Path("/tmp").glob(f"hc-telemetry-{token}*"))
    found = evaluate_telemetry(load_series(tmp_path), H100)
    assert [(f.check, f.status) for f in found] == [("telemetry.sampler", Status.SKIP)]


def test_at_rest_panel_flags_the_xid_and_pending_remap() -> None:
    from healthcheck.probes.dcgm_fields import observe
    from healthcheck.store.jsoncodec import to_jsonable

    table = parse_field_samples(body("dcgmi-dmon/h100-8gpu-rest-gpu2-dbe-xid48-remap-pending.txt"))
    panel = host_panels({"dcgm_fields": to_jsonable(observe(table))})[0]
    assert panel.title == "DCGM fields at rest (8 GPUs)" and panel.note == "5 samples, dcgmi-dmon"
    assert panel.view.rows[2] == ["gpu2", 33.0, 38.0, 73.25, 345.0, "", 48, "remap pending"]
    assert panel.view.classes[2] == ["", "", "", "", "", "", "bad", "bad"] and panel.attention
    assert panel.view.classes[0] == [""] * 8


def test_a_host_field_in_a_stored_series_cannot_add_a_phantom_host(tmp_path: Path) -> None:
    """Issue 29.13: a replayed bundle's ``raw/_telemetry/<job>/<host>.json`` says ``"host": "phantom"``: the
    series stays n2's (its file name), and a series filed under a host the run does not have is left out."""
    for name, claims in (("n2", "phantom"), ("ghost", "ghost")):
        out = CommandResult(name, "telemetry-x", stdout=body(SLOW).encode(), rc=0, duration_s=19.2)
        store_series(tmp_path, f"hpl-hpl-node-{name}", name, out,
                     {"job": job(name).to_json(), "host": claims, "job_window_s": [0.2, 18.5]})
    assert [s.host for s in load_series(tmp_path)] == ["ghost", "n2"]
    findings, observations = merge_telemetry(tmp_path, [Host("n2", profile="h100-sxm5-8x")],
                                             {"h100-sxm5-8x": H100}, [], {})
    assert {f.host for f in findings} == {"n2"} and set(observations) == {"n2"}
    assert ("n2", "telemetry.clock_event.hw_slowdown", "gpu5", "FAIL", 10) in not_pass(findings)
