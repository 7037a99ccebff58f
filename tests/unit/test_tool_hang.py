"""A hung GPU tool: FAIL gpu.tool_hang, its later commands SKIP, other timeouts stay ERROR, replay keeps it."""

from __future__ import annotations

import sys
import threading
import types

import pytest

from healthcheck import probes
from healthcheck.core.model import CommandResult, Host, HostCollection, Status, host_verdict
from healthcheck.core.profiles import load_profile
from healthcheck.run.execute import execute_run
from healthcheck.run.nodetools import TOOLS, bounded, command_tools, unknown_tools
from healthcheck.run.options import OutputOptions, RunOptions, SelectionOptions, TargetOptions, TransportOptions
from healthcheck.run.stages import grade_host
from healthcheck.store.bundle import read_host
from healthcheck.store.rundir import write_collection
from tests.conftest import fixture_text

H100 = load_profile("h100-sxm5-8x")
SELECTED = probes.select(["system", "gpu", "topology", "nvlink", "xid"])
HUNG = "not run: nvidia-smi hung for 20 s in nvidia-smi-q-x"


def _result(cid: str, out: str = "", rc: int | None = 0, **kw) -> CommandResult:
    return CommandResult(host="gpu001", command_id=cid, stdout=out.encode(), rc=rc, **kw)


def _hung_node() -> HostCollection:
    journal = fixture_text("xid/journalctl-k-healthy.txt").split("\n", 1)[1]  # without our "# source" line
    log = "# kernel-log source=journalctl uptime_s=5000\n" + journal
    results = [
        _result("hostname", "gpu001\n"), _result("uname-r", "6.8.0-45-generic\n"),
        _result("nvidia-smi-q-x", rc=124, timed_out=True, timeout_s=20.0),
        _result("nvidia-smi-topo", rc=None, not_run=HUNG), _result("nvidia-smi-nvlink-s", rc=None, not_run=HUNG),
        _result("nvidia-smi-nvlink-e", rc=None, not_run=HUNG), _result("kernel-log", log, timeout_s=20.0),
    ]
    return HostCollection(host="gpu001", results={r.command_id: r for r in results},
                          collected_at="2026-11-21T04:00:00+00:00")


def _grade(collection: HostCollection):
    findings, _ = grade_host(Host("gpu001", profile="h100-sxm5-8x"), collection, SELECTED, H100, "ssh")
    return findings


def test_hung_nvidia_smi_is_a_fail_naming_the_tool_and_its_timeout():
    findings = _grade(_hung_node())
    [hang] = [f for f in findings if f.check == "gpu.tool_hang"]
    assert (hang.status, hang.value, hang.unit, hang.source) == (Status.FAIL, 20.0, "s", "nvidia-smi-q-x")
    assert hang.message.startswith("nvidia-smi hung: nvidia-smi-q-x did not answer within 20 s")
    assert "Xid 79" in hang.remedy and "reboot" in hang.remedy
    assert host_verdict(findings) is Status.FAIL


def test_commands_not_started_after_the_hang_are_skips_saying_why():
    findings = _grade(_hung_node())
    skipped = {f.source: f for f in findings if f.status is Status.SKIP and f.check.endswith(".collect")}
    assert skipped["nvidia-smi-topo"].message == f"nvidia-smi-topo {HUNG}"
    assert skipped["nvidia-smi-topo"].check == "topology.collect"
    assert {"nvidia-smi-nvlink-s", "nvidia-smi-nvlink-e"} <= set(skipped)


def test_commands_independent_of_the_hung_tool_are_still_graded():
    findings = _grade(_hung_node())
    assert [f.status for f in findings if f.check == "system.hostname"] == [Status.PASS]
    assert any(f.check.startswith("xid.") and f.source == "kernel-log" and f.status is Status.PASS for f in findings)


def test_a_hung_kernel_log_reader_stays_an_error_not_a_hardware_fail():
    collection = HostCollection(host="gpu001", results={
        "hostname": _result("hostname", "gpu001\n"),
        "kernel-log": _result("kernel-log", rc=124, timed_out=True, timeout_s=20.0)})
    findings = _grade(collection)
    assert not [f for f in findings if f.check == "gpu.tool_hang"]
    assert [f.status for f in findings if f.check == "xid.collect"] == [Status.ERROR]


def test_not_run_and_timeout_survive_the_run_directory(tmp_path):
    write_collection(tmp_path, _hung_node())
    back = read_host(tmp_path / "raw" / "gpu001")
    assert back.results["nvidia-smi-topo"].not_run == HUNG and back.results["nvidia-smi-topo"].rc is None
    assert back.results["nvidia-smi-q-x"].timeout_s == 20.0 and back.results["nvidia-smi-q-x"].timed_out
    assert [(f.check, f.status, f.message) for f in _grade(back)] == \
           [(f.check, f.status, f.message) for f in _grade(_hung_node())]


def test_every_declared_tool_is_known_and_gpu_commands_declare_nvidia_smi():
    declared = command_tools(probes.select())
    assert unknown_tools(declared) == []
    for cid in ("nvidia-smi-q-x", "nvidia-smi-topo", "nvidia-smi-nvlink-s", "nvidia-smi-nvlink-e", "dcgmi-dmon"):
        assert "nvidia-smi" in declared[cid], cid
    assert declared["kernel-log"] == ("journalctl",) and TOOLS["journalctl"].hang_check is None
    assert "hostname" not in declared


def test_a_hung_nvml_call_in_local_mode_is_a_tool_hang_and_the_sweep_finishes(monkeypatch, tmp_path):
    release = threading.Event()
    nvml = types.ModuleType("pynvml")
    nvml.NVMLError = type("NVMLError", (Exception,), {})
    nvml.nvmlInit = lambda: release.wait(120)  # a driver call that does not return
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    try:
        outcome = execute_run(RunOptions(target=TargetOptions(local=True),
                                         selection=SelectionOptions(probes=["gpu"]),
                                         transport=TransportOptions(timeout_s=1),
                                         outputs=OutputOptions(run_dir=tmp_path / "run", render=False)))
    finally:
        release.set()
    [host] = outcome.results.hosts.values()
    [hang] = [f for f in host.findings if f.check == "gpu.tool_hang"]
    assert (hang.status, hang.source, hang.value) == (Status.FAIL, "nvml", 1.0)
    assert hang.message.startswith("nvml hung: NVML calls (pynvml) did not answer within 1 s")
    assert host.verdict is Status.FAIL


def test_bounded_returns_values_raises_errors_and_gives_up_on_hangs():
    assert bounded(lambda: 42, 5) == (True, 42)
    release = threading.Event()
    assert bounded(lambda: release.wait(60), 0.2) == (False, None)
    release.set()
    with pytest.raises(ZeroDivisionError):
        bounded(lambda: 1 / 0, 5)
