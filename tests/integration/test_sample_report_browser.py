"""The sample's report.html (``healthcheck run --sample``) in a real headless Chromium: the whole story.

Verdict first, with the failing node named in the header and linked to its details, then "Bandwidth
vs expectation" (busbw curve per node with its band and a legend naming every node, pair heatmaps in
the FAIL red naming the node the attribution blames, its retest told as a retest, HPL per node, IMB
pairs), then the probe findings; the telemetry panel of the throttling GPU in node03's details;
nothing loaded from outside the page. A 1400 px screenshot of the first screen is kept beside the
report (report-1400.png) for a person to look at. Needs Debian's ``chromium``; skipped when it is absent.
"""

from __future__ import annotations

import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_report_browser import CHROMIUM, chromium

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if CHROMIUM is None:
        pytest.skip("chromium not installed (apt-get install chromium)")
    out = tmp_path_factory.mktemp("sample")
    subprocess.run([sys.executable, "-m", "healthcheck", "run", "--sample", "--out", str(out)],
                   capture_output=True, text=True, timeout=300, check=False)
    [run_dir] = [p for p in out.iterdir() if not p.is_symlink()]
    html = (run_dir / "report.html").read_text()
    # self-contained: no script, style, image or frame fetched from anywhere
    assert not re.search(r'<(script|img|iframe|link)[^>]+(src|href)="(https?:)?//', html)
    return run_dir / "report.html"


@pytest.fixture(scope="module")
def dom(report: Path) -> str:
    return chromium(report, "", "--dump-dom", "--window-size=1400,900")


def test_header_names_the_failing_node_first_linked_to_its_details(dom: str) -> None:
    header = re.search(r'<header class="top[^"]*">(.*?)</header>', dom, re.S)
    assert header is not None
    rows = re.findall(r'<span class="st st-(\w+)">\w+</span> <span class="nodeset">([^<]+)</span>', header[1])
    assert rows == [("FAIL", "h100-node03"), ("WARN", "h100-node04")]
    links = re.findall(r'<a class="host" href="#h-([^"]+)">([^<]+)</a>', header[1])
    assert links == [("h100-node03", "h100-node03"), ("h100-node04", "h100-node04")]
    assert "<code>gpu.pcie.width</code>" in header[1]  # with the checks that put it there
    assert dom.index("h100-node03") > dom.index("<header")  # its first mention on the page is the header's
    assert dom.index("h100-node03") < dom.index("</header>")
    assert 'id="h-h100-node03"' in dom  # the link has its target


def test_first_screen_at_1400_px(report: Path) -> None:
    shot = report.with_name("report-1400.png")
    chromium(report, "", f"--screenshot={shot}", "--window-size=1400,900", "--hide-scrollbars")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", data[16:24]) == (1400, 900)
    assert len(data) > 50_000  # a rendered page, not a blank canvas


def test_fail_is_one_red_and_charts_carry_units_legends_and_thresholds(report: Path, dom: str) -> None:
    page = report.read_text()
    assert "#dc2626" not in page  # no chart red of its own: FAIL is var(--fail) everywhere
    assert "svg .fail { stroke: var(--fail); }" in page
    bench = section(dom, "bench")
    [curves] = re.findall(r'<svg[^>]*>.*?all_reduce_perf busbw vs size.*?</svg>', bench, re.S)[:1]
    assert "h100-node03: below the pass threshold" in curves
    assert "h100-node[01-02,04] (3 nodes, identical)" in curves  # the healthy nodes, named, not one anonymous line
    assert "pass ≥ 288 GB/s" in curves and "expected 480 GB/s" in curves and "busbw (GB/s)" in curves
    [imb] = re.findall(r'imb IMB-MPI1: bandwidth \(GB/s\) per pair.*?</table>', bench, re.S)
    assert "outside the expectation <code>imb.pingpong.bandwidth</code> &gt;= 60% of 48 GB/s" in imb
    cells = re.findall(r'<rect [^>]*class="fail"><title>([^<]+)</title>', imb)
    assert "h100-node01 ↔ h100-node03: 3.09 GB/s FAIL; retest: 3.09 GB/s FAIL" in cells
    assert len(set(cells)) == 3  # node03's three pairs; the retest is told in its pair's cell
    assert "h100-node03 ↔ h100-node01 <span class=\"muted\">(retest)</span>" in imb


def section(dom: str, name: str) -> str:
    match = re.search(rf'<section id="{name}">(.*?)</section>', dom, re.S)
    assert match is not None, name
    return match[1]


def test_verdict_then_bandwidth_then_probe_findings(dom: str) -> None:
    order = [dom.index(marker) for marker in ('class="verdict', '<section id="bench">', '<section id="problems">',
                                              '<section id="details">')]
    assert order == sorted(order)
    assert re.search(r'<h2>Bandwidth vs expectation</h2>', dom)


def test_busbw_curves_with_the_band_and_the_slow_node(dom: str) -> None:
    bench = section(dom, "bench")
    assert "all_reduce_perf: busbw vs message size per node (4 nodes)" in bench
    [curves] = re.findall(r'<svg[^>]*>.*?all_reduce_perf busbw vs size.*?</svg>', bench, re.S)[:1]
    assert "h100-node03" in curves and "h100-node[01-02,04]" in curves


def test_pair_heatmaps_name_the_blamed_node(dom: str) -> None:
    bench = section(dom, "bench")
    assert "nccl all_reduce_perf: busbw (GB/s) per pair (6 pairs + 1 retest, 4 nodes)" in bench
    assert "imb IMB-MPI1: bandwidth (GB/s) per pair (6 pairs + 1 retest, 4 nodes)" in bench
    assert "imb IMB-MPI1: latency (µs) per pair (6 pairs + 1 retest, 4 nodes)" in bench
    blamed = re.findall(r'Attributed by the pair tests and retests to: <b class="host">([^<]+)</b>', bench)
    assert blamed == ["h100-node03"] * 3
    slow_pair = (r'<tr class="s-FAIL"><td class="host">h100-node0\d ↔ h100-node0\d</td><td class="num neg">141</td>'
                 r'<td><span class="st st-FAIL">FAIL</span></td></tr>')
    assert re.search(slow_pair, bench)


def test_hpl_per_node(dom: str) -> None:
    bench = section(dom, "bench")
    assert "HPL GFLOPS per node (4 nodes, slowest first)" in bench
    hpl = bench[bench.index("HPL GFLOPS per node"):]
    assert hpl.index("h100-node03") < hpl.index("h100-node01")  # slowest first


def test_telemetry_panel_shows_the_throttling_gpu(dom: str) -> None:
    details = section(dom, "details")
    assert details.count("telemetry under load (1 job)") == 4
    throttled = "hpl-hpl-node-h100-node03 (20 samples, dcgmi-dmon): HW throttling on gpu6"
    assert throttled in details and details.count("HW throttling on") == 1  # node03's gpu6 only
