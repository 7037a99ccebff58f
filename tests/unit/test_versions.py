"""Versions probe: driver (module and user space), CUDA, VBIOS, NCCL, OFED, HCA firmware; pins."""

from __future__ import annotations

from dataclasses import replace

from healthcheck.core.model import CommandResult, Host, Status
from healthcheck.core.profiles import Expectation, load_profile
from healthcheck.core.spec import EvalContext
from healthcheck.probes.versions import (
    evaluate_versions,
    hca_firmware,
    parse_nccl_libs,
    parse_ofed_info,
    parse_versions,
    version_facts,
)
from tests.conftest import corpus_text, fixture_text

H100 = load_profile("h100-sxm5-8x")
# our 8x H100 report (driver 535.183.01, CUDA 12.2, VBIOS 96.00.99.00.01) with GPU 6 on another VBIOS
HEALTHY_XML = fixture_text("nvidia-smi-xml/h100-8x-healthy.xml")
SMI = "<gpu id=".join(part.replace("96.00.99.00.01", "96.00.74.00.0D") if n == 7 else part
                      for n, part in enumerate(HEALTHY_XML.split("<gpu id=")))


def own(rel: str) -> str:
    return fixture_text(rel).split("\n", 1)[1]


def evaluate(outputs: dict[str, tuple[str, int] | str], profile=H100):
    results = {}
    for cid, value in outputs.items():
        text, rc = value if isinstance(value, tuple) else (value, 0)
        results[cid] = CommandResult(host="gpu001", command_id=cid, stdout=text.encode(), rc=rc)
    obs = parse_versions(results)
    return obs, evaluate_versions(obs, EvalContext(host=Host(name="gpu001"), profile=profile))


def pin(profile, key, op, value):
    return replace(profile, expectations={**profile.expectations,
                                          key: Expectation(key=key, op=op, value=value, source="test pin")})


def test_corpus_reports_xml_and_text_give_driver_cuda_vbios():
    obs, _ = evaluate({"nvidia-smi-q-x": corpus_text("nvidia-smi-xml/a100-sxm4-80gb-mig-enabled-drv535-v12dtd.txt")})
    assert (obs.driver_userspace, obs.cuda, dict(obs.vbios)) == ("535.54.03", "12.2", {"0": "92.00.36.00.02"})
    obs, findings = evaluate({"nvidia-smi-q": corpus_text("nvidia-smi-q/h100-80gb-hbm3-drv590-idle.txt")})
    assert (obs.driver_userspace, obs.cuda, obs.vbios["0"]) == ("590.48.01", "13.1", "96.00.A5.00.01")
    assert {f.source for f in findings if f.check == "version.cuda"} == {"nvidia-smi-q"}


def test_ofed_and_nccl_strings():
    assert parse_ofed_info("MLNX_OFED_LINUX-23.10-1.1.9.0:\n") == "MLNX_OFED_LINUX-23.10-1.1.9.0"
    assert parse_ofed_info("OFED-internal-24.07-0.3.5.0.110:\n") == "OFED-internal-24.07-0.3.5.0.110"
    assert parse_ofed_info("bash: ofed_info: command not found\n") is None
    assert parse_nccl_libs(own("system/nccl-libs.txt")) == "2.21.5"


def test_full_node_versions_and_in_node_vbios_mismatch():
    obs, findings = evaluate({"nvidia-driver-version": "535.183.01\n", "nvidia-smi-q-x": SMI,
                              "ofed-info": "MLNX_OFED_LINUX-23.10-1.1.9.0:\n",
                              "nccl-libs": own("system/nccl-libs.txt"),
                              "ib-sysfs": own("ib/sysfs-h100-8x-ndr-healthy.txt")})
    assert (obs.driver_module, obs.driver_userspace, obs.cuda, obs.nccl) == ("535.183.01", "535.183.01", "12.2",
                                                                             "2.21.5")
    by = {f.check: f for f in findings}
    assert by["version.driver"].status is Status.PASS and "not pinned" in by["version.driver"].message
    assert by["version.vbios"].status is Status.WARN and by["version.vbios"].value == "96.00.74.00.0D/96.00.99.00.01"
    assert by["version.hca_fw"].component == "MT4129" and by["version.hca_fw"].status is Status.PASS
    assert (by["version.cuda"].source, by["version.vbios"].source, by["version.hca_fw"].source) == \
        ("nvidia-smi-q-x", "nvidia-smi-q-x", "ib-sysfs")
    assert "on 12 devices" in by["version.hca_fw"].message
    facts = version_facts({"driver_module": "535.183.01", "vbios": obs.vbios, "hca_fw": obs.hca_fw})
    assert facts == {"driver": "535.183.01", "vbios": "96.00.74.00.0D/96.00.99.00.01",
                     "hca_fw MT4129": "28.39.1002"}


def test_hca_firmware_reuses_the_ib_sysfs_dump():
    fw = hca_firmware(own("ib/sysfs-h100-link-downed-grew-fw-28.41.txt"))
    assert {d["fw"] for d in fw.values()} == {"28.41.1000"} and fw["mlx5_0"]["type"] == "MT4129"
    assert hca_firmware("# ib-sysfs: no /sys/class/infiniband devices\n") == {}
    assert hca_firmware(fixture_text("ib/sysfs-h100-8x-ndr-healthy.txt").rsplit("# ib-sysfs end", 1)[0]) == {}


def test_driver_library_mismatch_and_module_skew():
    _, findings = evaluate({"nvidia-smi-q-x": (own("system/nvidia-smi-driver-library-mismatch.txt"), 18)})
    smi = [f for f in findings if f.check == "version.nvidia_smi"]
    assert smi[0].status is Status.FAIL and "Driver/library version mismatch" in smi[0].message
    _, findings = evaluate({"nvidia-driver-version": "535.161.08\n", "nvidia-smi-q-x": SMI})
    skew = [f for f in findings if f.check == "version.driver_mismatch"]
    assert (skew[0].status, skew[0].value, skew[0].expected) == (Status.FAIL, "535.183.01", "535.161.08")


def test_unreadable_report_is_error_not_a_missing_version():
    obs, findings = evaluate({"nvidia-smi-q-x": fixture_text("nvidia-smi-xml/bad/unclosed-tag.xml")})
    (smi,) = [f for f in findings if f.check == "version.nvidia_smi"]
    assert smi.status is Status.ERROR and "not well-formed" in smi.message
    assert (obs.driver_userspace, obs.cuda, dict(obs.vbios)) == (None, None, {})


def test_pins_eq_and_ordering():
    _, findings = evaluate({"nvidia-driver-version": "550.90.07\n"}, pin(H100, "version.driver", "eq", "550.127.05"))
    assert [f.status for f in findings if f.check == "version.driver"] == [Status.FAIL]
    _, findings = evaluate({"nvidia-driver-version": "550.127.05\n"}, pin(H100, "version.driver", "ge", "550.90.07"))
    assert [f.status for f in findings if f.check == "version.driver"] == [Status.PASS]
    _, findings = evaluate({"nvidia-driver-version": "550.54.15\n"}, pin(H100, "version.driver", "ge", "550.90.07"))
    driver = next(f for f in findings if f.check == "version.driver")
    assert driver.status is Status.FAIL and ">= 550.90.07" in driver.message
    _, findings = evaluate({"ofed-info": "healthcheck: ofed_info not installed\n"},
                           pin(H100, "version.ofed", "match", "^MLNX_OFED_LINUX-23\\.10"))
    ofed = next(f for f in findings if f.check == "version.ofed")
    assert ofed.status is Status.FAIL and ofed.value == "inbox"
    _, findings = evaluate({"nvidia-smi-q-x": SMI}, pin(H100, "version.vbios", "eq", "96.00.99.00.01"))
    vbios = [(f.component, f.status) for f in findings if f.check == "version.vbios" and f.status is not Status.PASS]
    assert vbios == [("gpu6", Status.FAIL)]
