"""The report's fabric counters: the fleet heat list of the worst ports by rate and the before/after table of
each benchmark job, in report.html and summary.md, with node text (port names) kept inert."""

from __future__ import annotations

import html
import json
import pickle
import re
from pathlib import Path

from healthcheck.reports.digest import load_digest
from healthcheck.reports.fabric_views import fabric_context, fabric_jobs_panel
from healthcheck.reports.html import render_html
from healthcheck.reports.markdown import render_markdown
from tests.unit.test_report_digest import XSS, finding, make_run

JOB = "nccl-all_reduce_perf-pair-gpu002-gpu003"
HOSTILE = f"mlx5_1 {XSS}\u202e"  # a port name as a node could send it


def fabric_run(tmp_path: Path) -> Path:
    """make_run's run with rates counters on gpu002/gpu003 and their counters around one pair job."""
    run_dir = make_run(tmp_path)
    doc = json.loads((run_dir / "results.json").read_text())
    two, three = doc["hosts"]["gpu002"], doc["hosts"]["gpu003"]
    two["observations"]["rates"] = {"uptime_s": 3600.0, "counters": {
        "eth": {HOSTILE: {"tx_prio3_pause": 36000, "rx_bytes_phy": 10**12}},
        "ib": {"mlx5_0/1": {"symbol_error": 0, "port_xmit_wait": 720, "port_xmit_data": 10**9}}}}
    three["observations"]["rates"] = {"uptime_s": 7200.0, "counters": {
        "eth": {"mlx5_1 ens2f0np0": {"tx_prio3_pause": 100}}, "ib": {"mlx5_0/1": {"port_xmit_wait": 25920}}}}
    two["observations"]["fabric_jobs"] = {"jobs": [{"job_id": JOB, "check": "nccl.all_reduce", "window_s": 95.0,
                                                    "ports": 4, "rows": [
                                                        [HOSTILE, "eth", "tx_prio3_pause", 1411, 42431, 41020, 410.2],
                                                        ["x", "eth", "y", "1", 2, 1, None]]}]}  # malformed: skipped
    three["observations"]["fabric_jobs"] = {"jobs": [{"job_id": JOB, "check": "nccl.all_reduce", "window_s": 95.0,
                                                      "ports": 4, "rows": [
                                                          ["mlx5_1 ens2f0np0", "eth", "tx_prio3_pause", 1411, 1431,
                                                           20, 0.2]]}]}
    two["findings"].append(finding("gpu002", "nccl.all_reduce.fabric.eth.tx_prio3_pause", "WARN",
                                   f"{HOSTILE}: 41,020 tx_prio3_pause (pause frames) during job {JOB} (95 s): ...",
                                   component=HOSTILE))
    (run_dir / "results.json").write_text(json.dumps(doc))
    return run_dir


def rows(page: str, css: str) -> list[list[str]]:
    start = page.index(f'<table class="grid {css}">')
    body = page[page.index("<tbody>", start):page.index("</tbody>", start)]
    return [[html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", r)]
            for r in body.split("</tr>") if "<td" in r]


def test_heat_list_and_job_table_in_report_html(tmp_path: Path) -> None:
    digest = load_digest(fabric_run(tmp_path))
    page = render_html(digest).decode()
    shown = "mlx5_1 " + XSS + "\\u202e"  # escaped by the page, the bidi override made visible
    # per hour since boot, highest first; the fleet median of the same counter over every port read
    assert rows(page, "fabric-heat") == [
        ["gpu002", shown, "ethtool", "tx_prio3_pause", "36,000.0", "36,000", "18,025.0", "2×"],
        ["gpu003", "mlx5_0/1", "IB port", "port_xmit_wait", "12,960.0", "25,920", "6,840.0", "2×"],
        ["gpu002", "mlx5_0/1", "IB port", "port_xmit_wait", "720.0", "720", "6,840.0", "0×"],
        ["gpu003", "mlx5_1 ens2f0np0", "ethtool", "tx_prio3_pause", "50.0", "100", "18,025.0", "0×"]]
    assert rows(page, "fabric-job") == [
        ["gpu002", shown, "eth.tx_prio3_pause", "1411", "42431", "41020", "410.20", "WARN"],
        ["gpu003", "mlx5_1 ens2f0np0", "eth.tx_prio3_pause", "1411", "1431", "20", "0.20", ""]]
    assert f"Job <code>{JOB}</code>: counters before and after (1 min 35 s)" in page
    assert '<a href="#h-gpu002">gpu002</a>' in page and '<a href="#fabric">Fabric counters</a>' in page
    assert XSS not in page and "\u202e" not in page
    # the host's own panel: its counters that moved per job
    panel = fabric_jobs_panel(digest.observations(digest.results.hosts["gpu003"])["fabric_jobs"])
    assert panel is not None and panel.view.rows == [[JOB, "mlx5_1 ens2f0np0", "eth.tx_prio3_pause", 1411, 1431, 20,
                                                      "0.20"]]
    assert "fabric counters during benchmark jobs (1 moved)" in page


def test_summary_md_lists_the_worst_ports_and_each_jobs_worst_counter(tmp_path: Path) -> None:
    summary = render_markdown(load_digest(fabric_run(tmp_path))).decode()
    assert "### Fabric counters: worst ports by rate" in summary
    assert "| `gpu003` | mlx5\\_0/1 | `port_xmit_wait` | 12,960.0 | 2× |" in summary
    assert (f"- `{JOB}`: 2 counters moved; worst `gpu002` mlx5\\_1 \\<script\\>") in summary
    assert ": 41,020 during the job, 410.20 per GB moved (WARN)" in summary
    assert "<script>" not in summary


def test_no_fabric_counters_no_section(tmp_path: Path) -> None:
    digest = load_digest(make_run(tmp_path))
    assert fabric_context(digest)["heat"] == [] and fabric_context(digest)["jobs"] == []
    page = render_html(digest).decode()
    assert 'id="fabric"' not in page and "Fabric counters" not in render_markdown(digest).decode()


def test_the_store_is_read_for_fabric_views_only_when_the_run_can_have_stored_them(tmp_path: Path) -> None:
    from healthcheck.reports.fabric_views import _stored_fabric

    run_dir = fabric_run(tmp_path)
    doc = json.loads((run_dir / "results.json").read_text())
    for probes, benchmarks, wanted in ((["gpu", "nvlink"], False, ()), (["gpu", "rates"], False, ("rates",)),
                                       (["gpu"], True, ("fabric_jobs",)), (None, False, ("rates",))):
        doc["run"]["probes"] = probes
        for host in doc["hosts"].values():
            host["observations"].pop("benchmarks", None)
        if benchmarks:
            doc["hosts"]["gpu002"]["observations"]["benchmarks"] = {"jobs": []}
        (run_dir / "results.json").write_text(json.dumps(doc))
        assert _stored_fabric(load_digest(run_dir)) == wanted
    # what results.json holds itself is shown whatever the store holds (the heat list of the inline counters)
    assert [r["host"] for r in fabric_context(load_digest(run_dir))["heat"]][:2] == ["gpu002", "gpu003"]


def test_the_fleet_stage_works_out_the_heat_list_the_report_shows_and_the_report_takes_it(tmp_path: Path) -> None:
    """results.json ``fabric_heat``: the fleet stage's fleet view gives the rows the report would work out from
    each host's ``rates``; a report takes the section as written, and works the list out itself when the
    section is missing or not of its shape."""
    from healthcheck import probes as probe_registry
    from healthcheck.core.model import Host
    from healthcheck.reports.fabric_views import FABRIC_HEAT
    from healthcheck.run.fleetinputs import fleet_inputs
    from healthcheck.run.gradepool import Graded
    from healthcheck.run.plan import RunPlan
    from healthcheck.run.post import fleet_stage
    from healthcheck.store.observation_store import key_observations
    from healthcheck.store.results import HostResult

    run_dir = fabric_run(tmp_path)
    worked_out = fabric_context(load_digest(run_dir))
    shown = [{k: v for k, v in row.items() if k != "href"} for row in worked_out["heat"]]
    assert [(r["host"], r["counter"], r["per_hour"], r["median_per_hour"]) for r in shown][:2] == [
        ("gpu002", "tx_prio3_pause", 36000.0, 18025.0), ("gpu003", "port_xmit_wait", 12960.0, 6840.0)]
    doc = json.loads((run_dir / "results.json").read_text())
    observations = {name: {"rates": host["observations"]["rates"]} for name, host in doc["hosts"].items()
                    if "rates" in host["observations"]}
    results = {name: HostResult(name=name, observations=key_observations(obs), compared=fleet_inputs(obs))
               for name, obs in observations.items()}
    # the heat list and fleet.fabric_counters keep the same counters: one object, sent and held once
    sent = pickle.loads(pickle.dumps(Graded("gpu002", [], {}, b"", compared=results["gpu002"].compared))).compared
    assert sent["fabric_heat"]["rates"]["counters"]["eth"] is sent["fleet.fabric_counters"]["rates"]["counters"]["eth"]
    assert sent["fabric_heat"] == results["gpu002"].compared["fabric_heat"]
    plan = RunPlan(mode="replay", hosts=[Host(name=n) for n in results], profiles={},
                   probes=[probe_registry.get("rates")], options={}, plans={"": []}, profile_of={})
    tables: dict = {}
    fleet_stage(results, plan, None, tables)
    assert tables == {"fabric_heat": {"heat": shown, "heat_total": worked_out["heat_total"],
                                      "timed_hosts": worked_out["timed_hosts"]}}
    assert tables["fabric_heat"]["timed_hosts"] == 2 and tables["fabric_heat"]["heat_total"] == 4
    assert FABRIC_HEAT.keep("rates", "garbage") is None
    # written into results.json, the section is what the report shows (here told apart by one edited rate)
    section = json.loads(json.dumps(tables["fabric_heat"]))
    section["heat"][0]["per_hour"] = 99999.0
    (run_dir / "results.json").write_text(json.dumps({**doc, "fabric_heat": section}))
    assert fabric_context(load_digest(run_dir))["heat"][0]["per_hour"] == 99999.0
    for broken in ({**section, "heat_total": -1}, {**section, "heat": [{"host": 7}]}, [], "x"):
        (run_dir / "results.json").write_text(json.dumps({**doc, "fabric_heat": broken}))
        assert fabric_context(load_digest(run_dir))["heat"] == worked_out["heat"]
