"""Versions probe: driver (module and user space), CUDA, VBIOS, NCCL, OFED, HCA firmware; pins."""

from __future__ import annotations

from dataclasses import replace

from healthcheck.model import CommandResult, Host, Status
from healthcheck.profiles import Expectation, load_profile
from healthcheck.spec import EvalContext
from probes.versions import (
    evaluate_versions,
    parse_nccl_libs,
    parse_nvidia_smi_csv,
    parse_nvidia_smi_q_header,
    parse_ofed_info,
    parse_versions,
    version_facts,
)
from tests.conftest import corpus_text, fixture_text

H100 = load_profile("h100-sxm5-8x")


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


def test_corpus_csv_and_q_header():
    rows = parse_nvidia_smi_csv(corpus_text("nvidia-smi/h100-query-gpu-name-busid-vbios-csv-elided.txt")
                                .split("\n", 1)[1])
    assert [r["vbios_version"] for r in rows.values()] == ["96.00.89.00.01", "96.00.89.00.01"]
    header = parse_nvidia_smi_q_header(corpus_text("nvidia-smi-q/h100-80gb-hbm3-drv590-idle.txt"))
    assert header == {"Driver Version": "590.48.01", "CUDA Version": "13.1"}


def test_ofed_and_nccl_strings():
    assert parse_ofed_info("MLNX_OFED_LINUX-23.10-1.1.9.0:\n") == "MLNX_OFED_LINUX-23.10-1.1.9.0"
    assert parse_ofed_info("OFED-internal-24.07-0.3.5.0.110:\n") == "OFED-internal-24.07-0.3.5.0.110"
    assert parse_ofed_info("bash: ofed_info: command not found\n") is None
    assert parse_nccl_libs(own("system/nccl-libs.txt")) == "2.21.5"


def test_full_node_versions_and_in_node_vbios_mismatch():
    sysfs = own("ib/sysfs-h100-8x-ndr-healthy.txt")
    obs, findings = evaluate({"nvidia-driver-version": "550.90.07\n",
                              "nvidia-smi-versions": own("system/nvidia-smi-query-versions-8x-h100.csv"),
                              "nvidia-smi-cuda": own("system/nvidia-smi-q-d-compute-drv550.txt"),
                              "ofed-info": "MLNX_OFED_LINUX-23.10-1.1.9.0:\n",
                              "nccl-libs": own("system/nccl-libs.txt"),
                              "hca-fw": sysfs})
    assert (obs.driver_module, obs.driver_userspace, obs.cuda, obs.nccl) == ("550.90.07", "550.90.07", "12.4",
                                                                             "2.21.5")
    by = {f.check: f for f in findings}
    assert by["version.driver"].status is Status.PASS and "not pinned" in by["version.driver"].message
    assert by["version.vbios"].status is Status.WARN and by["version.vbios"].value == "96.00.74.00.0D/96.00.89.00.01"
    assert by["version.hca_fw"].component == "MT4129" and by["version.hca_fw"].status is Status.PASS
    facts = version_facts({"driver_module": "550.90.07", "vbios": obs.vbios, "hca_fw": obs.hca_fw})
    assert facts == {"driver": "550.90.07", "vbios": "96.00.74.00.0D/96.00.89.00.01",
                     "hca_fw MT4129": "28.39.1002"}


def test_driver_library_mismatch_and_module_skew():
    _, findings = evaluate({"nvidia-smi-versions": (own("system/nvidia-smi-driver-library-mismatch.txt"), 18)})
    smi = [f for f in findings if f.check == "version.nvidia_smi"]
    assert smi[0].status is Status.FAIL and "Driver/library version mismatch" in smi[0].message
    _, findings = evaluate({"nvidia-driver-version": "550.54.15\n",
                            "nvidia-smi-versions": own("system/nvidia-smi-query-versions-8x-h100.csv")})
    skew = [f for f in findings if f.check == "version.driver_mismatch"]
    assert (skew[0].status, skew[0].value, skew[0].expected) == (Status.FAIL, "550.90.07", "550.54.15")


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
    _, findings = evaluate({"nvidia-smi-versions": own("system/nvidia-smi-query-versions-8x-h100.csv")},
                           pin(H100, "version.vbios", "eq", "96.00.89.00.01"))
    vbios = [(f.component, f.status) for f in findings if f.check == "version.vbios" and f.status is not Status.PASS]
    assert vbios == [("gpu6", Status.FAIL)]
