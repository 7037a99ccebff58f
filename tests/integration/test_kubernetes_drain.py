"""``healthcheck drain --scheduler kubernetes``: the dry-run with the real kubectl and no API server.

No Kubernetes API server can run here, so kubectl is pointed (KUBECONFIG) at a loopback port
nobody listens on: the state query fails, the plan is printed as unchecked commands, and
``--apply`` refuses to run anything because ownership of cordons and taints cannot be checked.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from healthcheck.cli.main import main
from healthcheck.core.model import Finding, Status
from healthcheck.store.results import HostResult, RunResults, write_results
from tests.slurmctld import free_port

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl absent")

KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- cluster: {{server: "http://127.0.0.1:{port}"}}
  name: nowhere
contexts:
- context: {{cluster: nowhere, user: nobody}}
  name: nowhere
current-context: nowhere
users:
- name: nobody
  user: {{}}
"""


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    hosts = {f"gpu{i:03d}": HostResult(name=f"gpu{i:03d}", findings=[
        Finding(host=f"gpu{i:03d}", check="gpu.count", status=Status.PASS, value=8, message="ok")])
        for i in range(1, 21)}
    hosts["gpu007"].findings.append(Finding(host="gpu007", check="nvlink.link.active", status=Status.FAIL,
                                            component="gpu3 link 5", message="link down"))
    (tmp_path / "run").mkdir()
    write_results(tmp_path / "run", RunResults(run={"id": "20261122T031500Z"}, hosts=hosts))
    return tmp_path / "run"


def kube_env(tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG.format(port=free_port()))
    return {"KUBECONFIG": str(config)}


def test_dry_run_prints_cordon_taint_and_labels(tmp_path, run_dir):
    out = CliRunner().invoke(main, ["drain", str(run_dir), "--scheduler", "kubernetes"], env=kube_env(tmp_path))
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert any(line.startswith("# state not read: kubectl get nodes on localhost") for line in lines)
    assert lines[lines.index("kubectl cordon gpu007") + 1:][:3] == [
        "kubectl taint nodes gpu007 healthcheck/nvlink=failed:NoSchedule --overwrite",
        "kubectl label nodes gpu007 --overwrite healthcheck/verdict=fail healthcheck/run=20261122T031500Z "
        "healthcheck/cordoned=true",
        "kubectl annotate nodes gpu007 --overwrite 'healthcheck/reason=healthcheck: FAIL nvlink.link.active "
        "gpu3 link 5 run=20261122T031500Z'"]


def test_apply_refuses_without_the_api_server(tmp_path, run_dir):
    out = CliRunner().invoke(main, ["drain", str(run_dir), "--scheduler", "kubernetes", "--apply"],
                             env=kube_env(tmp_path))
    assert out.exit_code == 1
    assert "REFUSED: cannot read the scheduler's state" in out.output
    assert "# applied" not in out.output
