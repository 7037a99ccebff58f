"""metrics.prom passes the real ``promtool check metrics`` (Debian's prometheus package), by default
and with ``--metrics-detail``, on a replay of the built-in sample capture."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from healthcheck.cli.main import main

PROMTOOL = shutil.which("promtool")
SAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "samples" / "h100-4node"
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("promtool") / "run"
    result = CliRunner().invoke(main, ["run", "--replay", str(SAMPLE), "--run-dir", str(out)])
    assert result.exit_code == 1, result.output  # node03 fails
    return out


def promtool(path: Path) -> subprocess.CompletedProcess[str]:
    with path.open("rb") as fh:
        return subprocess.run([str(PROMTOOL), "check", "metrics"], stdin=fh, capture_output=True, text=True,
                              timeout=60, check=False)


def series(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for family in text_string_to_metric_families(path.read_text()):
        out[family.name] = len(family.samples)
    return out


def test_default_metrics_pass_promtool(run_dir: Path) -> None:
    checked = promtool(run_dir / "metrics.prom")
    assert (checked.returncode, checked.stdout, checked.stderr) == (0, "", "")
    counted = series(run_dir / "metrics.prom")
    assert counted["healthcheck_host_verdict"] == 4 and counted["healthcheck_host_findings"] == 20
    assert "healthcheck_gpu_temperature_celsius" not in counted


def test_detailed_metrics_pass_promtool(run_dir: Path) -> None:
    rendered = CliRunner().invoke(main, ["report", "--metrics-detail", str(run_dir)])
    assert rendered.exit_code == 0, rendered.output
    checked = promtool(run_dir / "metrics.prom")
    assert (checked.returncode, checked.stdout, checked.stderr) == (0, "", "")
    counted = series(run_dir / "metrics.prom")
    assert counted["healthcheck_gpu_temperature_celsius"] == 32  # 4 hosts x 8 GPUs, from the observation store
    assert counted["healthcheck_ib_port_rate_bytes_per_second"] > 0
