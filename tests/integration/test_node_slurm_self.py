"""``healthcheck node --slurm-self`` as Slurm's HealthCheckProgram and Epilog, on a real slurmctld + slurmd.

slurm.conf points ``HealthCheckProgram`` (every 5 s) and ``Epilog`` at a wrapper script that runs
``healthcheck node --slurm-self --probes gpu``. slurmd gives the wrapper no PATH and sets
``SLURMD_NODENAME``; the wrapper puts an ``nvidia-smi`` shim first on PATH, which prints our own
faulty H100 fixture (gpu2 row remap pending, gpu5 at x8, gpu6 HW slowdown) while the file
``fault-<node>`` exists and the healthy one otherwise. Every wait is bounded.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT
from tests.slurmd import SlurmdCluster, missing_tools

pytestmark = [pytest.mark.slurm, pytest.mark.skipif(bool(missing_tools()),
                                                    reason=f"slurmd cluster needs: {missing_tools()}")]

INTERVAL_S = 10
WAIT_S = 240.0  # generous: slurmd kills a health check running past 60 s on a loaded machine


def _write_exec(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def _wrapper(base: Path, conf_path: Path) -> Path:
    """The shipped wrapper (inventories/deploy/slurm-healthcheck.sh), reading its site defaults from
    ``base/defaults`` instead of /etc/default/healthcheck: PATH with the shims, our checkout, SLURM_CONF."""
    shims = base / "bin"
    shims.mkdir(exist_ok=True)
    xml = FIXTURES / "nvidia-smi-xml"
    _write_exec(shims / "nvidia-smi", (
        "#!/bin/sh\n# test shim: faulty report while fault-$SLURMD_NODENAME exists\n"
        f'if [ -e {shlex.quote(str(base))}/fault-"$SLURMD_NODENAME" ]; then '
        f"exec cat {shlex.quote(str(xml / 'h100-8x-faulty.xml'))}; fi\n"
        f"exec cat {shlex.quote(str(xml / 'h100-8x-healthy.xml'))}\n"))
    _write_exec(shims / "healthcheck", (  # this checkout's healthcheck; counts its finished runs per node
        f'#!/bin/sh\n{shlex.quote(sys.executable)} -m healthcheck "$@"\nrc=$?\n'
        f'echo "run rc=$rc" >>{shlex.quote(str(base))}/runs-"$SLURMD_NODENAME"\nexit $rc\n'))
    (base / "defaults").write_text("\n".join([
        f"PATH={shlex.quote(str(shims))}:$PATH", f"PYTHONPATH={shlex.quote(str(ROOT))}",
        f"SLURM_CONF={shlex.quote(str(conf_path))}", f"HEALTHCHECK_NODE_OUT={shlex.quote(str(base / 'spool'))}",
        "HEALTHCHECK_NODE_PROBES=gpu", "HEALTHCHECK_NODE_PROFILE=h100-sxm5-8x", "HEALTHCHECK_NODE_TIMEOUT=20",
        f'HEALTHCHECK_NODE_LOG={shlex.quote(str(base))}/log-"$SLURMD_NODENAME"', ""]))
    shipped = (ROOT / "inventories" / "deploy" / "slurm-healthcheck.sh").read_text()
    assert shipped.count("/etc/default/healthcheck") == 2
    return _write_exec(base / "slurm-healthcheck.sh", shipped.replace("/etc/default/healthcheck",
                                                                      str(base / "defaults")))


class HealthCheckCluster(SlurmdCluster):
    """slurmd nodes whose slurm.conf runs our wrapper as HealthCheckProgram and/or Epilog."""

    hook_lines = ""

    def _conf_text(self, munge_socket: Path) -> str:
        return super()._conf_text(munge_socket) + self.hook_lines


def _start(base: Path, names: tuple[str, ...], health: bool, epilog: bool) -> HealthCheckCluster:
    base.mkdir(parents=True, exist_ok=True)
    conf = base / "slurm.conf"  # where SlurmCluster writes it
    wrapper = _wrapper(base, conf)
    lines = ""
    if health:
        lines += f"HealthCheckProgram={wrapper}\nHealthCheckInterval={INTERVAL_S}\nHealthCheckNodeState=ANY\n"
    if epilog:
        lines += f"Epilog={wrapper}\n"
    cls = type("Cluster", (HealthCheckCluster,), {"hook_lines": lines})
    return cls.start(base, names=names, cpus=1)


def _node(cluster: SlurmdCluster, name: str) -> tuple[str, str]:
    """(state, reason) as sinfo prints them: ``drained``/``idle``..., reason text or ``none``."""
    out = cluster.tool("sinfo", "-h", "-N", "-n", name, "-o", "%T|%E", check=False).stdout.strip()
    state, _, reason = out.partition("|")
    return state, reason


def _wait(predicate, what: str, timeout_s: float = WAIT_S) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout_s:g}s: {what}")


def _runs(base: Path, node: str) -> int:
    """Runs on ``node`` that finished (slurmd kills a HealthCheckProgram after 60 s on a loaded machine)."""
    runs = base / f"runs-{node}"
    return runs.read_text().count("run rc=") if runs.is_file() else 0


@pytest.fixture(scope="module")
def health(tmp_path_factory):
    base = tmp_path_factory.mktemp("hc")
    with _start(base, ("node01", "node02"), health=True, epilog=False) as cluster:
        yield cluster


def test_fault_drains_own_node_with_our_reason_then_resumes(health: HealthCheckCluster) -> None:
    base = health.base
    _wait(lambda: _runs(base, "node01") >= 1, "first health check run on node01")
    assert _node(health, "node01")[0] == "idle"
    (base / "fault-node01").touch()
    try:
        _wait(lambda: _node(health, "node01")[0] in ("drained", "draining"), "node01 drained by its health check")
        _, reason = _node(health, "node01")
        assert reason.startswith("healthcheck: gpu.pcie.width gpu5: gpu5 (00000000:BB:00.0): gpu pcie width 8 "
                                 "lanes, expected == 16 lanes"), reason
        assert reason.endswith("(+2 more)") and len(reason) <= 160, reason
        assert _node(health, "node02") == ("idle", "none")  # the healthy node is untouched
        def log() -> str:
            return (base / "log-node01").read_text() if (base / "log-node01").is_file() else ""

        # the node is drained before the run ends: its breaker takes a second look, then the run says so
        _wait(lambda: "healthcheck: slurm drain: drain (IDLE)" in log(), "node01's run reporting its drain")
        assert "FAIL  gpu.row_remap.pending gpu2:" in log()
        # the node's bundle is in the spool, graded FAIL
        assert (base / "spool" / "node01" / "raw" / "node01" / "nvidia-smi-q-x.out").is_file()
    finally:
        (base / "fault-node01").unlink()
    _wait(lambda: _node(health, "node01") == ("idle", "none"), "node01 resumed after the fault was removed")
    assert "healthcheck: slurm resume: resume: passes now" in (base / "log-node01").read_text()


def test_admin_reason_is_never_overwritten_nor_resumed(health: HealthCheckCluster) -> None:
    base = health.base
    health.scontrol("update", "NodeName=node02", "State=DRAIN", "Reason=bios update ticket 4711")
    (base / "fault-node02").touch()
    try:
        before = _runs(base, "node02")
        _wait(lambda: _runs(base, "node02") >= before + 2, "two health check runs on node02 with the fault")
        assert _node(health, "node02") == ("drained", "bios update ticket 4711")
        (base / "fault-node02").unlink()
        before = _runs(base, "node02")
        _wait(lambda: _runs(base, "node02") >= before + 2, "two clean health check runs on node02")
        assert _node(health, "node02") == ("drained", "bios update ticket 4711")  # passing does not resume it
        assert "left-alone" in (base / "log-node02").read_text()
    finally:
        (base / "fault-node02").unlink(missing_ok=True)
        health.scontrol("update", "NodeName=node02", "State=RESUME")


def test_epilog_drains_the_node_after_a_job(tmp_path: Path) -> None:
    with _start(tmp_path / "epi", ("node01",), health=False, epilog=True) as cluster:
        (cluster.base / "fault-node01").touch()
        job = cluster.tool("srun", "-w", "node01", "-J", "someones-job", "true", check=False)
        assert job.returncode == 0, job.stderr
        _wait(lambda: _node(cluster, "node01")[0] in ("drained", "draining"), "node01 drained by its epilog")
        assert _node(cluster, "node01")[1].startswith("healthcheck: gpu.pcie.width gpu5:")
        assert os.path.getsize(cluster.base / "log-node01") > 0
