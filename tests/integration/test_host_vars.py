"""Host vars ``mounts`` and ``services`` over real sshd hosts: they reach each host's script and its grading.

node01 requires ``/`` (mounted everywhere), node02 requires ``/srv/not-mounted-here``; node03 has no
var. The same profile (none) for all three, so the plans differ only by the vars.
"""

from __future__ import annotations

import json

import pytest

from healthcheck.core.hostvars import host_profile, plan_key
from healthcheck.core.model import Host
from healthcheck.core.profiles import load_profile
from healthcheck.inventory.hosts import InventoryError, parse_inventory
from healthcheck.run.execute import execute_run
from healthcheck.run.options import OutputOptions, RunOptions, SelectionOptions, TargetOptions, TransportOptions


@pytest.mark.sshd
def test_mounts_var_is_stat_ed_and_required_on_that_host_only(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(3)
    inv = cluster.write_inventory(tmp_path / "inv.yaml", profile=None, host_vars={
        "node01": {"mounts": ["/"]}, "node02": {"mounts": ["/srv/not-mounted-here"], "services": ["slurmd"]}})
    outcome = execute_run(RunOptions(target=TargetOptions(inventory=inv),
                                     transport=TransportOptions(ssh_config=cluster.ssh_config),
                                     selection=SelectionOptions(probes=["system"]),
                                     outputs=OutputOptions(run_dir=tmp_path / "run")))
    present = {name: [(f.component, f.status.value) for f in h.findings if f.check == "system.mount.present"]
               for name, h in outcome.results.hosts.items()}
    assert present == {"node01": [("/", "PASS")], "node02": [("/srv/not-mounted-here", "FAIL")], "node03": []}
    [missing] = [f for f in outcome.results.hosts["node02"].findings if f.check == "system.mount.present"]
    assert "inventory host var mounts of node02" in missing.message
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    probe = {key: next(c["line"] for c in cmds if c["id"] == "mount-probe")
             for key, cmds in manifest["commands_by_profile"].items()}
    assert "/srv/not-mounted-here" in probe["|mounts=/srv/not-mounted-here|services=slurmd"]
    assert "/srv/not-mounted-here" not in probe["|mounts=/"]
    assert outcome.results.hosts["node02"].verdict.value == "FAIL"
    assert outcome.results.hosts["node03"].verdict.value == "PASS"


def test_host_profile_adds_to_the_profile_lists_and_keeps_its_name():
    prof = load_profile("h100-sxm5-8x")
    host = Host("gpu007", profile="h100-sxm5-8x", vars={"services": ["slurmd", "nvidia-persistenced"],
                                                       "mounts": ["/lustre"]})
    refined = host_profile(host, prof)
    assert refined.name == "h100-sxm5-8x"
    assert refined.expect("system.services").value == ["nvidia-persistenced", "slurmd"]
    assert refined.expect("system.services").severity == prof.expect("system.services").severity
    assert refined.expect("system.services").source.endswith("; inventory host var services of gpu007")
    assert refined.expect("system.mounts").value == ["/lustre"]
    assert host_profile(Host("gpu008", profile="h100-sxm5-8x"), prof) is prof
    assert plan_key(host) == "h100-sxm5-8x|mounts=/lustre|services=nvidia-persistenced,slurmd"
    assert plan_key(Host("gpu008", profile="h100-sxm5-8x")) == "h100-sxm5-8x"


@pytest.mark.parametrize("hvars, message", [
    ({"mounts": "/lustre"}, "mounts '/lustre' is not a list of mount points"),
    ({"services": [1]}, "services \\[1\\] is not a list of systemd unit names"),
    ({"rail": "a"}, "unknown var 'rail'"),
    ({"labels": {"a": 1}}, "unknown var 'labels'"),
])
def test_list_vars_are_checked_and_undocumented_vars_are_gone(hvars, message):
    with pytest.raises(InventoryError, match=message):
        parse_inventory({"hosts": {"n1": hvars}}, "inv.yaml")
