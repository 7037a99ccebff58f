"""Error rates end to end: two replayed collections of one host, the second graded with --previous.

Each bundle records when the collector took it (``_host.json`` ``collected_at``, as every run writes it):
the rate's interval is the collector's, the node's ``counter-clock`` only cross-checks it.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from healthcheck.core.model import Status
from healthcheck.run.execute import execute_run
from healthcheck.run.options import RunOptions
from tests.conftest import fixture_text

BOOT = "5c3e1c0e-0d3b-4a53-9a57-4e0fb3a5d2c1"


def bundle(root: Path, epoch: int, ib_fixture: str, node_epoch: int | None = None) -> Path:
    """A bundle collected at ``epoch`` (the collector's time) whose node clock said ``node_epoch``."""
    host = root / "raw" / "gpu001"
    host.mkdir(parents=True)
    collected = datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="seconds")
    (host / "_host.json").write_text(json.dumps({"collected_at": collected, "commands": {}}))
    (host / "counter-clock.out").write_text(f"{epoch if node_epoch is None else node_epoch}\n{BOOT}\n")
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


@pytest.mark.parametrize(("before_clock", "now_clock"), [(0, None), (None, 4102444800)])
def test_a_node_clock_that_disagrees_with_the_collector_gives_no_rate(tmp_path: Path, before_clock, now_clock):
    """Issue 29.6: the node's clock at 0 before, or in 2100 now, while the collector recorded 6 h."""
    first = bundle(tmp_path / "b1", 1795000000, "sysfs-h100-8x-ndr-healthy.txt", node_epoch=before_clock)
    second = bundle(tmp_path / "b2", 1795000000 + 6 * 3600, "sysfs-h100-8x-ndr-healthy.txt", node_epoch=now_clock)
    opts = {"probes": ["rates"], "profile": "h100-sxm5-8x", "render": False}
    earlier = execute_run(RunOptions.build(replay=first, out=tmp_path / "runs", **opts))
    later = execute_run(RunOptions.build(replay=second, out=tmp_path / "runs2", previous=earlier.run_dir, **opts))
    rates = [f for f in later.results.hosts["gpu001"].findings if f.check.startswith("rate.")]
    assert [(f.check, f.status) for f in rates] == [("rate.clock", Status.ERROR)]
    assert "(6.0 h apart)" in rates[0].message and later.results.hosts["gpu001"].verdict is Status.ERROR
