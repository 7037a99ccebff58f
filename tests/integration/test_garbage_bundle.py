"""Bad input never crashes a sweep: every command id fed garbage, empty, binary or cut output."""

from __future__ import annotations

import pytest

from healthcheck import probes
from healthcheck.core.model import CommandResult, Host, Status
from healthcheck.core.profiles import load_profile
from healthcheck.core.spec import EvalContext
from healthcheck.run.execute import execute_run
from healthcheck.run.options import OutputOptions, RunOptions, TargetOptions
from healthcheck.run.stages import probe_command_ids, run_probe

GARBAGE = {
    "empty": b"",
    "binary": bytes(range(256)) * 4,
    "text": b"Segmentation fault (core dumped)\nthis is not the output you are looking for\n",
    "html": b"<html><body><script>alert(1)</script></body></html>\n",
    "cut-xml": b'<?xml version="1.0" ?>\n<nvidia_smi_log>\n<attached_gpus>8</attached',
    "numbers": b"1 2 3\n4 5 6\n" * 50,
}


def _all_command_ids() -> list[str]:
    ids: set[str] = set()
    for probe in probes.all_probes():
        ids.update(probe_command_ids(probe, {"kernel_log_window_h": 24}))
    return sorted(ids)


@pytest.mark.parametrize("kind", sorted(GARBAGE))
def test_garbage_outputs_become_findings_not_crashes(tmp_path, kind):
    bundle = tmp_path / "bundle"
    for rc in (0, 1):
        folder = bundle / "raw" / f"node-rc{rc}"
        folder.mkdir(parents=True)
        for cid in _all_command_ids():
            (folder / f"{cid}.out").write_bytes(GARBAGE[kind])
            (folder / f"{cid}.rc").write_text(f"{rc}\n")
    outcome = execute_run(RunOptions(target=TargetOptions(replay=bundle, profile="h100-sxm5-8x"),
                                     outputs=OutputOptions(run_dir=tmp_path / "run")))
    for host in outcome.results.hosts.values():
        crashed = [f for f in host.findings if "crashed" in f.message or f.check.endswith(".evaluate")]
        assert crashed == [], crashed
        assert host.verdict in (Status.FAIL, Status.ERROR), host.name
    assert (tmp_path / "run" / "report.html").is_file()


@pytest.mark.parametrize("kind", sorted(GARBAGE))
@pytest.mark.parametrize("probe", [p.name for p in probes.all_probes()])
def test_every_probe_answers_garbage_with_a_finding(probe, kind):
    spec = probes.get(probe)
    profile = load_profile("h100-sxm5-8x")
    ctx = EvalContext(host=Host("n1", profile=profile.name), profile=profile, options={"kernel_log_window_h": 24})
    results = {cid: CommandResult("n1", cid, GARBAGE[kind], b"", 0)
               for cid in probe_command_ids(spec, ctx.options)}
    findings, _ = run_probe(spec, ctx.host, results, ctx)
    assert findings, f"{probe} said nothing about {kind} output"
    assert not [f for f in findings if "crashed" in f.message or f.check.endswith(".evaluate")], findings
    assert any(f.status is not Status.PASS for f in findings), f"{probe} passed {kind} output"
