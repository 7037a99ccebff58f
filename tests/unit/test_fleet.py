"""Fleet consistency: versions differing from the per-profile majority (WARN, FAIL when pinned)."""

from __future__ import annotations

from dataclasses import replace

from healthcheck.core.model import Host, Status
from healthcheck.core.profiles import Expectation, load_profile
from healthcheck.probes import fleet_checks
from healthcheck.probes.fleet import VersionConsistency, host_facts

H100 = load_profile("h100-sxm5-8x")
A100 = load_profile("a100-sxm4-80gb-8x")


def versions(driver="550.90.07", fw="28.41.1000", vbios="96.00.89.00.01", storage_fw="22.39.1002"):
    return {"driver_module": driver, "driver_userspace": driver, "cuda": "12.4", "nccl": "2.21.5",
            "ofed": "MLNX_OFED_LINUX-23.10-1.1.9.0", "vbios": {str(i): vbios for i in range(8)},
            "hca_fw": {**{f"mlx5_{i}": {"type": "MT4129", "fw": fw} for i in range(8)},
                       "mlx5_8": {"type": "MT4125", "fw": storage_fw}}}


def fleet(obs, profile_of=None, profiles=None):
    hosts = {h: Host(name=h, profile=(profile_of or {}).get(h, "h100-sxm5-8x")) for h in obs}
    profiles = profiles or {"h100-sxm5-8x": H100, "a100-sxm4-80gb-8x": A100}
    return VersionConsistency().evaluate_fleet(obs, hosts, profiles)


def find(findings, host, check, component="node"):
    return next(f for f in findings if (f.host, f.check, f.component) == (host, check, component))


def test_registered():
    assert [c.name for c in fleet_checks()].count("fleet.versions") == 1


def test_outlier_firmware_and_driver_name_majority_and_host():
    obs = {"node01": {"versions": versions()}, "node02": {"versions": versions(fw="28.39.1002",
                                                                              driver="550.54.15")},
           "node03": {"versions": versions()}}
    findings = fleet(obs)
    fw = find(findings, "node02", "fleet.version.hca_fw", "MT4129")
    assert (fw.status, fw.value, fw.expected) == (Status.WARN, "28.39.1002", "28.41.1000")
    assert "majority 28.41.1000" in fw.message and "differing: node02" in fw.message
    assert find(findings, "node01", "fleet.version.hca_fw", "MT4129").status is Status.PASS
    driver = find(findings, "node02", "fleet.version.driver")
    assert (driver.status, driver.expected, driver.source) == (Status.WARN, "550.90.07", "nvidia-driver-version")
    # sources name the command each fact came from (HCA firmware from the infiniband probe's sysfs dump)
    assert fw.source == "ib-sysfs"
    # other HCA types are compared on their own
    assert find(findings, "node02", "fleet.version.hca_fw", "MT4125").status is Status.PASS
    assert {f.status for f in findings if f.host in ("node01", "node03")} == {Status.PASS}


def test_vbios_and_cuda_cite_the_shared_nvidia_smi_report():
    obs = {"node01": {"versions": versions()}, "node02": {"versions": {**versions(vbios="96.00.74.00.0D"),
                                                                      "cuda": "12.2"}},
           "node03": {"versions": versions()}}
    findings = fleet(obs)
    for check in ("fleet.version.vbios", "fleet.version.cuda"):
        f = find(findings, "node02", check)
        assert (f.status, f.source) == (Status.WARN, "nvidia-smi-q-x")


def test_pinned_version_difference_is_fail():
    pinned = replace(H100, expectations={**H100.expectations, "version.driver": Expectation(
        key="version.driver", op="eq", value="550.90.07", source="site pin")})
    obs = {f"node0{i}": {"versions": versions()} for i in range(1, 4)}
    obs["node03"] = {"versions": versions(driver="550.54.15")}
    findings = fleet(obs, profiles={"h100-sxm5-8x": pinned})
    driver = find(findings, "node03", "fleet.version.driver")
    assert driver.status is Status.FAIL and "off the profile pin (== 550.90.07, source: site pin)" in driver.message
    assert "majority 550.90.07" in driver.message and "differing: node03" in driver.message
    assert find(findings, "node01", "fleet.version.driver").status is Status.PASS


def pin(key, op, value):
    return replace(H100, expectations={**H100.expectations, key: Expectation(key=key, op=op, value=value,
                                                                              source="site pin")})


def test_host_on_the_pin_is_not_failed_when_the_majority_is_off_it():
    """Two hosts drifted to 550.54.15, one stayed on the pinned 550.90.07: the fleet check must not FAIL
    the one correct host for differing from the drifted majority (the drifted ones FAIL in version.driver)."""
    obs = {"node01": {"versions": versions(driver="550.54.15")}, "node02": {"versions": versions(driver="550.54.15")},
           "node03": {"versions": versions()}}
    findings = fleet(obs, profiles={"h100-sxm5-8x": pin("version.driver", "eq", "550.90.07")})
    right = find(findings, "node03", "fleet.version.driver")
    assert right.status is Status.PASS and "majority of profile h100-sxm5-8x runs 550.54.15" in right.message
    assert right.expected == "== 550.90.07"
    drifted = find(findings, "node01", "fleet.version.driver")  # consistent with its peers: the pin is version.*'s
    assert drifted.status is Status.PASS and "off the profile pin == 550.90.07: see version.driver" in drifted.message


def test_within_a_minimum_pin_a_differing_host_warns_and_no_majority_fails_only_off_pin():
    profile = pin("version.driver", "ge", "550.54.15")
    obs = {"node01": {"versions": versions()}, "node02": {"versions": versions()},
           "node03": {"versions": versions(driver="550.54.15")}}
    skewed = find(fleet(obs, profiles={"h100-sxm5-8x": profile}), "node03", "fleet.version.driver")
    assert skewed.status is Status.WARN and "within the profile pin (>= 550.54.15)" in skewed.message
    obs = {"node01": {"versions": versions(driver="535.129.03")}, "node02": {"versions": versions()}}
    findings = fleet(obs, profiles={"h100-sxm5-8x": profile})
    assert [(f.host, f.status) for f in findings if f.check == "fleet.version.driver"] == [
        ("node01", Status.FAIL), ("node02", Status.WARN)]


def test_legacy_gpu_pin_and_joined_vbios_are_graded_against_the_pin():
    profile = pin("gpu.vbios", "eq", "96.00.89.00.01")
    mixed = versions()
    mixed["vbios"] = {**mixed["vbios"], "7": "96.00.74.00.0D"}
    obs = {"node01": {"versions": versions()}, "node02": {"versions": versions()}, "node03": {"versions": mixed}}
    f = find(fleet(obs, profiles={"h100-sxm5-8x": profile}), "node03", "fleet.version.vbios")
    assert (f.status, f.value) == (Status.FAIL, "96.00.74.00.0D/96.00.89.00.01")


def test_no_majority_warns_every_host():
    obs = {"node01": {"versions": versions(driver="550.54.15")}, "node02": {"versions": versions()}}
    findings = [f for f in fleet(obs) if f.check == "fleet.version.driver"]
    assert [(f.host, f.status) for f in findings] == [("node01", Status.WARN), ("node02", Status.WARN)]
    assert "no majority" in findings[0].message and "550.54.15 on node01" in findings[0].message


def test_profiles_are_compared_separately_and_kernel_os_included():
    obs = {"a1": {"versions": versions(driver="535.129.03")}, "h1": {"versions": versions()},
           "h2": {"versions": versions()},
           "h3": {"versions": versions(), "system": {"kernel": "6.8.0-40-generic", "os_pretty_name": "Ubuntu"}}}
    for h in ("h1", "h2"):
        obs[h]["system"] = {"kernel": "5.15.0-105-generic", "os_pretty_name": "Ubuntu"}
    findings = fleet(obs, profile_of={"a1": "a100-sxm4-80gb-8x"})
    assert not [f for f in findings if f.host == "a1"]  # alone in its profile: nothing to compare
    kernel = find(findings, "h3", "fleet.version.kernel")
    assert (kernel.status, kernel.expected) == (Status.WARN, "5.15.0-105-generic")
    assert find(findings, "h1", "fleet.version.os").status is Status.PASS


def test_malformed_or_missing_observations_do_not_raise():
    assert host_facts({"versions": "garbage", "system": None}) == {}
    assert host_facts({"versions": {"vbios": [1, 2], "hca_fw": {"mlx5_0": "x"}}}) == {}
    findings = fleet({"node01": {}, "node02": {"versions": {}}}, profile_of={})
    assert findings == []


def test_fleet_messages_name_a_bounded_number_of_hosts():
    """Every differing host's finding names the differing hosts: spelled out in full that is
    quadratic in the fleet (320 names in each of 320 findings at 10,000 hosts); eight names and a count."""
    obs = {f"node{i:03d}": {"versions": versions(driver="550.54.15" if i % 3 == 0 else "550.90.07")}
           for i in range(30)}
    driver = find(fleet(obs), "node000", "fleet.version.driver")
    assert driver.status is Status.WARN
    assert "differing: node000, node003, node006, node009, node012, node015, node018, node021 and 2 more" \
        in driver.message
    split = {f"node{i:03d}": {"versions": versions(driver=f"550.{i % 3}.0")} for i in range(30)}
    mixed = find(fleet(split), "node001", "fleet.version.driver")
    assert "disagree with no majority (550.0.0 on node000, node003, node006, node009, node012, node015, " \
           "node018, node021 and 2 more, 550.1.0 on node001," in mixed.message
