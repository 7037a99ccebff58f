"""Observe-only checks end to end: a replayed FAIL of an observed check is reported but changes no verdict,
no exit code, no drain, and appears in the report's observe-only section."""

from __future__ import annotations

import re
from pathlib import Path

from healthcheck.cli.main import ExitCode, exit_code
from healthcheck.core.model import Status
from healthcheck.ops.drain import plan_drain
from healthcheck.run.execute import execute_run
from healthcheck.run.options import OutputOptions, RunOptions, SelectionOptions, TargetOptions
from healthcheck.store.results import load_results
from tests.conftest import fixture_text

SITE_PROFILE = """name: site-h100
description: h100-sxm5-8x with the new PCI check introduced observe-only
inherits: h100-sxm5-8x
observe: [pci.gpu, "pci.hca.d*"]
"""


def bundle(root: Path) -> Path:
    host = root / "raw" / "gpu001"
    host.mkdir(parents=True)
    (host / "pci-sysfs.out").write_text(
        fixture_text("pci/sysfs-h100-gpu-db-gone-cb-unbound-mlx5_7-no-rdma.txt").split("\n", 1)[1])
    # our healthy XML fixture without GPU 0000:db:00.0, which the PCI fixture lacks too (lost from the bus)
    xml = re.sub(r'\s*<gpu id="00000000:DB:00.0">.*?</gpu>', "", fixture_text("nvidia-smi-xml/h100-8x-healthy.xml"),
                 count=1, flags=re.S)
    (host / "nvidia-smi-q-x.out").write_text(xml.replace("<attached_gpus>8</attached_gpus>",
                                                         "<attached_gpus>7</attached_gpus>"))
    return root


def run(tmp_path: Path, profile: str):
    # fabric (graded, not observed) checks the same XML: with only observe-only checks nothing would be
    # checked, and nothing checked is never PASS (healthcheck.core.verdicts)
    profiles = tmp_path / "profiles"
    profiles.mkdir(exist_ok=True)
    (profiles / "site-h100.yaml").write_text(SITE_PROFILE)
    return execute_run(RunOptions(target=TargetOptions(replay=bundle(tmp_path / f"b-{profile}"), profile=profile,
                                                       profile_dirs=[profiles]),
                                  outputs=OutputOptions(out=tmp_path / f"runs-{profile}"),
                                  selection=SelectionOptions(probes=["pci", "fabric"])))


def test_observed_fail_is_reported_but_never_fails_the_run_or_drains(tmp_path: Path):
    strict = run(tmp_path, "h100-sxm5-8x")
    assert strict.results.hosts["gpu001"].verdict is Status.FAIL              # the same data, not observed
    assert exit_code(strict.results, strict=False) is ExitCode.FAILED
    assert [d.host for d in plan_drain(strict.results).decisions] == ["gpu001"]

    outcome = run(tmp_path, "site-h100")
    host = load_results(outcome.run_dir).hosts["gpu001"]
    count = next(f for f in host.findings if f.check == "pci.gpu.count")
    assert (count.status, count.observe) == (Status.FAIL, True)             # still graded FAIL ...
    assert "observe-only" in count.message
    assert next(f for f in host.findings if f.check == "pci.hca.driver").observe   # by glob
    hca = next(f for f in host.findings if f.check == "pci.hca.count")             # not observed: the evidence
    assert (hca.status, hca.observe) == (Status.PASS, False)
    assert host.verdict is Status.PASS                                       # ... but decides nothing
    assert exit_code(load_results(outcome.run_dir), strict=False) is ExitCode.OK
    assert plan_drain(load_results(outcome.run_dir)).decisions == ()
    html = (outcome.run_dir / "report.html").read_text()
    assert 'id="observed"' in html and "pci.gpu.count" in html
    junit = (outcome.run_dir / "junit.xml").read_text()
    assert 'failures="0"' in junit
