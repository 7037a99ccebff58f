"""Ansible inventories through the real ``ansible-inventory`` (Debian's ansible): INI, YAML, ``--list`` JSON.

The INI and YAML files are our own values in Ansible's documented inventory formats; the JSON is what
the installed ``ansible-inventory --list`` printed for the INI file, read back without Ansible.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from healthcheck.inventory.hosts import InventoryError
from healthcheck.inventory.load import load_inventory
from healthcheck.run.execute import execute_run
from healthcheck.run.options import OutputOptions, RunOptions, SelectionOptions, TargetOptions, TransportOptions

pytestmark = pytest.mark.skipif(shutil.which("ansible-inventory") is None, reason="ansible-inventory absent")

INI = """\
login01 ansible_connection=local

[rack_a]
gpu[01:03] ansible_user=ops

[rack_b]
gpu04 ansible_host=10.20.0.4 ansible_port=2222 healthcheck_profile=b200-hgx-8x slurm_node=gpu-004

[gpu:children]
rack_a
rack_b

[gpu:vars]
profile=h100-sxm5-8x
site_ntp=ntp1.example.org
"""

YAML = """\
all:
  children:
    gpu:
      hosts:
        gpu05: {ansible_host: 10.20.0.5, ansible_user: ops, healthcheck_mounts: [/lustre]}
        gpu06: {ansible_host: 10.20.0.6}
      vars: {profile: h100-sxm5-8x}
"""


def rows(inv) -> list[tuple]:
    return [(h.name, h.group, h.address, h.user, h.port, h.profile, h.transport) for h in inv.hosts]


def test_ini_file_read_through_ansible_inventory_maps_groups_and_connection_vars(tmp_path):
    path = tmp_path / "hosts.ini"
    path.write_text(INI)
    inv = load_inventory(path, known_profiles=["h100-sxm5-8x", "b200-hgx-8x"])
    assert rows(inv) == [
        ("login01", None, None, None, None, None, "local"),
        ("gpu01", "rack_a", None, "ops", None, "h100-sxm5-8x", "ssh"),
        ("gpu02", "rack_a", None, "ops", None, "h100-sxm5-8x", "ssh"),
        ("gpu03", "rack_a", None, "ops", None, "h100-sxm5-8x", "ssh"),
        ("gpu04", "rack_b", "10.20.0.4", None, 2222, "b200-hgx-8x", "ssh")]
    gpu04 = inv.host("gpu04")
    assert gpu04.vars["slurm_node"] == "gpu-004"
    assert gpu04.vars["extra"] == {"site_ntp": "ntp1.example.org"}  # other roles' vars kept aside
    assert inv.groups == {"gpu": ("gpu01", "gpu02", "gpu03", "gpu04"), "rack_a": ("gpu01", "gpu02", "gpu03"),
                          "rack_b": ("gpu04",)}

    # the saved `ansible-inventory --list` JSON gives the same hosts without running Ansible
    listed = subprocess.run(["ansible-inventory", "-i", str(path), "--list"], capture_output=True, text=True,
                            timeout=120, check=True).stdout
    (tmp_path / "inventory.json").write_text(listed)
    assert rows(load_inventory(tmp_path / "inventory.json")) == rows(inv)
    assert json.loads(listed)["_meta"]["hostvars"]["gpu04"]["ansible_port"] == 2222


def test_yaml_ansible_inventory_and_our_host_vars_with_the_prefix(tmp_path):
    path = tmp_path / "inventory.yml"
    path.write_text(YAML)
    inv = load_inventory(path)
    assert rows(inv) == [("gpu05", "gpu", "10.20.0.5", "ops", None, "h100-sxm5-8x", "ssh"),
                         ("gpu06", "gpu", "10.20.0.6", None, None, "h100-sxm5-8x", "ssh")]
    assert inv.host("gpu05").vars["mounts"] == ["/lustre"]


def test_broken_ansible_inventory_and_bad_vars_are_errors_naming_the_file(tmp_path):
    (tmp_path / "broken.ini").write_text("[rack_a\ngpu01\n")
    with pytest.raises(InventoryError, match=r"broken.ini: ansible-inventory failed \(exit 1\)"):
        load_inventory(tmp_path / "broken.ini")
    (tmp_path / "badport.ini").write_text("gpu01 ansible_port=99999\n")
    with pytest.raises(InventoryError, match=r"badport.ini: host gpu01: port 99999 is not a TCP port"):
        load_inventory(tmp_path / "badport.ini")
    (tmp_path / "typo.ini").write_text("gpu01 healthcheck_profile=h100-sxm5-8\n")
    with pytest.raises(InventoryError, match="unknown profile 'h100-sxm5-8' \\(did you mean 'h100-sxm5-8x'"):
        load_inventory(tmp_path / "typo.ini", known_profiles=["h100-sxm5-8x"])


@pytest.mark.sshd
def test_sweep_over_sshd_hosts_from_an_ansible_ini_inventory(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(2)
    lines = ["[gpu]"] + [f"{h.name} ansible_host={h.address} ansible_port={h.port} ansible_user={cluster.user}"
                         for h in cluster.hosts]
    (tmp_path / "hosts.ini").write_text("\n".join(lines) + "\n")
    outcome = execute_run(RunOptions(target=TargetOptions(inventory=tmp_path / "hosts.ini"),
                                     transport=TransportOptions(ssh_config=cluster.ssh_config),
                                     selection=SelectionOptions(probes=["system"]),
                                     outputs=OutputOptions(run_dir=tmp_path / "run")))
    assert {n: h.verdict.value for n, h in outcome.results.hosts.items()} == {"node01": "PASS", "node02": "PASS"}
    assert {n: h.group for n, h in outcome.results.hosts.items()} == {"node01": "gpu", "node02": "gpu"}
    hostname = {n: next(f.value for f in h.findings if f.check == "system.hostname")
                for n, h in outcome.results.hosts.items()}
    assert hostname == {"node01": "node01", "node02": "node02"}
    assert all(h.sessions() == 1 for h in cluster.hosts)
