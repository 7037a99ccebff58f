"""report.html: self-contained, escaped, with the views the acceptance report promises."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from pathlib import Path

import pytest

from healthcheck import reports
from healthcheck.reports.bench_charts import pair_threshold
from healthcheck.reports.bench_views import BenchViews
from healthcheck.reports.charts import heatmap
from healthcheck.reports.digest import load_digest, short_cited, split_source
from healthcheck.reports.html import cited_message, host_index, render_html, script_json
from tests.unit.test_report_digest import IMG_XSS, XSS, make_run


@pytest.fixture
def page(tmp_path: Path) -> str:
    return render_html(load_digest(make_run(tmp_path))).decode("utf-8")


def test_write_all_writes_every_format(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path)
    written = reports.write_all(run_dir)
    assert [p.name for p in written] == ["report.html", "junit.xml", "metrics.prom", "summary.md"]
    assert all(p.stat().st_size > 0 and p.parent == run_dir for p in written)
    assert not list(run_dir.glob("*.tmp"))
    assert reports.get("junit").write(run_dir) == run_dir / "junit.xml"
    with pytest.raises(reports.ReporterError, match="unknown reporter 'pdf'"):
        reports.write_all(run_dir, ["pdf"])


def test_node_output_is_escaped_everywhere(page: str) -> None:
    # The injected markup appears only as escaped text, never as a tag.
    assert "<script>document.title" not in page
    assert "<img src=x" not in page
    assert html.escape(XSS, quote=False) in page or "&lt;script&gt;document.title" in page
    assert "&lt;img src=x onerror=" in page
    # exactly two script elements: the JSON index and the report's own code
    assert len(re.findall(r"<script\b", page)) == 2


def test_no_external_assets_and_csp_pins_the_script(page: str) -> None:
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert "@import" not in page and "url(" not in page
    csp = re.search(r'Content-Security-Policy" content="([^"]+)"', page)
    assert csp and "default-src 'none'" in csp[1]
    code = re.search(r"<script>(.*?)</script>", page, re.S)
    assert code is not None
    digest = base64.b64encode(hashlib.sha256(code[1].encode()).digest()).decode()
    assert f"'sha256-{digest}'" in csp[1]


def test_header_counts_profiles_and_run(page: str) -> None:
    found = re.findall(r'<span class="n">(\d+)</span><span class="l">(\w+)</span>', page)
    counts = {label: int(n) for n, label in found}
    assert counts == {"FAIL": 5, "ERROR": 1, "WARN": 0, "SKIP": 0, "PASS": 1}
    assert "h100-sxm5-8x" in page and "2 min 5 s" in page and "20261122T031500Z" in page
    assert "gpu, nvlink, topology" in page


def test_problems_grouped_by_category_with_folded_hosts_and_remedy(page: str) -> None:
    problems = page[page.index('id="problems"'):page.index('id="hosts"')]
    # categories in order: widest FAIL first
    cats = re.findall(r'<span class="st st-\w+">\w+</span> (\w+)\s*<span class="muted">', problems)
    assert cats[0] == "GPU" and cats[-1] == "Run"
    assert "gpu[001-002,017]" in problems
    assert "Reset the GPU (nvidia-smi -r) to apply the pending row remap; drain first" in problems
    assert 'href="#check=gpu.row_remap.pending&amp;status=FAIL"' in problems


def test_host_details_findings_margin_panels_and_raw(page: str) -> None:
    details = page[page.index('id="details"'):]
    gpu002 = details[details.index('id="h-gpu002"'):details.index('id="h-gpu004"')]
    assert "84.0 C" in gpu002 and "&lt;= 80 C" in gpu002 and "-5.0%" in gpu002  # margin (80-84)/80
    gpu001 = details[details.index('id="h-gpu001"'):details.index('id="h-gpu002"')]
    assert "GPUs (8) NVIDIA H100 80GB HBM3" in gpu001 and "0 / 1 PENDING" in gpu001
    assert 'class="bad">0 / 1 PENDING' in gpu001
    assert "topology (nvidia-smi topo -m)" in gpu001 and '<td class="t-nv">NV18</td>' in gpu001
    assert "NIC0 (mlx5_0)" in gpu001 and "400 Gb/sec (4X NDR)" in gpu001 and "symbol_error=3" in gpu001
    gpu004 = details[details.index('id="h-gpu004"'):details.index('id="h-gpu005"')]
    assert "NVLink (1 GPUs)" in gpu004 and '<td class="bad">1 / 2</td>' in gpu004
    assert "benchmark jobs (3)" in gpu004 and "<td>gpu003, gpu004</td><td>12</td>" in gpu004
    gpu005 = details[details.index('id="h-gpu005"'):]
    raw = re.search(r"raw output: <code>kernel-log</code></summary><pre>(.*?)</pre>", gpu005, re.S)
    assert raw and "\ufffd\ufffd fallen off the bus &lt;script&gt;" in raw[1]


def test_fleet_versions_and_bench_views(page: str) -> None:
    fleet = page[page.index('id="fleet"'):page.index('id="details"')]  # the bench section now precedes the problems
    row = re.search(r"<code>gpu.driver_version</code></td><td>([^<]+)</td><td>(\d+)</td>(.*?)</tr>",
                    fleet, re.S)
    assert row and row[1] == "550.54.15" and row[2] == "5" and "535.161.08" in row[3] and "gpu005" in row[3]
    assert "1 outlier" in fleet and "gpu004" in fleet
    bench = page[page.index('id="bench"'):page.index('id="problems"')]
    assert "all_reduce_perf: busbw vs message size per node (5 nodes)" in bench
    # gpu004 in the FAIL red; the four identical healthy curves are one line, its legend naming them
    assert 'class="band"' in bench and len(re.findall("<polyline", bench)) == 2
    assert len(re.findall('class="fail" stroke-width="2.2"><title>gpu004</title>', bench)) == 1
    assert "gpu004: below the pass threshold" in bench and "gpu[001-003,005] (4 nodes, identical)" in bench
    assert "nccl all_reduce_perf: busbw (GB/s) per pair (2 pairs, 3 nodes)" in bench
    worst = re.findall(r'<td class="host">([^<]+)</td><td class="num">([^<]+)</td>', bench)
    assert worst[-2:] == [("gpu003 ↔ gpu004", "12"), ("gpu001 ↔ gpu003", "45.5")]  # lowest first
    # IMB: bandwidth from the job summary, latency parsed again from raw/_jobs/<job>.out
    assert "imb PingPong: latency (µs) per pair (1 pair, 2 nodes)" in bench
    assert ("gpu001 ↔ gpu002", "4.8") in worst
    assert "HPL GFLOPS per node (5 nodes, slowest first)" in bench
    assert 'class="bar bad"' not in bench  # no HPL expectation among the findings


def test_host_index_is_compact_and_script_safe(tmp_path: Path) -> None:
    digest = load_digest(make_run(tmp_path))
    index = host_index(digest, {"gpu001"})
    assert index["statuses"] == ["FAIL", "ERROR", "WARN", "SKIP", "PASS"]
    row = next(r for r in index["hosts"] if r[0] == "gpu002")
    assert row[1] == 0 and row[4] == [1, 0, 1, 0, 2] and row[7] == 0
    assert [index["checks"][c] for c, _ in index["shapes"][row[5]]][:2] == ["gpu.row_remap.pending", "gpu.temperature"]
    assert len(index["shapes"]) == len({tuple(map(tuple, shape)) for shape in index["shapes"]})  # each shape once
    text = str(script_json({"m": XSS + IMG_XSS + "\u2028"}))
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {"m": XSS + IMG_XSS + "\u2028"}


def test_changes_and_trends_extension_point(tmp_path: Path) -> None:
    changes = {"previous_run": "20261121T031500Z",
               "new_failures": [{"host": "gpu004", "verdict": "FAIL", "was": "PASS",
                                 "checks": ["nvlink.link.down"]}],
               "recovered": [{"host": "gpu009", "verdict": "PASS", "was": "FAIL", "checks": ["gpu.count"]}],
               "still_failing": [], "new_hosts": [], "missing_hosts": ["gpu010", "gpu011"]}
    values = [["2026-11-20", 470.0], ["2026-11-21", 468.0], ["2026-11-22", 240.0]]
    trends = {"gpu004": {"nccl.all_reduce.node.busbw": {"unit": "GB/s", "metric": "busbw", "values": values}}}
    page = render_html(load_digest(make_run(tmp_path, {"changes": changes, "trends": trends}))).decode()
    block = page[page.index('id="changes"'):page.index('id="problems"')]
    assert "20261121T031500Z" in block
    assert "new failures" in block and "PASS → FAIL" in block and "nvlink.link.down" in block
    assert "missing hosts" in block and "gpu[010-011]" in block
    detail = page[page.index('id="h-gpu004"'):page.index('id="h-gpu005"')]
    assert 'class="spark"' in detail and "<b>240.0</b> GB/s" in detail


def test_small_run_details_all_hosts_big_run_caps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import healthcheck.reports.html as report_html

    page = render_html(load_digest(make_run(tmp_path))).decode()
    assert 'id="h-gpu003"' in page  # a passing host is detailed on a small run
    monkeypatch.setattr(report_html, "DETAIL_ALL_UP_TO", 2)
    monkeypatch.setattr(report_html, "DETAIL_MAX", 3)
    page = render_html(load_digest(make_run(tmp_path / "b"))).decode()
    detailed = re.findall(r'<article class="host-detail v-\w+" id="h-([^"]+)"', page)
    assert detailed == ["gpu001", "gpu002", "gpu004"]
    assert "3 further hosts need attention" in page
    monkeypatch.setattr(report_html, "DETAIL_LIVE", 1)  # the rest as data, placeholders where they go
    run_c = make_run(tmp_path / "c")
    page = render_html(load_digest(run_c)).decode()
    assert re.findall(r'<template class="host-detail" id="t-h-([^"]+)"></template>', page) == ["gpu002", "gpu004"]
    assert re.findall(r'<article class="host-detail v-\w+" id="h-([^"]+)"', page) == ["gpu001"]
    assert list(details_data(page)) == ["gpu002", "gpu004"]
    assert details_data(page)["gpu004"]["verdict"] == "FAIL"
    # a section sent as data keeps only what its placeholder needs (its panels and rows are let go)
    context = report_html.render_context(load_digest(run_c))
    assert [sorted(x) for x in context["details"][1:]] == [["data", "host"], ["data", "host"]]
    assert "panels" in context["details"][0]


def test_big_run_counts_passing_findings_per_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import healthcheck.reports.html as report_html
    from healthcheck.core.model import Finding, Status
    from healthcheck.store.results import HostResult, RunResults, write_results

    found = [Finding("n1", "nvlink.links", Status.PASS, f"gpu{i} nvlink links 18 within == 18",
                     component=f"gpu{i}") for i in range(8)]
    found.append(Finding("n1", "gpu.count", Status.FAIL, "7 GPUs visible, expected 8", value=7, expected="== 8"))
    write_results(tmp_path, RunResults({"id": "x"}, {"n1": HostResult("n1", found)}))
    small = render_html(load_digest(tmp_path)).decode()
    assert "gpu7 nvlink links 18 within == 18" in small  # a small run lists every passing finding
    monkeypatch.setattr(report_html, "DETAIL_ALL_UP_TO", 0)
    big = render_html(load_digest(tmp_path)).decode()
    assert "7 GPUs visible, expected 8" in big and "gpu7 nvlink links 18 within" not in big
    assert "<summary>8 passing</summary>" in big and "<code>nvlink.links</code> &times;8" in big


def test_malformed_observations_and_empty_run_still_render(tmp_path: Path) -> None:
    from healthcheck.core.model import Finding, Status
    from healthcheck.store.results import HostResult, RunResults, write_results

    odd = {"gpu": "N/A", "topology": {"columns": ["GPU0"], "rows": "x"}, "nvlink": [1, 2],
           "benchmarks": {"nccl": "x", "hpl": [{"job_id": "j1", "hosts": ["n1"], "shape": "node", "metric": "?"}]},
           "infiniband": {"devices": [{"name": "mlx5_0", "ports": [None, {"port": 1}]}]},
           "newprobe": {"widgets": [{"id": 1, "<b>": "<i>x</i>"}]}}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write_results(tmp_path / "a", RunResults({"id": "a"}, {"n1": HostResult(
        "n1", [Finding("n1", "gpu.count", Status.PASS, "ok")], observations=odd)}))
    page = render_html(load_digest(tmp_path / "a")).decode()
    assert 'id="h-n1"' in page and "&lt;i&gt;x&lt;/i&gt;" in page and "<i>x</i>" not in page
    assert "newprobe" in page
    write_results(tmp_path / "b", RunResults({"id": "b"}, {}))
    empty = render_html(load_digest(tmp_path / "b")).decode()
    assert "healthcheck ERROR" in empty and "No host has a FAIL" in empty


LONG_SOURCE = ("IB ports run 4 lanes; sysfs rate shows the width, e.g. '100 Gb/sec (2X HDR)' is a degraded "
               "link (research/hardware-expectations.md 3d; ibdiagnet --lw 4x)")


def test_long_source_citation_is_folded_into_a_tooltip() -> None:
    message = f"mlx5_4/1: rate 200 Gb/sec (2X NDR): width 2X instead of 4X (source: {LONG_SOURCE}) <b>"
    assert split_source(message) == ("mlx5_4/1: rate 200 Gb/sec (2X NDR): width 2X instead of 4X <b>",
                                     LONG_SOURCE)
    shown = str(cited_message(message))
    assert shown.startswith("mlx5_4/1: rate 200 Gb/sec (2X NDR): width 2X instead of 4X &lt;b&gt; <span")
    title = re.search(r'title="([^"]*)"', shown)
    assert title and html.unescape(title[1]) == LONG_SOURCE                # full citation kept
    assert "(source: IB ports run 4 lanes; sysfs rate shows the …)" in shown
    short = "gpu3: links 17, expected >= 18 (source: hardware-expectations.md 1b)"
    assert html.unescape(str(cited_message(short))) == short and "<span" not in str(cited_message(short))
    assert split_source("no citation (x)") == ("no citation (x)", "")
    assert short_cited(message).endswith("(source: IB ports run 4 lanes; sysfs rate shows the …)")


def test_pair_heatmap_threshold_comes_from_the_pair_check() -> None:
    views = BenchViews(bands={"nccl.all_reduce.pair.busbw": (228.0, 380.0)})
    assert pair_threshold(views, "nccl all_reduce_perf busbw_gbps") == 228.0
    assert pair_threshold(views, "nccl all_gather_perf busbw_gbps") is None   # no expectation
    assert pair_threshold(views, "imb PingPong latency_us") is None
    svg = str(heatmap(["a", "b", "c"], {("a", "b"): 100.0, ("a", "c"): 300.0}, low=228.0))
    assert svg.count('class="fail"') == 2 and 'fill="rgba(37,99,235,' in svg   # a-b both ways in the FAIL red
    graded = str(heatmap(["a", "b", "c"], {("a", "b"): 3.1, ("a", "c"): 47.6}, unit="GB/s",
                         status={("a", "b"): "FAIL", ("a", "c"): "PASS"}, retests={("b", "a"): (3.0, "FAIL")}))
    assert graded.count('class="fail"') == 2 and "#dc2626" not in graded  # the job's own grade colours it
    assert "a ↔ b: 3.1 GB/s FAIL; retest: 3 GB/s FAIL" in graded and graded.count(">R</text>") == 2


def test_ib_panel_marks_a_port_slower_than_the_hosts_usual_rate() -> None:
    from healthcheck.reports.builtin_panels import infiniband_panel

    def port(n: int, rate: float, state: str = "ACTIVE", layer: str = "InfiniBand") -> dict:
        return {"port": 1, "state": state, "phys_state": "LinkUp", "rate_gbps": rate, "link_layer": layer,
                "rate_text": f"{rate:g} Gb/sec"}

    obs = {"devices": [{"name": f"mlx5_{n}", "ports": [p]} for n, p in enumerate([
        port(0, 400), port(1, 400), port(2, 200), port(3, 10, state="DOWN"), port(4, 100, layer="Ethernet")])]}
    panel = infiniband_panel(obs)
    assert panel is not None
    rate_classes = [row[3] for row in panel.view.classes]
    assert rate_classes == ["", "", "bad", "bad", ""]   # Ethernet compared only with Ethernet ports


def details_data(page: str) -> dict:
    """The host details the page carries as data (``<script type="application/json" id="hc-details">``)."""
    found = re.search(r'<script type="application/json" id="hc-details">(.*?)</script>', page, re.S)
    assert found is not None
    data = json.loads(found[1])
    strings = data["strings"]  # panel texts used more than once, by index
    assert len(strings) == len(set(strings))
    for x in data["hosts"].values():
        for p in x["panels"]:
            for key in ("rows", "classes"):
                p[key] = [[strings[v] if isinstance(v, int) else v for v in row] for row in p.get(key, [])]
    return data["hosts"]


HOSTILE = "</script><script>document.title='pwned'</script><!-- \u2028\u2029 &amp; \x1b]0;x\x07 \u202egnp.exe"


def hostile_run(tmp_path: Path) -> Path:
    """One failing host whose every field (name, profile, findings, observations, raw output) is hostile."""
    from healthcheck.core.model import Finding, Status
    from healthcheck.store.results import HostResult, RunResults, write_results

    name = "n1<!--\u2028"
    long_source = "profile says " + HOSTILE + " " + "x" * 60
    found = [Finding(name, "gpu.count" + HOSTILE, Status.FAIL, f"7 GPUs {HOSTILE} (source: {long_source})",
                     component=HOSTILE, value=HOSTILE, expected=HOSTILE, unit=HOSTILE, remedy=HOSTILE,
                     source="nvidia-smi-q-x"),
             Finding(name, "xid.event", Status.SKIP, HOSTILE, value=7, expected=">= 8", unit="GPUs"),
             Finding(name, "gpu.ecc", Status.PASS, "ok")]
    obs = {"gpu": {"gpus": [{"index": 0, "name": HOSTILE, "vbios": HOSTILE}]},
           "newprobe": {"widgets": [{"id": 1, HOSTILE: HOSTILE}]}, "note": {"text": HOSTILE}}
    tmp_path.mkdir(parents=True, exist_ok=True)
    write_results(tmp_path, RunResults({"id": "x"}, {
        name: HostResult(name, found, observations=obs, profile=HOSTILE, group=HOSTILE, address=HOSTILE),
        "n2": HostResult("n2", [Finding("n2", "gpu.ecc", Status.PASS, "ok")])}))
    (tmp_path / "raw" / name).mkdir(parents=True)  # an output opening with a newline
    (tmp_path / "raw" / name / "nvidia-smi-q-x.out").write_bytes(b"\n" + HOSTILE.encode() + b"\xff\n")
    return tmp_path


def test_host_details_as_data_keep_node_text_inert(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import healthcheck.reports.html as report_html
    from healthcheck.core.textsafe import printable

    monkeypatch.setattr(report_html, "DETAIL_ALL_UP_TO", 0)
    monkeypatch.setattr(report_html, "DETAIL_LIVE", 0)
    page = render_html(load_digest(hostile_run(tmp_path))).decode()
    block = re.search(r'<script type="application/json" id="hc-details">(.*?)</script>', page, re.S)
    assert block is not None
    for raw in ("<", ">", "&", "\u2028", "\u2029", "\x1b", "\u202e"):
        assert raw not in block[1]
    assert len(re.findall(r"<script\b", page)) == 3 and len(re.findall(r"</script>", page)) == 3
    shown = printable(HOSTILE)
    data = details_data(page)
    assert list(data) == [printable("n1<!--\u2028")]
    x = data[printable("n1<!--\u2028")]
    assert x["head"] == f"{shown} · {shown} · {shown}"
    row = x["bad"][0]
    assert row[:6] == ["FAIL", "gpu.count" + shown, shown, f"{shown} {shown}", shown, ""]
    assert row[7][0] == f"7 GPUs {shown}" and row[7][1].startswith("profile says " + shown)
    assert row[8:] == [shown, "nvidia-smi-q-x"]
    assert x["skipped"][0][3:7] == ["7 GPUs", ">= 8", "-12.5%", 1]
    assert x["good_count"] == 1 and x["good_summary"] == [["gpu.ecc", 1]]
    panels = {p["title"].split(" ")[0]: p for p in x["panels"]}
    assert panels["GPUs"]["title"] == f"GPUs (1) {shown}" and panels["GPUs"]["rows"] == [["0", shown, shown]]
    assert panels["newprobe"]["columns"] == ["id", shown] and panels["newprobe"]["rows"] == [["1", shown]]
    assert panels["note"]["rows"] == [["text", shown]]
    assert x["raw"] == [["nvidia-smi-q-x", f"{shown}\ufffd\n"]]  # as the parser drops the newline after <pre>


def test_detail_data_leaves_markup_only_sections_as_templates(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import healthcheck.reports.html as report_html

    monkeypatch.setattr(report_html, "DETAIL_ALL_UP_TO", 0)
    monkeypatch.setattr(report_html, "DETAIL_LIVE", 0)
    trends = {"gpu004": {"nccl.all_reduce.node.busbw": {"unit": "GB/s", "values": [["d1", 470.0], ["d2", 240.0]]}}}
    page = render_html(load_digest(make_run(tmp_path, {"trends": trends}))).decode()
    assert "gpu004" not in details_data(page) and "gpu001" in details_data(page)
    kept = re.search(r'<template class="host-detail" id="t-h-gpu004">(.*?)</template>', page, re.S)
    assert kept is not None and 'class="spark"' in kept[1] and 'id="h-gpu004"' in kept[1]
    assert '<template class="host-detail" id="t-h-gpu001"></template>' in page


def test_manifest_shows_every_field_and_counts_a_long_host_list() -> None:
    """The page's "what ran" keeps every manifest field; past MANIFEST_HOSTS hosts the list itself is left to
    manifest.json (at 10,000 hosts it was 2 MB of the page), escaped like any other text."""
    from healthcheck.reports.html import MANIFEST_HOSTS, manifest_text

    few = {"args": ["healthcheck", "run", "-i", "<lab>.yaml"], "hosts": [{"name": "gpu001"}, {"name": "gpu002"}]}
    assert json.loads(manifest_text(few)) == few
    many = {**few, "hosts": [{"name": f"gpu{i:05d}"} for i in range(MANIFEST_HOSTS + 1)]}
    shown = json.loads(manifest_text(many))
    assert shown == {**few, "hosts": f"{MANIFEST_HOSTS + 1} hosts: listed in manifest.json"}


def test_manifest_in_the_page_is_escaped(page: str) -> None:
    start = page.index('<details class="manifest">')
    block = page[start:page.index("</details>", start)]
    assert "lab.yaml" in block and "<script" not in block


def test_a_folded_group_lists_each_hosts_own_detail(tmp_path: Path) -> None:
    """2,000 unknown host keys are one line on the console; the report's group lists each host's fingerprint."""
    from healthcheck.core.model import Finding, Status
    from healthcheck.reports.digest import digest_of, group_findings
    from healthcheck.store.results import HostResult, RunResults

    prints = {f"node{i:03d}": f"SHA256:{chr(64 + i) * 43}" for i in range(1, 4)}
    findings = {h: [Finding(host=h, check="host.reachable", status=Status.ERROR,
                            message=f"{h}: host key for {h} is not in known_hosts (ssh-ed25519 {fp})")]
                for h, fp in prints.items()}
    [group] = group_findings(f for fs in findings.values() for f in fs)
    assert group.similar == [("node002", f"node002: host key for node002 is not in known_hosts (ssh-ed25519 "
                                         f"{prints['node002']})"),
                             ("node003", f"node003: host key for node003 is not in known_hosts (ssh-ed25519 "
                                         f"{prints['node003']})")]
    results = RunResults(run={"id": "r"}, hosts={h: HostResult(name=h, findings=fs) for h, fs in findings.items()})
    page = render_html(digest_of(tmp_path, results)).decode()
    problems = page[page.index('id="problems"'):page.index('id="hosts"')]
    assert "+2 similar" in problems and all(fp in problems for fp in prints.values())


def test_header_names_failing_nodes_as_nodesets_linked_to_their_details(tmp_path: Path, page: str) -> None:
    from healthcheck.core.model import Finding, Status
    from healthcheck.reports.attention import HOSTS_LINKED, attention
    from healthcheck.reports.digest import digest_of
    from healthcheck.store.results import HostResult, RunResults

    header = page[page.index('<header'):page.index('</header>')]
    assert '<span class="st st-FAIL">FAIL</span> <span class="nodeset">gpu[001-002,004-005,017]</span>' in header
    assert '<a class="host" href="#h-gpu001">gpu001</a> <code>gpu.row_remap.pending</code>' in header
    assert '<span class="st st-ERROR">ERROR</span> <span class="nodeset">node-a</span>' in header
    hosts = {f"n{i:03d}": HostResult(name=f"n{i:03d}", findings=[
        Finding(host=f"n{i:03d}", check="gpu.count", status=Status.FAIL, message="7 GPUs")]) for i in range(1, 21)}
    [fail] = attention(digest_of(tmp_path, RunResults(run={"id": "r"}, hosts=hosts)), detailed={"n001"})
    assert (fail["nodeset"], fail["count"], fail["unlisted"], fail["href"]) == ("n[001-020]", 20, 8, "#status=FAIL")
    assert len(fail["hosts"]) == HOSTS_LINKED
    assert [h["href"] for h in fail["hosts"][:2]] == ["#h-n001", "#host=n002"]  # no detail section: the host table


def test_fabric_counters_panel_lists_non_zero_fault_counters_per_port_with_the_rate_since_boot() -> None:
    """The rates observation of our RoCE pause-storm fixtures: fault counters shown, traffic volume left out."""
    from healthcheck.core.model import CommandResult
    from healthcheck.probes.rates import parse_rates
    from healthcheck.reports.builtin_panels import fabric_counters_panel
    from healthcheck.store.jsoncodec import to_jsonable
    from tests.conftest import fixture_text

    texts = {"counter-clock": "1795000000\n5c3e1c0e-0d3b-4a53-9a57-4e0fb3a5d2c1\n43200.00 1.00\n",
             "ib-sysfs": fixture_text("ib/sysfs-roce-2port-hw-counters-t1-mlx5_1-rnr-timeouts-cnp-storm.txt"),
             "ethtool-stats": fixture_text("ethtool/ethtool-stats-2port-t1-ens2f0np0-pause-storm-flaps.txt")}
    obs = to_jsonable(parse_rates({c: CommandResult(host="n", command_id=c, stdout=t.encode(), rc=0)
                                   for c, t in texts.items()}))
    panel = fabric_counters_panel(obs)
    assert panel is not None and panel.note == "uptime 12.0 h"
    rows = {(r[0], r[2]): (r[1], r[3], r[4]) for r in panel.view.rows}
    assert rows[("mlx5_1 ens2f0np0", "tx_prio3_pause")] == ("ethtool", 41001791, "3,416,815.9")
    assert rows[("mlx5_1/1", "rnr_nak_retry_err")] == ("mlx5 hw", 2, "0.2")
    assert not [k for k in rows if k[1] in ("port_xmit_data", "rx_bytes_phy", "rx_write_requests", "lifespan")]
    assert fabric_counters_panel({"counters": {}}) is None and fabric_counters_panel(None) is None
