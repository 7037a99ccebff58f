"""Error rates end to end: two replayed collections of one host, the second graded with --previous."""

from __future__ import annotations

from pathlib import Path

from healthcheck.core.model import Status
from healthcheck.run.execute import execute_run
from healthcheck.run.options import RunOptions
from tests.conftest import fixture_text

BOOT = "5c3e1c0e-0d3b-4a53-9a57-4e0fb3a5d2c1"


def bundle(root: Path, epoch: int, ib_fixture: str) -> Path:
    host = root / "raw" / "gpu001"
    host.mkdir(parents=True)
    (host / "counter-clock.out").write_text(f"{epoch}\n{BOOT}\n")
    (host / "ib-sysfs.out").write_text(fixture_text(f"ib/{ib_fixture}").split("\n", 1)[1])
    return root


def test_link_downed_rate_uses_the_previous_run(tmp_path: Path):
    first = bundle(tmp_path / "b1", 1795000000, "sysfs-h100-8x-ndr-healthy.txt")
    second = bundle(tmp_path / "b2", 1795000000 + 6 * 3600, "sysfs-h100-link-downed-grew-fw-28.41.txt")
    opts = {"probes": ["rates"], "profile": "h100-sxm5-8x", "render": False}
    earlier = execute_run(RunOptions.build(replay=first, out=tmp_path / "runs", **opts))
    base = [f for f in earlier.results.hosts["gpu001"].findings if f.check.startswith("rate.")]
    assert [(f.check, f.status) for f in base] == [("rate.baseline", Status.SKIP)]
    later = execute_run(RunOptions.build(replay=second, out=tmp_path / "runs2", previous=earlier.run_dir, **opts))
    flap = [f for f in later.results.hosts["gpu001"].findings if f.check == "rate.ib.link_downed"]
    assert [(f.component, f.status, f.value) for f in flap] == [("mlx5_6/1", Status.FAIL, 1.167)]
    assert later.results.hosts["gpu001"].verdict is Status.FAIL
