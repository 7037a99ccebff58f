"""JUnit XML for Jenkins/GitLab: one testsuite per host, one testcase per check and component.

    <testsuites name="healthcheck" tests="12" failures="1" errors="0">
      <testsuite name="gpu001" tests="6" failures="1" ...>
        <testcase classname="gpu001.gpu" name="gpu.count [node]">
          <failure message="7 GPUs visible, expected 8" type="FAIL">...remedy...</failure>

FAIL -> ``<failure>``, ERROR -> ``<error>``, SKIP -> ``<skipped>``; PASS and WARN pass (a WARN
says so in ``<system-out>``). A host without findings gets one ``<error>`` testcase. The output
validates against the JUnit schema of Jenkins' xUnit plugin (``reports/schemas/junit-jenkins-xunit-10.xsd``).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from healthcheck.reports import ReporterSpec, register
from healthcheck.reports.digest import RunDigest

from healthcheck.model import Finding, Status
from healthcheck.results import HostResult

# XML 1.0 forbids most control characters; node output can contain any byte.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_ELEMENT = {Status.FAIL: "failure", Status.ERROR: "error"}


def xml_text(value: object) -> str:
    return _XML_ILLEGAL.sub("\ufffd", "" if value is None else str(value))


def finding_detail(f: Finding) -> str:
    """Measured, expected, remedy and source of a finding, one per line."""
    unit = f" {f.unit}" if f.unit else ""
    lines = [f"{f.status.value} {f.check} [{f.component}] on {f.host}: {f.message}"]
    if f.value is not None:
        lines.append(f"measured: {f.value}{unit}")
    if f.expected is not None:
        lines.append(f"expected: {f.expected}")
    if f.remedy:
        lines.append(f"remedy: {f.remedy}")
    if f.source:
        lines.append(f"source: {f.source}")
    return "\n".join(lines)


def _testcase(parent: ET.Element, host: str, f: Finding) -> None:
    case = ET.SubElement(parent, "testcase", classname=xml_text(f"{host}.{f.category}"),
                         name=xml_text(f"{f.check} [{f.component}]"), time="0")
    if f.status in _ELEMENT:
        node = ET.SubElement(case, _ELEMENT[f.status], message=xml_text(f.message), type=f.status.value)
        node.text = xml_text(finding_detail(f))
    elif f.status is Status.SKIP:
        ET.SubElement(case, "skipped", message=xml_text(f.message))
    elif f.status is Status.WARN:
        ET.SubElement(case, "system-out").text = xml_text(finding_detail(f))


def _findings(host: HostResult) -> list[Finding]:
    if host.findings:
        return sorted(host.findings, key=lambda f: (f.check, f.component))
    return [Finding(host=host.name, check="host.findings", status=Status.ERROR,
                    message="no finding at all for this host", remedy="Check that the sweep reached it")]


def render_junit(digest: RunDigest) -> bytes:
    root = ET.Element("testsuites", name="healthcheck")
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    timestamp = str(digest.run.get("started") or "")
    for name in sorted(digest.results.hosts):
        findings = _findings(digest.results.hosts[name])
        counts = {"tests": len(findings),
                  "failures": sum(f.status is Status.FAIL for f in findings),
                  "errors": sum(f.status is Status.ERROR for f in findings),
                  "skipped": sum(f.status is Status.SKIP for f in findings)}
        suite = ET.SubElement(root, "testsuite", name=xml_text(name), timestamp=xml_text(timestamp),
                              hostname=xml_text(name), time="0", **{k: str(v) for k, v in counts.items()})
        for f in findings:
            _testcase(suite, name, f)
        for key, value in counts.items():
            totals[key] += value
    # <testsuites> has no "skipped" attribute in the JUnit schema Jenkins' xUnit plugin validates
    # against (reports/schemas/junit-jenkins-xunit-10.xsd); the per-host <testsuite> carries it.
    root.attrib.update({k: str(v) for k, v in totals.items() if k != "skipped"})
    ET.indent(root, space=" ")
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


REPORTER = register(ReporterSpec(name="junit", filename="junit.xml", render=render_junit))
