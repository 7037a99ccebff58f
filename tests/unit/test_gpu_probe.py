"""The gpu probe as registered: commands, source preference, and one sweep over sshd test hosts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from healthcheck import probes as registry
from healthcheck.core.model import CommandResult, Host, Status
from healthcheck.core.profiles import load_profile
from healthcheck.core.spec import EvalContext, ParseError
from healthcheck.probes.gpu import parse_gpu
from healthcheck.store.results import load_results
from tests.conftest import fixture_text


def _result(command_id: str, text: str, rc: int = 0) -> CommandResult:
    return CommandResult(host="gpu001", command_id=command_id, stdout=text.encode(), rc=rc)


def test_registered_with_live_command_and_bundle_sources():
    probe = registry.get("gpu")
    assert dict(probe.commands({})) == {"nvidia-smi-q-x": "nvidia-smi -q -x"}
    assert set(probe.accepts) == {"nvidia-smi-q", "nvidia-smi", "nvidia-smi-l"}
    assert probe.missing_tool_status is Status.FAIL


def test_xml_preferred_over_list_when_a_bundle_has_both():
    obs = parse_gpu({"nvidia-smi-l": _result("nvidia-smi-l", fixture_text("nvidia-smi-l/h100-8x-healthy.txt")),
                     "nvidia-smi-q-x": _result("nvidia-smi-q-x", fixture_text("nvidia-smi-xml/h100-8x-faulty.xml"))})
    assert obs.source == "nvidia-smi-q-x" and obs.gpus[2].remap.pending is True


def test_list_alone_still_counts_gpus():
    obs = parse_gpu({"nvidia-smi-l": _result("nvidia-smi-l", fixture_text("nvidia-smi-l/h100-8x-healthy.txt"))})
    assert (obs.source, obs.count, obs.partial) == ("nvidia-smi-l", 8, True)
    findings = registry.get("gpu").evaluate(obs, _ctx())
    assert {f.check for f in findings} == {"gpu.count", "gpu.model"}
    assert all(f.status is Status.PASS for f in findings)


def test_stderr_error_line_is_read():
    result = CommandResult(host="gpu001", command_id="nvidia-smi-q-x", rc=9,
                           stderr=fixture_text("nvidia-smi-errors/driver-not-loaded.txt").encode())
    assert [e.kind for e in parse_gpu({"nvidia-smi-q-x": result}).errors] == ["driver_not_loaded"]


def test_no_known_source_raises():
    with pytest.raises(ParseError):
        parse_gpu({"hostname": _result("hostname", "gpu001\n")})


def _ctx():
    return EvalContext(host=Host("gpu001"), profile=load_profile("h100-sxm5-8x"))


@pytest.mark.sshd
def test_sweep_over_ssh_hosts_with_one_faulty_gpu_node(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(3)
    cluster.add_tool("node01", "nvidia-smi", {"-q -x": (fixture_text("nvidia-smi-xml/h100-8x-healthy.xml"), 0)})
    cluster.add_tool("node02", "nvidia-smi", {"-q -x": (fixture_text("nvidia-smi-xml/h100-8x-faulty.xml"), 0)})
    cluster.add_tool("node03", "nvidia-smi", {"*": (fixture_text("nvidia-smi-errors/driver-not-loaded.txt"), 9)})
    inv = cluster.write_inventory(tmp_path / "inv.yaml", profile="h100-sxm5-8x")
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "healthcheck", "run", "-i", str(inv), "-F",
                           str(cluster.ssh_config), "--run-dir", str(run_dir), "--probes", "gpu"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    hosts = json.loads((run_dir / "results.json").read_text())["hosts"]

    def bad(host):
        return {(f["check"], f["component"]) for f in hosts[host]["findings"] if f["status"] in ("FAIL", "ERROR")}

    assert bad("node01") == set()
    assert bad("node02") == {("gpu.row_remap.pending", "gpu2"), ("gpu.pcie.width", "gpu5"),
                             ("gpu.clock_events", "gpu6")}
    assert {"gpu.driver", "gpu.count"} <= {check for check, _ in bad("node03")}
    table = load_results(run_dir, observations=True).hosts["node02"].observations["gpu"]["gpus"]
    assert len(table) == 8 and table[5]["pcie_width_current"] == 8 and table[2]["remap"]["pending"] is True
    assert (run_dir / "raw" / "node02" / "nvidia-smi-q-x.out").read_text().startswith("<?xml")
