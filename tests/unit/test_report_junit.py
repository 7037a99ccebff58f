"""junit.xml: one testsuite per host, one testcase per check and component, parsed back."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from healthcheck.reports.digest import load_digest
from healthcheck.reports.junit import render_junit, xml_text

from tests.unit.test_report_digest import REMAP_REMEDY, make_run


def parse(tmp_path: Path) -> ET.Element:
    return ET.fromstring(render_junit(load_digest(make_run(tmp_path))))


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
