"""JUnit XML for Jenkins/GitLab: one testsuite per host; a testcase per check that did not pass, and
the passing checks counted in one testcase per host (bounded: hosts + non-PASS findings testcases).

    <testsuites name="healthcheck" tests="3" failures="1" errors="0">
      <testsuite name="gpu001" tests="2" failures="1" ...>
        <properties><property name="checks" value="120" /><property name="passed" value="119" /></properties>
        <testcase classname="gpu001.summary" name="checks passed" time="0">
          <system-out>119 of 120 checks passed ...</system-out>
        <testcase classname="gpu001.gpu" name="gpu.count [node]">
          <failure message="7 GPUs visible, expected 8" type="FAIL">...remedy...</failure>

With the report option ``junit_full`` (``--junit-full`` on ``run`` and ``report``) every finding is its own
testcase, PASS included (about 80 per 8-GPU host). FAIL -> ``<failure>``, ERROR -> ``<error>``, SKIP ->
``<skipped>``; PASS and WARN pass (a WARN says so in ``<system-out>``). A host without findings gets one
``<error>`` testcase. The output validates against the JUnit schema of Jenkins' xUnit plugin
(``reports/schemas/junit-jenkins-xunit-10.xsd``).
"""

from __future__ import annotations

import re
from itertools import compress, count
from operator import attrgetter, not_
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from healthcheck.core.model import Finding, Status
from healthcheck.reports import ReporterSpec, register
from healthcheck.reports.digest import RunDigest
from healthcheck.store.results import HostResult

# XML 1.0 forbids most control characters; node output can contain any byte.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_ELEMENT = {Status.FAIL: "failure", Status.ERROR: "error"}
_ATTR_ENTITIES = {"\n": "&#10;", "\r": "&#13;", "\t": "&#09;"}


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


# Printable ASCII without & < > " ': such a text is its own attribute value, in double quotes.
_PLAIN_ATTR = re.compile("[\x20\x21\x23-\x25\x28-\x3b\x3d\x3f-\x7e]*")


def _attr(value: object) -> str:
    """An attribute value: XML-legal, escaped, newlines kept as character references (as ElementTree)."""
    if isinstance(value, str) and _PLAIN_ATTR.fullmatch(value):  # the common case, a fraction of quoteattr's cost
        return f'"{value}"'
    return quoteattr(xml_text(value), _ATTR_ENTITIES)


def _testcase(out: list[str], classname: str, name: str, f: Finding) -> None:
    """One ``<testcase>`` (``classname`` and ``name`` already attribute values), written as text: at 10,000
    hosts (260,000 testcases) building an ElementTree and indenting it took longer than grading; the XML
    is the same."""
    if f.status in _ELEMENT and not f.observe:  # observe-only: reported, never a failure
        tag = _ELEMENT[f.status]
        out.append(f'  <testcase classname={classname} name={name} time="0">\n   <{tag} message={_attr(f.message)} '
                   f'type="{f.status.value}">{escape(xml_text(finding_detail(f)))}</{tag}>\n  </testcase>\n')
    elif f.status is Status.SKIP:
        out.append(f'  <testcase classname={classname} name={name} time="0">\n'
                   f'   <skipped message={_attr(f.message)} />\n  </testcase>\n')
    elif f.status is Status.WARN or f.observe:
        out.append(f'  <testcase classname={classname} name={name} time="0">\n'
                   f'   <system-out>{escape(xml_text(finding_detail(f)))}</system-out>\n  </testcase>\n')
    else:
        out.append(f'  <testcase classname={classname} name={name} time="0" />\n')


_ORDER = attrgetter("check", "component")


def _findings(host: HostResult) -> list[Finding]:
    if host.findings:
        return sorted(host.findings, key=_ORDER)
    return [Finding(host=host.name, check="host.findings", status=Status.ERROR,
                    message="no finding at all for this host", remedy="Check that the sweep reached it")]


def _suite(name: str, findings: list[Finding], timestamp: str, names: dict[tuple[str, str], str],
           tails: dict[tuple[Any, ...], str], passed: int | None = None) -> tuple[str, int, int, int, int]:
    """One host's ``<testsuite>`` and its tests, failures, errors and skipped. ``names``: the ``name``
    attribute of each (check, component), shared by every host (the same checks repeat on every node);
    ``tails``: see ``_cases``; ``passed``: the PASS findings left out of ``findings`` and counted instead
    (None: the full form, every finding listed)."""
    body = _cases(name, findings, tails) if _PLAIN_ATTR.fullmatch(name) else None
    if body is None:
        out: list[str] = []
        classes: dict[str, str] = {}  # check -> classname attribute ("host.category")
        for f in findings:
            _testcase(out, _classname(classes, name, f.check), _label(names, f), f)
        body = "".join(out)
    counted = [f.status for f in findings if not f.observe] if any(map(_OBSERVE, findings)) else \
        list(map(_STATUS, findings))  # observe-only findings never count as failures or errors
    failures, errors = counted.count(Status.FAIL), counted.count(Status.ERROR)
    skipped = sum(f.status is Status.SKIP for f in findings) if len(counted) < len(findings) else \
        counted.count(Status.SKIP)
    host = _attr(name)
    summary = "" if passed is None else _passed_case(name, passed, len(findings) + passed)
    tests = len(findings) + (passed is not None and passed > 0)
    counts = {"tests": tests, "failures": failures, "errors": errors, "skipped": skipped}
    head = (f" <testsuite name={host} timestamp={timestamp} hostname={host} time=\"0\" "
            + " ".join(f'{k}="{v}"' for k, v in counts.items()) + ">\n")
    return head + summary + body + " </testsuite>\n", tests, failures, errors, skipped


def _passed_case(host: str, passed: int, checks: int) -> str:
    """The host's check counts as properties, and its passing checks as one testcase (none when none passed)."""
    props = (f'  <properties>\n   <property name="checks" value="{checks}" />\n'
             f'   <property name="passed" value="{passed}" />\n  </properties>\n')
    if not passed:
        return props
    return (props + f'  <testcase classname={_attr(host + ".summary")} name="checks passed" time="0">\n'
            f'   <system-out>{passed} of {checks} checks passed (each listed with --junit-full)</system-out>\n'
            '  </testcase>\n')


def _classname(classes: dict[str, str], host: str, check: str) -> str:
    classname = classes.get(check)
    if classname is None:
        classname = classes[check] = _attr(f"{host}.{check.split('.', 1)[0]}")  # Finding.category
    return classname


def _label(names: dict[tuple[str, str], str], f: Finding) -> str:
    key = (f.check, f.component)
    label = names.get(key)
    if label is None:
        label = names[key] = _attr(f"{f.check} [{f.component}]")
    return label


_CASE_KEY = attrgetter("check", "component", "status", "observe")
_STATUS, _OBSERVE = attrgetter("status"), attrgetter("observe")


def _cases(host: str, findings: list[Finding], tails: dict[tuple[Any, ...], str]) -> str | None:
    """The testcases of a host whose name is a plain attribute value, or None (then the caller writes them
    one by one). Every testcase starts with ``<testcase classname="HOST.``; what follows is the same on
    every host for a passing finding (its check, component and status), so it is built once per run
    (``tails``) and the host's testcases are one ``join`` (at 10,000 hosts: 1.2 M testcases, ~95% PASS)."""
    prefix = f'  <testcase classname="{host}.'
    keys = list(map(_CASE_KEY, findings))
    parts: list[Any] = list(map(tails.get, keys))  # None: not built yet
    for i in compress(count(), map(not_, parts)):  # first sight of a passing key, and every other status
        f, out = findings[i], []
        _testcase(out, _attr(f"{host}.{f.check.split('.', 1)[0]}"), _attr(f"{f.check} [{f.component}]"), f)
        if not out[0].startswith(prefix):  # a category that needs quoting: no shared tail
            return None
        parts[i] = out[0][len(prefix):]
        if f.status is Status.PASS and not f.observe:  # the same text on every plain host
            tails[keys[i]] = parts[i]
    return prefix + prefix.join(parts) if parts else ""


def render_junit(digest: RunDigest) -> bytes:
    """junit.xml of the run: bounded (PASS findings counted per host) unless ``digest.options["junit_full"]``."""
    full = bool(digest.options.get("junit_full"))
    suites: list[str] = []
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    timestamp = _attr(str(digest.run.get("started") or ""))
    names: dict[tuple[str, str], str] = {}
    tails: dict[tuple[Any, ...], str] = {}
    for name in sorted(digest.results.hosts):
        findings, passed = _findings(digest.results.hosts[name]), None
        if not full:
            listed = [f for f in findings if f.status is not Status.PASS]
            findings, passed = listed, len(findings) - len(listed)
        suite, tests, failures, errors, skipped = _suite(name, findings, timestamp, names, tails, passed)
        suites.append(suite)
        totals["tests"] += tests
        totals["failures"] += failures
        totals["errors"] += errors
        totals["skipped"] += skipped
    # <testsuites> has no "skipped" attribute in the JUnit schema Jenkins' xUnit plugin validates
    # against (reports/schemas/junit-jenkins-xunit-10.xsd); the per-host <testsuite> carries it.
    head = ('<?xml version=\'1.0\' encoding=\'utf-8\'?>\n<testsuites name="healthcheck" '
            + " ".join(f'{k}="{v}"' for k, v in totals.items() if k != "skipped") + ">\n")
    return (head + "".join(suites) + "</testsuites>\n").encode("utf-8")


REPORTER = register(ReporterSpec(name="junit", filename="junit.xml", render=render_junit))
