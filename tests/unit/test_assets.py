"""Assets probe parsers on real nvidia-smi XML (corpus) and our sysfs/dmidecode fixtures; the fleet table."""

from __future__ import annotations

import pytest

from healthcheck.core.model import CommandResult, Host
from healthcheck.core.profiles import EMPTY_PROFILE
from healthcheck.core.spec import EvalContext, ParseError
from healthcheck.probes.assets import (
    evaluate_assets,
    ib_sysfs_hcas,
    parse_assets,
    parse_dmi_sysfs,
    parse_dmidecode,
    parse_gpu_assets,
    parse_hca_ids,
)
from healthcheck.probes.ib_parse import parse_ib_sysfs
from tests.conftest import corpus_text, fixture_text


def xml(name: str) -> str:
    return corpus_text(f"nvidia-smi-xml/{name}").split("\n", 1)[1]


def gpu_assets(text: str):
    return parse_gpu_assets({"nvidia-smi-q-x": CommandResult("n", "nvidia-smi-q-x", text.encode(), b"", 0, 0.1)})


def test_gpu_assets_from_a100_driver_535_xml():
    driver, [gpu] = gpu_assets(xml("a100-sxm4-80gb-mig-enabled-drv535-v12dtd.txt"))
    assert driver == "535.54.03"
    assert (gpu.bus_id, gpu.serial, gpu.vbios, gpu.board_part_number, gpu.board_id, gpu.module_id) == \
           ("00000000:01:00.0", "1650522003820", "92.00.36.00.02", "692-2G506-0212-002", "0x100", "4")
    assert gpu.inforom == {"img_version": "G506.0212.00.01", "oem_object": "2.0", "ecc_object": "6.16"}  # pwr N/A
    assert gpu.uuid.startswith("GPU-")


def test_gpu_assets_older_and_newer_schemas():
    _, [t4] = gpu_assets(xml("tesla-t4-drv515.txt"))
    assert t4.serial == "0000000000000" and t4.board_part_number == "900-2G183-0000-001"  # gpu_part_number
    _, [ada] = gpu_assets(xml("rtx4000-sff-ada-drv595-v13dtd-tabs.txt"))
    assert ada.board_part_number == "900-5G192-1770-000" and ada.platform == {"module_id": "1"}
    with pytest.raises(ParseError):
        gpu_assets(xml("tesla-t4-drv515.txt")[:2000])


def test_hca_ids_from_sysfs_and_from_the_ib_sysfs_dump():
    [mlx0, mlx1] = parse_hca_ids(fixture_text("assets/hca-ids-2x-cx7.txt"))
    assert (mlx0.name, mlx0.node_guid, mlx0.fw_ver, mlx0.psid, mlx0.hca_type, mlx0.hw_rev) == \
           ("mlx5_0", "b83f:d203:00b6:eb16", "28.39.1002", "MT_0000000838", "MT4129", "0x0")
    assert mlx1.sys_image_guid == "946d:ae03:0093:77da"
    with pytest.raises(ParseError, match="truncated"):
        parse_hca_ids(fixture_text("assets/hca-ids-2x-cx7.txt").replace("# hca-ids end", ""))


def test_hcas_of_an_ib_sysfs_dump_come_from_the_infiniband_parse():
    """Bundles from before hca-ids: firmware, PSID and type from the infiniband probe's (shared) parse of
    ib-sysfs, the HCAs the line scan finds; a dump that parse refuses is still read line by line."""
    text = fixture_text("ib/sysfs-h100-link-downed-grew-fw-28.41.txt")
    hcas = ib_sysfs_hcas(text)
    assert [h.name for h in hcas] == sorted(f"mlx5_{i}" for i in range(12))  # mlx5_0, mlx5_1, mlx5_10, ...
    assert {(h.fw_ver, h.psid, h.hca_type, h.node_guid) for h in hcas} == {("28.41.1000", "MT_0000000838",
                                                                            "MT4129", None)}
    assert hcas == parse_hca_ids(text, end="# ib-sysfs")
    assert parse_assets({"ib-sysfs": result("ib-sysfs", text)}).hcas == hcas
    refused = text.replace("/sys/class/infiniband/mlx5_0/ports/1/rate:", "no sysfs path\n"
                           "/sys/class/infiniband/mlx5_0/ports/1/rate:", 1)
    with pytest.raises(ParseError, match="not '<sysfs path>:<value>'"):
        parse_ib_sysfs(refused)
    assert ib_sysfs_hcas(refused) == hcas
    with pytest.raises(ParseError, match="truncated"):
        ib_sysfs_hcas(text.replace("# ib-sysfs end", ""))


def test_dmi_sysfs_without_root_has_no_serials_and_dmidecode_adds_them():
    system = parse_dmi_sysfs(fixture_text("assets/dmi-sysfs-unprivileged.txt"))
    assert system["bios_version"] == "2.1.V1" and system["product_name"] == "SYS-821GE-TNHR"
    assert "product_serial" not in system
    decoded, why = parse_dmidecode(fixture_text("assets/dmidecode-t0-t1-t2.txt"))
    assert why is None
    assert decoded == {"bios_vendor": "American Megatrends International, LLC.", "bios_version": "2.1.V1",
                       "bios_date": "03/14/2024", "sys_vendor": "Supermicro", "product_name": "SYS-821GE-TNHR",
                       "product_version": "0123456789", "product_serial": "S123456X4A01234",
                       "product_uuid": "3a1f2e00-8c4d-11ee-8000-3cecef123456", "board_vendor": "Supermicro",
                       "board_name": "X13DEG-OAD", "board_serial": "OM23AS012345"}
    assert parse_dmidecode(fixture_text("assets/dmidecode-non-root.txt")) == \
           ({}, "dmidecode needs root (permission denied)")


def result(cid: str, text: str) -> CommandResult:
    return CommandResult("gpu001", cid, text.encode(), b"", 0, 0.1)


def test_parse_and_evaluate_combines_sources_and_never_fails_a_host():
    obs = parse_assets({
        "nvidia-smi-q-x": result("nvidia-smi-q-x", xml("a100-sxm4-80gb-mig-enabled-drv535-v12dtd.txt")),
        "hca-ids": result("hca-ids", fixture_text("assets/hca-ids-2x-cx7.txt")),
        "dmi-sysfs": result("dmi-sysfs", fixture_text("assets/dmi-sysfs-unprivileged.txt")),
        "dmidecode": result("dmidecode", fixture_text("assets/dmidecode-non-root.txt"))})
    assert obs.system_sources["bios_version"] == "dmi-sysfs"
    assert obs.notes == ("dmidecode needs root (permission denied)",
                         "system and board serials are root-only in /sys/class/dmi/id")
    ctx = EvalContext(host=Host("gpu001"), profile=EMPTY_PROFILE)
    [finding] = evaluate_assets(obs, ctx)
    assert finding.status.value == "PASS" and finding.value == 3
    assert finding.message.startswith("recorded 1 GPUs (1 with a serial), 2 HCAs, BIOS 2.1.V1; not read: dmidecode")
    [empty] = evaluate_assets(parse_assets({"dmi-sysfs": result("dmi-sysfs", "# dmi end\n")}), ctx)
    assert empty.status.value == "SKIP"
