"""junit.xml validates against the JUnit schema of Jenkins' xUnit plugin and reads as GitLab reads it.

The schema is reports/schemas/junit-jenkins-xunit-10.xsd (written from jenkinsci/xunit-plugin's
junit-10.xsd, cited in the file). GitLab's parser (lib/gitlab/ci/parsers/test/junit.rb) takes every
<testcase> under <testsuites>/<testsuite>, its name, classname and time, and its status from the
child element: <failure> failed, <error> error, <skipped> skipped, anything else success; the
``status`` attribute is ignored. ``gitlab_statuses`` applies exactly those rules.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from importlib.resources import files
from pathlib import Path

import pytest

from healthcheck.reports.digest import load_digest
from healthcheck.reports.junit import render_junit
from healthcheck.run.execute import execute_run
from healthcheck.run.options import OutputOptions, RunOptions, TargetOptions
from tests.unit.test_report_digest import make_run

xmlschema = pytest.importorskip("xmlschema")

SCHEMA = Path(str(files("healthcheck.reports") / "schemas" / "junit-jenkins-xunit-10.xsd"))
SAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "samples" / "h100-4node"
GITLAB = {"failure": "failed", "error": "error", "skipped": "skipped"}


@pytest.fixture(scope="module")
def schema():
    return xmlschema.XMLSchema(str(SCHEMA))


def gitlab_statuses(document: bytes) -> dict[str, str]:
    """classname/name -> GitLab's status for each testcase (see the module docstring)."""
    root = ET.fromstring(document)
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    out = {}
    for suite in suites:
        for case in suite.iter("testcase"):
            float(case.get("time") or 0)  # GitLab reads time as a number
            status = next((GITLAB[c.tag] for c in case if c.tag in GITLAB), "success")
            out[f"{case.get('classname')}/{case.get('name')}"] = status
    return out


def test_sample_run_junit_validates_and_gitlab_reads_every_status(schema, tmp_path):
    """Both forms: the default (passing checks counted per host) and ``--junit-full`` (every finding)."""
    run_dir = execute_run(RunOptions(target=TargetOptions(replay=SAMPLE),
                                     outputs=OutputOptions(run_dir=tmp_path / "run"))).run_dir
    bounded = (run_dir / "junit.xml").read_bytes()
    schema.validate(bounded.decode())
    counted = gitlab_statuses(bounded)
    assert counted["h100-node03.gpu/gpu.pcie.width [gpu5]"] == "failed"
    assert counted["h100-node01.summary/checks passed"] == "success"
    assert "h100-node01.gpu/gpu.count [node]" not in counted
    assert "skipped" in set(counted.values())
    full = execute_run(RunOptions(target=TargetOptions(replay=SAMPLE),
                                  outputs=OutputOptions(run_dir=tmp_path / "full", junit_full=True))).run_dir
    document = (full / "junit.xml").read_bytes()
    schema.validate(document.decode())
    statuses = gitlab_statuses(document)
    assert {k: v for k, v in statuses.items() if v != "success"} == \
        {k: v for k, v in counted.items() if v != "success"}  # the same failures, errors and skips
    assert statuses["h100-node03.gpu/gpu.pcie.width [gpu5]"] == "failed"
    assert statuses["h100-node01.gpu/gpu.count [node]"] == "success"
    assert statuses["h100-node01.host/host.reachable [node]"] == "success"
    assert "skipped" in set(statuses.values())
    root = ET.fromstring(document)
    assert int(root.get("tests")) == len(statuses) and int(root.get("failures")) == \
        sum(s == "failed" for s in statuses.values())


def test_error_warn_and_hostile_node_text_still_validate(schema, tmp_path):
    document = render_junit(load_digest(make_run(tmp_path)))
    schema.validate(document.decode())
    assert "error" in set(gitlab_statuses(document).values())


def test_the_schema_rejects_what_jenkins_would_reject(schema):
    assert not schema.is_valid('<testsuites skipped="1"><testsuite tests="0"/></testsuites>')
    assert not schema.is_valid("<testsuites><testsuite/></testsuites>")  # tests= is required
    assert not schema.is_valid('<testsuite tests="1"><testcase classname="x"/></testsuite>')  # name required
    assert schema.is_valid('<testsuite tests="1"><testcase name="x"><skipped/></testcase></testsuite>')
