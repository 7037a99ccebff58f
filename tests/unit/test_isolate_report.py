"""What the product makes of an isolation: the group jobs' expectations and launch lines, their waves, the
findings and re-statements, the trail a replay reads, and the story in report.html and summary.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from healthcheck.benchmarks import BenchContext
from healthcheck.benchmarks.isolate import IsolationSettings, conclude, drive
from healthcheck.benchmarks.isolate_report import Trail, isolation_findings, probe_job, restate, story
from healthcheck.benchmarks.launch import LauncherSettings, launch_script, launcher_argv
from healthcheck.benchmarks.nccl import evaluate_nccl, nccl_program, parse_nccl_tests
from healthcheck.benchmarks.nccl_groups import busbw_expectation
from healthcheck.benchmarks.plan import Job
from healthcheck.benchmarks.topology import build_layout
from healthcheck.core.model import Finding, Host, Status
from healthcheck.core.profiles import Expectation, Profile, load_profile
from healthcheck.reports.digest import load_digest
from healthcheck.reports.html import render_html
from healthcheck.reports.markdown import render_markdown
from healthcheck.run.benchmarks import _waves, replay_benchmarks
from healthcheck.run.isolation import TRAILS, read_trails
from tests.nccl_render import render_all_reduce
from tests.unit.test_isolate import Oracle, make_layout
from tests.unit.test_report_digest import make_run


def test_group_expectations_come_from_the_profiles_own() -> None:
    profile = load_profile("h100-sxm5-8x")
    group = busbw_expectation(profile, "nccl.all_reduce", "group")
    assert (group.key, group.value, group.unit) == ("nccl.all_reduce.group.busbw_gbps", 380, "GB/s")
    assert group.source.startswith("8x NDR per node -> 370-390 GB/s")
    assert group.source.endswith("as nccl.all_reduce.cluster.busbw_gbps: busbw does not depend on the node count "
                                 "(nccl-tests doc/PERFORMANCE.md)")
    assert busbw_expectation(profile, "nccl.all_reduce", "group_rail").value == 47
    pair_only = Profile("p", expectations={"nccl.all_reduce.pair.busbw_gbps": Expectation(
        "nccl.all_reduce.pair.busbw_gbps", "src", value=192, unit="GB/s")})
    assert busbw_expectation(pair_only, "nccl.all_reduce", "group").value == 192
    assert busbw_expectation(pair_only, "nccl.all_reduce", "group_rail") is None
    # graded like any job: 3 nodes at 120 GB/s is 32 % of 380, FAIL, naming the group and the derived source
    job = Job("j", "nccl", "all_reduce_perf", "group", ("a", "b", "c"), 8)
    found = evaluate_nccl(job, parse_nccl_tests(render_all_reduce(["a", "b", "c"], 8, 120.0)),
                          BenchContext(profile, {}))
    busbw = [f for f in found if f.check == "nccl.all_reduce.group.busbw"]
    assert [(f.host, f.status, f.component) for f in busbw] == [(h, Status.FAIL, "group a,b,c") for h in "abc"]
    assert "as nccl.all_reduce.cluster.busbw_gbps" in busbw[0].message
    skip = evaluate_nccl(job, parse_nccl_tests(render_all_reduce(["a", "b", "c"], 8, 120.0)),
                         BenchContext(Profile("empty"), {}))
    assert {f.status for f in skip if f.check.endswith(".busbw")} == {Status.SKIP}


def test_a_rail_job_runs_one_gpu_beside_its_hca() -> None:
    profile = load_profile("h100-sxm5-8x")
    trail = Trail("nccl", "all_reduce_perf", profile.name, make_layout(8, 4), IsolationSettings(), 8)
    layout_probe = drive(trail.layout, trail.settings, lambda probes: [True] * len(probes))[0][0].probe
    assert probe_job(trail, layout_probe).job_id == "nccl-all_reduce_perf-isolate-r1-screen-h000-2nodes"
    job = Job("nccl-x", "nccl", "all_reduce_perf", "group_rail", ("gpu001", "gpu002"), 1, rail="mlx5_3:1")
    program = nccl_program(job, profile, {})
    assert program.env["NCCL_IB_HCA"] == "=mlx5_3:1" and program.env["CUDA_VISIBLE_DEVICES"] == "3"
    assert program.argv[program.argv.index("-g") + 1] == "1"
    mapped = nccl_program(job, profile, {"nccl.rail_gpus": {"mlx5_3:1": 6}})
    assert mapped.env["CUDA_VISIBLE_DEVICES"] == "6"
    srun = LauncherSettings(kind="srun")
    argv = launcher_argv(program, nodes=job.hosts, ranks_per_host=1, timeout_s=60, settings=srun)
    assert argv[:3] == ["srun", "--nodes=2", "--ntasks-per-node=1"]
    assert "export CUDA_VISIBLE_DEVICES=3" in launch_script(argv, program, None, srun)


def test_rail_jobs_of_one_host_share_a_wave_whole_host_jobs_do_not() -> None:
    def job(name: str, shape: str, hosts: tuple[str, ...], rail: str | None = None) -> Job:
        return Job(name, "nccl", "t", shape, hosts, 1 if shape == "group_rail" else 8, stage=702, rail=rail)

    jobs = [job("r0", "group_rail", ("a", "b"), "r0"), job("r1", "group_rail", ("a", "b"), "r1"),
            job("g", "group", ("b", "c")), job("r0again", "group_rail", ("a", "d"), "r0"),
            job("pinned", "rail", ("c", "d"), "r1")]
    assert [[j.job_id for j in wave] for wave in _waves(jobs)] == [["r0", "r1", "pinned"], ["g", "r0again"]]


def _finding(host: str, check: str, status: Status, source: str) -> Finding:
    return Finding(host=host, check=check, status=status, message=f"{check} on {host}", source=source)


def test_findings_and_restatements() -> None:
    layout = make_layout()
    outcomes, complete = drive(layout, IsolationSettings(), Oracle(layout, bad=["h005"], leaves=["L3"],
                                                                   unlucky=["r1.screen.h016.4"]))
    result = conclude(layout, outcomes, IsolationSettings(), complete)
    trail = Trail("nccl", "all_reduce_perf", "p", layout, IsolationSettings(), 8)
    found = isolation_findings("nccl.all_reduce", trail, result)
    node = {f.host: f for f in found if f.check == "nccl.all_reduce.isolate.node"}
    assert len(node) == 64 and node["h005"].status is Status.FAIL and node["h005"].remedy.startswith("Drain")
    assert {f.status for h, f in node.items() if h != "h005"} == {Status.PASS}
    leaf = [f for f in found if f.check == "nccl.all_reduce.isolate.leaf"]
    assert len(leaf) == 16 and {(f.status, f.component) for f in leaf} == {(Status.WARN, "leaf L3")}
    screen = "r1.screen.h004.4"
    job_findings = [_finding(h, "nccl.all_reduce.group.busbw", Status.FAIL, screen) for h in ("h004", "h005")]
    job_findings.append(_finding("h004", "nccl.all_reduce.data", Status.PASS, screen))
    again = restate(job_findings, screen, result)
    assert [(f.host, f.status) for f in again] == [("h004", Status.PASS), ("h005", Status.FAIL), ("h004", Status.PASS)]
    assert "[attributed to h005: its screen group 2" in again[0].message
    unlucky = restate([_finding("h016", "nccl.all_reduce.group.busbw", Status.FAIL, "x"),
                       _finding("h016", "nccl.all_reduce.data", Status.FAIL, "x")], "r1.screen.h016.4", result)
    assert [f.status for f in unlucky] == [Status.WARN, Status.FAIL]  # corruption is never softened
    assert unlucky[0].message.endswith("[not reproduced: every host and link of this job passed its follow-up]")
    fabric = next(o.probe.key for o in outcomes if not o.ok and o.probe.purpose == "fabric")
    crossed = restate([_finding("h048", "nccl.all_reduce.group_rail.busbw", Status.FAIL, "y")], fabric, result)
    assert crossed[0].status is Status.WARN and "[attributed to leaf L3: " in crossed[0].message
    assert restate(job_findings, "r9.unknown", result) == job_findings


def test_trail_round_trip_and_a_damaged_trail(tmp_path: Path) -> None:
    trail = Trail("nccl", "all_reduce_perf", "p", make_layout(8, 4), IsolationSettings(group_size=4), 8, 600.0)
    assert Trail.from_json(json.loads(json.dumps(trail.to_json()))) == trail
    for bad in ({**trail.to_json(), "ranks_per_host": 0}, {**trail.to_json(), "layout": {"hosts": "a"}}, "x",
                {**trail.to_json(), "settings": {"group_size": 1}}):
        with pytest.raises(ValueError):
            Trail.from_json(bad)
    path = tmp_path / TRAILS
    path.parent.mkdir(parents=True)
    path.write_text('{"schema": "healthcheck.isolation/1", "isolations": [{"benchmark": "nccl"}]}')
    trails, problems = read_trails(tmp_path)
    assert trails == [] and problems == [f"{TRAILS} isolation 0 unusable: an isolation entry lacks its benchmark, "
                                         "test or profile"]
    path.write_text("{not json")
    hosts = [Host("a"), Host("b")]
    findings, _ = replay_benchmarks(tmp_path, hosts, {}, {})
    assert [(f.host, f.check, f.status) for f in findings] == [("a", "benchmarks.replay", Status.ERROR),
                                                               ("b", "benchmarks.replay", Status.ERROR)]
    assert "the isolation cannot be replayed" in findings[0].message


def test_the_story_in_report_html_and_summary_md(tmp_path: Path) -> None:
    layout = build_layout([(f"h{i:03d}", {"leaf": f"L{i // 16}"}) for i in range(64)], rails=["r0", "r1"])
    outcomes, complete = drive(layout, IsolationSettings(), Oracle(layout, bad=["h005"], links=[("h040", "r1")]))
    result = conclude(layout, outcomes, IsolationSettings(), complete)
    trail = Trail("nccl", "all_reduce_perf", "h100-sxm5-8x", layout, IsolationSettings(), 8)
    told = story(trail, result, {probe_job(trail, o.probe).job_id: 100.0 for o in outcomes if not o.ok})
    assert [(b["kind"], b["subject"], b["hosts"]) for b in told["blamed"]] == \
        [("node", "h005", "h005"), ("link", "h040 r1", "h040")]
    assert told["blamed"][0]["evidence"][0] == "nccl-all_reduce_perf-isolate-r1-screen-h004-4nodes"
    digest = load_digest(make_run(tmp_path, extra={"isolation": [told]}))
    html = render_html(digest).decode()
    assert '<section id="isolation">' in html and "Isolation: who is to blame" in html
    assert "round 1 screen: group 2 (cell L0) (h[004-007]): FAIL 100 GB/s" in html
    assert ("round 3 confirm: h005 with known-good h000 rail by rail: 0 of 2 rails pass; FAIL on r0 100 GB/s; "
            "r1 100 GB/s") in html
    assert "blamed on h005" in html
    md = render_markdown(digest).decode()
    assert "### Isolation: nccl all\\_reduce\\_perf on profile h100-sxm5-8x" in md
    assert "- **blamed** node `h005` (`h005`): its screen group 2 (cell L0) failed;" in md
    assert "  - round 2 split: h005 with known-good h001: FAIL 100 GB/s → blamed on h005" in md
    assert "      - round 4 relink: h040 with known-good h034 on r1: FAIL 100 GB/s → blamed on h040 r1" in md


def test_topology_file_gives_leaves_or_one_warning_per_host(tmp_path: Path) -> None:
    from healthcheck.run.isolation import fabric_leaves

    hosts = [Host("gpu001"), Host("gpu003")]
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "ib" / "ibnetdiscover-topology-rail-optimised-2su.txt"
    assert fabric_leaves({"topology": str(fixture)}, hosts) == \
        ({"gpu001": "leaf-su1-r0+leaf-su1-r1", "gpu003": "leaf-su2-r0+leaf-su2-r1"}, [])
    (tmp_path / "other.txt").write_text("CA   1  1 0x1 4x EDR - SW  2 3 0x2 ( 'x9 HCA-1' - 'leaf' )\n")
    for path, why in ((tmp_path / "absent.txt", "cannot read the topology file"),
                      (tmp_path / "other.txt", "names none of these hosts")):
        leaves, warnings = fabric_leaves({"topology": str(path)}, hosts)
        assert leaves == {} and [(f.host, f.check, f.status) for f in warnings] == \
            [("gpu001", "benchmarks.topology", Status.WARN), ("gpu003", "benchmarks.topology", Status.WARN)]
        assert why in warnings[0].message and "the isolation ran without the leaves" in warnings[0].message


def test_unusable_isolation_settings_are_an_error_naming_them(tmp_path: Path) -> None:
    from healthcheck.run.benchmarks import execute_benchmarks

    hosts = [Host(f"n{i}", profile="h100-sxm5-8x") for i in range(4)]
    options = {"benchmarks": ["nccl"], "plan": "isolate", "nccl.isolate": {"group_size": 1}}
    findings, _ = execute_benchmarks(tmp_path, hosts, {"h100-sxm5-8x": load_profile("h100-sxm5-8x")}, None,
                                     options, set())
    errors = [f for f in findings if f.status is Status.ERROR]
    assert [(f.host, f.check) for f in errors] == [(h.name, "nccl.isolate.settings") for h in hosts]
    assert errors[0].message == "nccl: isolation not run: isolate.group_size must be at least 2"
    assert not (tmp_path / "raw" / "_jobs" / "manifest.json").exists()  # nothing launched
