"""report.html in a real headless Chromium: it renders, the filter works, injected scripts stay inert.

Needs Debian's ``chromium`` (CI: ``apt-get install chromium``); skipped when it is absent.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from healthcheck import reports
from tests.unit.test_report_digest import make_run

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--virtual-time-budget=3000")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if CHROMIUM is None:
        pytest.skip("chromium not installed (apt-get install chromium)")
    run_dir = make_run(tmp_path_factory.mktemp("browser"))
    reports.write_all(run_dir)
    return run_dir / "report.html"


def chromium(report: Path, fragment: str, *extra: str) -> str:
    profile = report.parent / f"profile-{abs(hash((fragment, extra)))}"
    cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *extra, f"{report.as_uri()}{fragment}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def host_rows(dom: str) -> list[str]:
    body = re.search(r'<tbody id="host-rows">(.*?)</tbody>', dom, re.S)
    assert body is not None
    return re.findall(r'<td class="host">(?:<a [^>]*>)?([^<]+)', body[1])


def test_filter_by_status_from_the_url(report: Path) -> None:
    dom = chromium(report, "#filter=FAIL", "--dump-dom")
    assert host_rows(dom) == ["gpu001", "gpu002", "gpu004", "gpu005", "gpu017"]
    assert 'data-filter-matches="5"' in dom
    assert "5 of 7 hosts" in dom


def test_filter_by_check_and_host_glob(report: Path) -> None:
    assert host_rows(chromium(report, "#check=nvlink", "--dump-dom")) == ["gpu004"]
    assert host_rows(chromium(report, "#host=gpu00*&status=FAIL", "--dump-dom")) == [
        "gpu001", "gpu002", "gpu004", "gpu005"]
    assert host_rows(chromium(report, "#status=PASS", "--dump-dom")) == ["gpu003"]


def test_injected_script_did_not_run(report: Path) -> None:
    dom = chromium(report, "", "--dump-dom")
    assert "<title>healthcheck FAIL" in dom
    assert "pwned" not in dom.split("</head>", 1)[0]
    body = re.search(r"<body[^>]*>", dom)
    assert body is not None and "data-pwned" not in body[0]  # what the injected script/onerror would set
    assert "data-filter-matches" in body[0]  # set by the page's own script
    assert "&lt;script&gt;document.title" in dom
    assert len(host_rows(dom)) == 7  # the page's own script did run


def test_escaping_alone_keeps_it_inert(report: Path) -> None:
    """The CSP is a second wall: with it removed, escaping must still keep node text inert."""
    bare = report.with_name("report-no-csp.html")
    page = report.read_text(encoding="utf-8")
    bare.write_text(re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page), encoding="utf-8")
    assert "Content-Security-Policy" not in bare.read_text(encoding="utf-8")
    dom = chromium(bare, "#filter=bad", "--dump-dom")
    body = re.search(r"<body[^>]*>", dom)
    assert body is not None and "data-pwned" not in body[0] and 'data-filter-matches="6"' in body[0]
    assert "<title>healthcheck FAIL" in dom


def test_host_details_in_templates_open_from_their_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On larger runs the details past the first few are placeholders: built from the page's data (or, for a
    section with charts, cloned from its template) when their anchor is followed, and only that one."""
    import healthcheck.reports.html as report_html

    if CHROMIUM is None:
        pytest.skip("chromium not installed (apt-get install chromium)")
    monkeypatch.setattr(report_html, "DETAIL_ALL_UP_TO", 2)
    monkeypatch.setattr(report_html, "DETAIL_LIVE", 1)
    trends = {"gpu005": {"nccl.all_reduce.node.busbw": {"unit": "GB/s", "values": [["d1", 470.0], ["d2", 240.0]]}}}
    run_dir = make_run(tmp_path, {"trends": trends})
    reports.write_all(run_dir, ["html"])
    page = run_dir / "report.html"
    assert '<template class="host-detail" id="t-h-gpu004"></template>' in page.read_text(encoding="utf-8")
    dom = chromium(page, "", "--dump-dom")
    assert 'id="h-gpu001"' in dom and '<template class="host-detail" id="t-h-gpu004"></template>' in dom
    dom = chromium(page, "#h-gpu004", "--dump-dom")
    assert '<template class="host-detail" id="t-h-gpu004">' not in dom
    article = re.search(r'<article class="host-detail v-FAIL" id="h-gpu004">(.*?)</article>', dom, re.S)
    assert article is not None and "nvlink.link.down" in article[1] and "NVLink (1 GPUs)" in article[1]
    assert '<template class="host-detail" id="t-h-gpu002"></template>' in dom  # only the host asked for
    dom = chromium(page, "#h-gpu005", "--dump-dom")  # trend sparklines: kept as markup in its template
    article = re.search(r'<article class="host-detail v-FAIL" id="h-gpu005">(.*?)</article>', dom, re.S)
    assert article is not None and 'class="spark"' in article[1] and "&lt;script&gt;document.title" in article[1]


def revealed(page: Path, tmp_path: Path) -> str:
    """``page`` opened with every host section revealed (as printing does), its script's CSP hash kept."""
    import base64
    import hashlib

    trigger = 'window.dispatchEvent(new Event("beforeprint"));'
    digest = base64.b64encode(hashlib.sha256(trigger.encode()).digest()).decode()
    text = page.read_text(encoding="utf-8").replace("script-src ", f"script-src 'sha256-{digest}' ", 1)
    copy = tmp_path / f"revealed-{page.parent.name}.html"
    copy.write_text(text.replace("</body>", f"<script>{trigger}</script></body>", 1), encoding="utf-8")
    return chromium(copy, "", "--dump-dom")


def articles(dom: str) -> dict[str, str]:
    """Each host section's markup, whitespace between and inside text collapsed."""
    found = re.findall(r'(<article class="host-detail [^"]*" id="h-([^"]*)">.*?</article>)', dom, re.S)
    return {name: re.sub(r"\s+", " ", re.sub(r">\s+<", "><", html)) for html, name in found}


@pytest.mark.parametrize("hostile", [False, True])
def test_host_details_built_from_data_equal_the_markup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       hostile: bool) -> None:
    """The same run rendered with every section as markup and with every section as data: once revealed,
    the browser holds the same sections, element for element and text for text; the hostile node text
    (``</script>``, ``<!--``, U+2028, terminal escapes, bidi overrides) stayed text in both."""
    import healthcheck.reports.html as report_html
    from tests.unit.test_report_html import hostile_run

    if CHROMIUM is None:
        pytest.skip("chromium not installed (apt-get install chromium)")
    monkeypatch.setattr(report_html, "DETAIL_ALL_UP_TO", 0)
    doms = {}
    for live in (100, 0):
        monkeypatch.setattr(report_html, "DETAIL_LIVE", live)
        run_dir = hostile_run(tmp_path / f"live{live}") if hostile else make_run(tmp_path / f"live{live}")
        reports.write_all(run_dir, ["html"])
        text = (run_dir / "report.html").read_text(encoding="utf-8")
        assert ('id="hc-details"' in text) == (live == 0) and ("<article" in text) == (live > 0)
        doms[live] = revealed(run_dir / "report.html", tmp_path)
    markup, data = articles(doms[100]), articles(doms[0])
    assert list(data) == list(markup) and len(markup) == (1 if hostile else 6)
    for name in markup:
        assert data[name] == markup[name], name
    for dom in doms.values():
        body = re.search(r"<body[^>]*>", dom)
        assert body is not None and "data-pwned" not in body[0] and "data-filter-matches" in body[0]
        assert "pwned" not in dom.split("</head>", 1)[0]
    if hostile:
        assert "&lt;/script&gt;&lt;script&gt;document.title='pwned'&lt;/script&gt;&lt;!--" in data[next(iter(data))]


def test_screenshot(report: Path) -> None:
    shot = report.parent / "report.png"
    chromium(report, "", f"--screenshot={shot}", "--window-size=1300,1600", "--hide-scrollbars")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1300, 1600)
    assert len(data) > 50_000  # a rendered page, not a blank canvas
