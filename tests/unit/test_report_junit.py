"""junit.xml: one testsuite per host; by default a testcase per check that did not pass and the passing
ones counted (hosts + non-PASS findings testcases), with ``junit_full`` one per finding; parsed back."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from healthcheck.core.model import Finding, Status
from healthcheck.reports.digest import digest_of, load_digest
from healthcheck.reports.junit import render_junit, xml_text
from healthcheck.store.results import HostResult, RunResults
from tests.unit.test_report_digest import REMAP_REMEDY, make_run


def parse(tmp_path: Path, full: bool = True) -> ET.Element:
    digest = load_digest(make_run(tmp_path))
    digest.options = {"junit_full": full}
    return ET.fromstring(render_junit(digest))


def test_totals_and_one_suite_per_host(tmp_path: Path) -> None:
    root = parse(tmp_path)
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    names = ["gpu001", "gpu002", "gpu003", "gpu004", "gpu005", "gpu017", "node-a"]
    assert [s.get("name") for s in suites] == names
    assert root.get("failures") == "6" and root.get("errors") == "1"
    assert root.get("skipped") is None  # not an attribute of <testsuites> in the xUnit schema
    assert int(root.get("tests")) == sum(len(s.findall("testcase")) for s in suites) == 18
    assert len(root.findall(".//failure")) == 6


def test_failure_carries_message_measured_and_remedy(tmp_path: Path) -> None:
    suite = parse(tmp_path).find("testsuite[@name='gpu001']")
    assert suite is not None and suite.get("failures") == "1" and suite.get("tests") == "3"
    case = suite.find("testcase[@name='gpu.row_remap.pending [gpu3]']")
    assert case is not None and case.get("classname") == "gpu001.gpu"
    failure = case.find("failure")
    assert failure is not None and failure.get("message") == "gpu3: row remap pending"
    assert f"remedy: {REMAP_REMEDY}" in (failure.text or "")
    assert "source: nvidia-smi-q-x" in (failure.text or "")


def test_error_warn_and_escaped_text(tmp_path: Path) -> None:
    root = parse(tmp_path)
    error = root.find("testsuite[@name='node-a']/testcase/error")
    assert error is not None and error.get("message") == "ssh: connection refused"
    warn = root.find("testsuite[@name='gpu002']/testcase[@name='gpu.temperature [gpu3]']/system-out")
    assert warn is not None and (warn.text or "").startswith("WARN gpu.temperature [gpu3] on gpu002")
    xid = root.find("testsuite[@name='gpu005']/testcase[@name='xid.event [gpu0]']/failure")
    assert xid is not None and "<script>document.title" in (xid.get("message") or "")  # text, round-tripped


def test_control_characters_are_replaced() -> None:
    assert xml_text("a\x00b\x1bc\td") == "a\ufffdb\ufffdc\td"


def test_shared_passing_testcases_name_their_own_host_and_hostile_names_are_escaped(tmp_path: Path) -> None:
    """Passing testcases are built once per check and joined per host: each still names its own host, a
    host name or category that needs quoting is written one testcase at a time, and counts stay right."""
    def host(name: str) -> HostResult:
        odd = [Finding(host=name, check='we"ird.check', status=Status.PASS, message="ok", component="a&b")]
        return HostResult(name=name, findings=[
            Finding(host=name, check="gpu.count", status=Status.PASS, message="8 GPUs"),
            Finding(host=name, check="ib.port.state", status=Status.FAIL, message="down", component="mlx5_0/1"),
            Finding(host=name, check="ib.port.rate", status=Status.FAIL, message="slow", observe=True),
            Finding(host=name, check="xid.event", status=Status.SKIP, message="no log"),
            *(odd if name == "gpu003" else [])])

    names = ["gpu001", "gpu002", "gpu003", 'odd&"name']
    run = RunResults(run={"id": "r", "started": "2026-11-24T00:00:00+00:00"}, hosts={n: host(n) for n in names})
    digest = digest_of(tmp_path, run)
    digest.options = {"junit_full": True}
    root = ET.fromstring(render_junit(digest))
    for suite in root.findall("testsuite"):
        name = suite.get("name")
        cases = suite.findall("testcase")
        categories = ["gpu", "ib", "ib", *(['we"ird'] if name == "gpu003" else []), "xid"]
        assert [c.get("classname") for c in cases] == [f"{name}.{c}" for c in categories]
        assert [c.get("name") for c in cases][3:-1] == (['we"ird.check [a&b]'] if name == "gpu003" else [])
        failure, observed = cases[2].find("failure"), cases[1].find("system-out")
        assert failure is not None and f"on {name}: down" in (failure.text or "")
        assert observed is not None and f"on {name}: slow" in (observed.text or "")
        assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == \
            (str(len(categories)), "1", "0", "1")
    assert [s.get("name") for s in root.findall("testsuite")] == names
    assert (root.get("tests"), root.get("failures")) == ("17", "4")


def test_bounded_form_lists_what_did_not_pass_and_counts_the_rest(tmp_path: Path) -> None:
    """Testcases = hosts with a passing check + findings that are not PASS; each host's counts as properties."""
    digest = load_digest(make_run(tmp_path))
    root = ET.fromstring(render_junit(digest))
    hosts = digest.results.hosts
    not_passed = sum(f.status is not Status.PASS for h in hosts.values() for f in h.findings)
    with_pass = sum(any(f.status is Status.PASS for f in h.findings) for h in hosts.values())
    assert int(root.get("tests")) == len(root.findall(".//testcase")) == with_pass + not_passed
    assert root.get("failures") == "6" and root.get("errors") == "1"  # the same as the full form
    gpu001 = root.find("testsuite[@name='gpu001']")
    assert gpu001 is not None
    props = {p.get("name"): int(p.get("value") or -1) for p in gpu001.iter("property")}
    passed = sum(f.status is Status.PASS for f in hosts["gpu001"].findings)
    assert props == {"checks": len(hosts["gpu001"].findings), "passed": passed} and passed > 0
    [summary] = gpu001.findall("testcase[@classname='gpu001.summary']")
    assert summary.get("name") == "checks passed" and summary.find("failure") is None
    assert summary.findtext("system-out", "").startswith(f"{passed} of {props['checks']} checks passed")
    assert gpu001.find("testcase[@name='gpu.row_remap.pending [gpu3]']/failure") is not None
    node_a = root.find("testsuite[@name='node-a']")  # nothing passed: no summary testcase
    assert node_a is not None and node_a.find("testcase[@classname='node-a.summary']") is None


def test_a_healthy_hosts_suite_does_not_grow_with_its_checks(tmp_path: Path) -> None:
    """Bounded by construction: 5 or 500 passing checks, the same testcases and a few bytes more."""
    def suite_bytes(checks: int) -> tuple[int, int]:
        findings = [Finding(host="gpu001", check=f"gpu.check{i}", status=Status.PASS, message="ok",
                            component=f"gpu{i % 8}") for i in range(checks)]
        run = RunResults(run={"id": "r"}, hosts={"gpu001": HostResult("gpu001", findings)})
        document = render_junit(digest_of(tmp_path, run))
        return len(document), len(ET.fromstring(document).findall(".//testcase"))

    (small, small_cases), (large, large_cases) = suite_bytes(5), suite_bytes(500)
    assert small_cases == large_cases == 1
    assert large - small == 8 and large < 700  # two more digits in each of the four counts
