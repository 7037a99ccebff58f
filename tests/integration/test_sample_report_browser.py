"""The sample's report.html (``healthcheck run --sample``) in a real headless Chromium: the whole story.

Verdict first, then "Bandwidth vs expectation" (busbw curve per node with its band, pair heatmaps
naming the node the attribution blames, HPL per node, IMB pairs), then the probe findings; the
telemetry panel of the throttling GPU in node03's details; nothing loaded from outside the page.
Needs Debian's ``chromium``; skipped when it is absent.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.integration.test_report_browser import CHROMIUM, chromium

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def dom(tmp_path_factory: pytest.TempPathFactory) -> str:
    if CHROMIUM is None:
        pytest.skip("chromium not installed (apt-get install chromium)")
    out = tmp_path_factory.mktemp("sample")
    subprocess.run([sys.executable, "-m", "healthcheck", "run", "--sample", "--out", str(out)],
                   capture_output=True, text=True, timeout=300, check=False)
    [run_dir] = [p for p in out.iterdir() if not p.is_symlink()]
    report = run_dir / "report.html"
    html = report.read_text()
    # self-contained: no script, style, image or frame fetched from anywhere
    assert not re.search(r'<(script|img|iframe|link)[^>]+(src|href)="(https?:)?//', html)
    return chromium(report, "", "--dump-dom")


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
    assert "h100-node03" in curves and "h100-node01" in curves


def test_pair_heatmaps_name_the_blamed_node(dom: str) -> None:
    bench = section(dom, "bench")
    assert "nccl all_reduce_perf busbw_gbps per pair (7 pairs, 4 nodes)" in bench
    assert "imb IMB-MPI1 bandwidth_gbps per pair (7 pairs, 4 nodes)" in bench
    assert "imb IMB-MPI1 latency_us per pair (7 pairs, 4 nodes)" in bench
    blamed = re.findall(r'Attributed by the pair tests and retests to: <b class="host">([^<]+)</b>', bench)
    assert blamed == ["h100-node03"] * 3
    slow_pair = r'<tr class="s-FAIL"><td class="host">h100-node0\d ↔ h100-node0\d</td><td class="num neg">141</td>'
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
