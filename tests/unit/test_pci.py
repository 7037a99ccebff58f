"""PCI probe: GPUs and HCAs on the bus vs the driver vs the profile, on our sysfs fixtures and a real lspci layout."""

from __future__ import annotations

import re

import pytest

from healthcheck.core.model import CommandResult, Host, Status
from healthcheck.core.profiles import load_profile
from healthcheck.core.spec import EvalContext, ParseError
from healthcheck.probes.pci import COMMANDS, evaluate_pci, parse_pci
from healthcheck.probes.pci_parse import parse_lspci, parse_pci_sysfs, pci_address
from tests.conftest import fixture_text

H100 = load_profile("h100-sxm5-8x")
HEALTHY_XML = fixture_text("nvidia-smi-xml/h100-8x-healthy.xml")


def own(rel: str) -> str:
    return fixture_text(f"pci/{rel}").split("\n", 1)[1]


def xml_without(*bus_ids: str) -> str:
    """Our healthy 8x H100 XML fixture with some GPU blocks removed (the driver lost them)."""
    text = HEALTHY_XML
    for bus in bus_ids:
        text = re.sub(rf'\s*<gpu id="00000000:{bus}">.*?</gpu>', "", text, count=1, flags=re.S)
    return text.replace("<attached_gpus>8</attached_gpus>", f"<attached_gpus>{8 - len(bus_ids)}</attached_gpus>")


def run(outputs: dict[str, str], profile=H100):
    obs = parse_pci({cid: CommandResult(host="gpu001", command_id=cid, stdout=text.encode(), rc=0)
                     for cid, text in outputs.items()})
    return obs, evaluate_pci(obs, EvalContext(host=Host(name="gpu001"), profile=profile))


def by_check(findings, check):
    return [f for f in findings if f.check == check]


def test_sysfs_parser_keeps_gpus_hcas_and_rdma_mapping():
    inv = parse_pci_sysfs(own("sysfs-h100-8x-healthy.txt"))
    assert [g.address for g in inv.gpus] == [f"0000:{b}:00.0" for b in ("19", "3b", "4c", "5d", "9b", "bb", "cb", "db")]
    assert {g.ids for g in inv.gpus} == {"10de:2330"} and {g.driver for g in inv.gpus} == {"nvidia"}
    assert len([f for f in inv.functions if f.class_code == "0680"]) == 4   # NVSwitches are not GPUs
    assert len(inv.hcas) == 10 and inv.rdma_devices["mlx5_7"] == "0000:dc:00.0"


def test_sysfs_without_end_marker_is_a_parse_error():
    text = own("sysfs-h100-8x-healthy.txt").replace("# pci-sysfs end\n", "")
    with pytest.raises(ParseError, match="end"):
        parse_pci_sysfs(text)


def test_lspci_real_layout_counts_gpus_not_nvswitches():
    inv = parse_lspci(own("lspci-h100-8x-nvswitch.txt"))
    assert len(inv.functions) == 12 and len(inv.gpus) == 8
    assert inv.gpus[0].address == "0000:18:00.0" and inv.gpus[0].class_code == "0302"
    nn = parse_lspci("0000:18:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] "
                     "(rev a1)\n0005:00:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:1af1] (rev a1)\n")
    assert [(f.address, f.ids, f.class_code) for f in nn.functions] == [
        ("0000:18:00.0", "10de:2330", "0302"), ("0005:00:00.0", "10de:1af1", "0680")]
    assert len(nn.gpus) == 1


def test_pci_address_forms():
    assert pci_address("00000000:CB:00.0") == "0000:cb:00.0"
    assert pci_address("cb:00.0") == "0000:cb:00.0"


def test_healthy_node_passes_three_ways():
    _, findings = run({"pci-sysfs": own("sysfs-h100-8x-healthy.txt"), "nvidia-smi-q-x": HEALTHY_XML})
    statuses = {(f.check, f.status) for f in findings}
    assert statuses == {("pci.gpu.count", Status.PASS), ("pci.gpu.driver", Status.PASS),
                        ("pci.hca.count", Status.PASS), ("pci.hca.driver", Status.PASS)}
    assert by_check(findings, "pci.gpu.driver")[0].value == 8


def test_missing_from_bus_and_missing_from_driver_are_different_faults():
    _, findings = run({"pci-sysfs": own("sysfs-h100-gpu-db-gone-cb-unbound-mlx5_7-no-rdma.txt"),
                       "nvidia-smi-q-x": xml_without("CB:00.0", "DB:00.0")})
    count = by_check(findings, "pci.gpu.count")[0]
    assert (count.status, count.value) == (Status.FAIL, 7)
    assert "BMC" in count.remedy and "nvidia-smi lists 6" in count.message
    driver = by_check(findings, "pci.gpu.driver")
    assert [(f.component, f.status) for f in driver] == [("pci 0000:cb:00.0", Status.FAIL)]
    assert "driver: none" in driver[0].value and "Xid 79" in driver[0].remedy
    hca = by_check(findings, "pci.hca.driver")
    assert [(f.component, f.status) for f in hca] == [("pci 0000:dc:00.0", Status.FAIL)]
    assert "mlx5_core" in hca[0].message and "firmware" in hca[0].remedy
    assert by_check(findings, "pci.hca.count")[0].status is Status.PASS


def test_nvidia_smi_failing_puts_every_gpu_missing_from_driver():
    _, findings = run({"pci-sysfs": own("sysfs-h100-8x-healthy.txt"),
                       "nvidia-smi-q-x": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                                         "driver. Make sure that the latest NVIDIA driver is installed and running.\n"})
    driver = by_check(findings, "pci.gpu.driver")
    assert len(driver) == 8 and {f.status for f in driver} == {Status.FAIL}
    assert "couldn't communicate" in driver[0].message


def test_old_bundle_without_pci_listing_is_skip():
    _, findings = run({"nvidia-smi-q-x": HEALTHY_XML})
    assert [(f.check, f.status) for f in findings] == [("pci.gpu.count", Status.SKIP)]


def test_lspci_bundle_grades_count_and_skips_rdma_mapping():
    _, findings = run({"lspci": own("lspci-h100-8x-nvswitch.txt")})
    assert by_check(findings, "pci.gpu.count")[0].status is Status.PASS
    assert by_check(findings, "pci.gpu.driver")[0].status is Status.SKIP
    assert by_check(findings, "pci.hca.count")[0].status is Status.SKIP   # `lspci -d 10de:` lists no HCA
    assert "without a vendor filter" in by_check(findings, "pci.hca.count")[0].remedy


def test_command_reads_only_nvidia_and_mellanox_and_ends_with_marker():
    line = COMMANDS["pci-sysfs"]
    assert "0x10de|0x15b3" in line and line.endswith("echo '# pci-sysfs end'")


def test_bus_listing_that_lacks_gpus_the_driver_lists_is_an_error_not_a_missing_gpu():
    incomplete = "\n".join(line for line in own("sysfs-h100-8x-healthy.txt").splitlines()
                           if "/0000:db:00.0/" not in line) + "\n"
    _, findings = run({"pci-sysfs": incomplete, "nvidia-smi-q-x": HEALTHY_XML})
    assert [(f.check, f.status) for f in findings if f.check.startswith("pci.gpu")] == \
        [("pci.gpu.count", Status.ERROR)]
    assert "0000:db:00.0" in findings[0].message and "incomplete" in findings[0].message
