from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from healthcheck.inventory.hosts import InventoryError, hostlist_size, parse_inventory
from healthcheck.inventory.load import load_inventory


def test_groups_defaults_and_per_host_override():
    inv = parse_inventory({
        "defaults": {"user": "ops", "profile": "h100-sxm5-8x"},
        "groups": {"gpu": {"hosts": "gpu[001-004]", "vars": {"port": 2222}},
                   "big": {"hosts": ["b200-[1-2]"], "vars": {"profile": "b200-hgx-8x"}}},
        "hosts": {"gpu003": {"address": "10.1.0.3"}, "login01": {"transport": "local"}},
        "controller": "slurmctl01",
    }, "inv.yaml")
    names = [h.name for h in inv.hosts]
    assert names == ["gpu001", "gpu002", "gpu003", "gpu004", "b200-1", "b200-2", "login01"]
    gpu3 = inv.host("gpu003")
    assert (gpu3.address, gpu3.port, gpu3.user, gpu3.profile, gpu3.group) == \
           ("10.1.0.3", 2222, "ops", "h100-sxm5-8x", "gpu")
    assert inv.host("b200-2").profile == "b200-hgx-8x"
    assert inv.host("login01").transport == "local" and inv.host("login01").group is None
    assert inv.controller == "slurmctl01"
    assert inv.groups["gpu"] == ("gpu001", "gpu002", "gpu003", "gpu004")


@pytest.mark.parametrize(("doc", "message"), [
    ({"groups": {"g": {"hosts": "gpu[001-"}}}, "bad hostlist 'gpu[001-'"),
    ({"groups": {"g": {"hosts": "a", "vars": {"adress": "1.2.3.4"}}}},
     "unknown var 'adress' (did you mean 'address'?)"),
    ({"groups": {"a": {"hosts": "n[1-2]"}, "b": {"hosts": "n2"}}}, "duplicate host 'n2' (already in group 'a')"),
    ({"hostz": {}}, "unknown key 'hostz'"),
    ({"groups": {"g": {"hosts": "n1", "vars": {"port": 70000}}}}, "port 70000 is not a TCP port"),
    ({"hosts": {"../etc": {}}}, "host name '../etc' is not usable"),
    ({"groups": {"g": {"vars": {}}}}, "groups.g: has no hosts"),
    ({}, "defines no hosts"),
])
def test_errors_name_file_and_entry(doc, message):
    with pytest.raises(InventoryError) as err:
        parse_inventory(doc, "site/inv.yaml")
    assert "site/inv.yaml" in str(err.value)
    assert message in str(err.value)


def test_unknown_profile_is_an_error_with_hint():
    with pytest.raises(InventoryError, match=r"unknown profile 'h100-sxm-8x' \(did you mean 'h100-sxm5-8x'\?\)"):
        parse_inventory({"defaults": {"profile": "h100-sxm-8x"}, "hosts": {"n1": {}}}, "inv.yaml",
                        known_profiles=["h100-sxm5-8x", "a100-sxm4-80gb-8x"])


def test_missing_and_invalid_yaml(tmp_path: Path):
    with pytest.raises(InventoryError, match="does not exist"):
        load_inventory(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("groups: [unclosed\n")
    with pytest.raises(InventoryError, match="not valid YAML"):
        load_inventory(bad)


def test_example_inventories_load():
    root = Path(__file__).resolve().parents[2] / "inventories"
    from healthcheck.core.profiles import available_profiles

    for path in sorted(root.glob("*.yaml")):
        inv = load_inventory(path, known_profiles=available_profiles())
        assert inv.hosts, path


# --- resource limits and names (issue 13.2, 13.9) ---------------------------------------------

BOMB = """defaults:
  extra:
    a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]
    b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
    c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
    d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
    e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
    f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
    g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
groups: {g: {hosts: "n[1-2]"}}
"""


@pytest.mark.parametrize("text, message", [
    (BOMB, "YAML expands to more than 1000000 values (aliases included): an alias bomb?"),
    ("defaults: {extra: " + "[" * 5000 + "]" * 5000 + "}\ngroups: {g: {hosts: n1}}\n",
     "YAML nested deeper than 64 levels"),
    ('groups: {g: {hosts: "x[0-99999999]"}}\n',
     "groups.g: hostlist 'x[0-99999999]' expands to 100000000 hosts, more than the limit of 50000 "
     "(raise it with --max-hosts)"),
    ("groups: {g: {hosts: n1, vars: {port: true}}}\n", "groups.g.vars: port True is not a TCP port"),
    ("hosts: {'" + "n" * 300 + "': {}}\n", "is 300 characters long (at most 253)"),
    ("hosts: {_jobs: {}}\n", "host name '_jobs' is not usable"),
])
def test_inventory_resource_limits_are_one_line_errors(tmp_path: Path, text: str, message: str):
    path = tmp_path / "inv.yaml"
    path.write_text(text)
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert message in str(info.value) and str(path) in str(info.value)


def test_max_hosts_can_be_raised_and_a_directory_is_refused(tmp_path: Path):
    path = tmp_path / "inv.yaml"
    path.write_text('groups: {g: {hosts: "n[1-20]"}}\n')
    with pytest.raises(InventoryError, match="expands to 20 hosts, more than the limit of 10"):
        load_inventory(path, max_hosts=10)
    assert len(load_inventory(path, max_hosts=20).hosts) == 20
    with pytest.raises(InventoryError, match=f"inventory {tmp_path} is a directory, not a YAML file"):
        load_inventory(tmp_path)
    assert hostlist_size("r[1-2]n[01-10],x[0-10/2],y") == 27

@pytest.mark.parametrize(("var", "value", "message"), [
    ("mounts", "/tmp", "mounts '/tmp' is not a list of mount points ([/scratch, /home])"),
    ("services", [1], "services [1] is not a list of systemd unit names"),
    ("port", True, "port True is not a TCP port 1-65535"),
    ("port", 70000, "port 70000 is not a TCP port 1-65535"),
    ("xid_ignore", True, "xid_ignore True is not a list of Xid numbers"),
    ("transport", "rsh", "transport 'rsh' is not one of ssh, local, slurm"),
    ("address", 10, "address 10 is not a host name or IP address"),
    ("leaf", "spine/leaf1", "leaf 'spine/leaf1' is not a leaf switch name or number (no '/')"),
    ("nvlink_domain", ["nvl1"], "nvlink_domain ['nvl1'] is not an NVLink domain name or number (no '/')"),
])
def test_host_vars_are_type_checked(tmp_path: Path, var: str, value: object, message: str) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump({"hosts": {"gpu001": {var: value}}}))
    with pytest.raises(InventoryError) as exc:
        load_inventory(path)
    assert str(exc.value) == f"{path}: hosts.gpu001: {message}"


def test_fabric_place_vars_reach_the_host() -> None:
    inv = parse_inventory({"groups": {"su1": {"hosts": "gpu[001-002]", "vars": {"leaf": "L1", "nvlink_domain": 7}}}},
                          "inv.yaml")
    assert [(h.vars["leaf"], h.vars["nvlink_domain"]) for h in inv.hosts] == [("L1", 7), ("L1", 7)]
