"""nvidia-smi's own failures, the -L list and the default table: every nvidia-smi corpus file."""

from __future__ import annotations

import pytest

from healthcheck.core.spec import ParseError
from healthcheck.probes.gpu import parse_nvidia_smi_output
from healthcheck.probes.nvidia_smi_list import parse_nvidia_smi_l, parse_nvidia_smi_table
from healthcheck.probes.nvidia_smi_log import exit_code_error, find_nvidia_smi_errors, normalize_bus_id
from tests.conftest import corpus_files, corpus_text, fixture_text

# Corpus files in nvidia-smi/ that are other nvidia-smi commands (CSV queries, a reset attempt), not the
# default table: given to the table parser they must raise ParseError (the runner reports ERROR).
NOT_A_TABLE = {"gpu-reset-r-in-use-by-another-client-after-pm0-fuser-persistenced.txt",
               "h100-mig-query-gpu-allfields-csv-load.txt", "h100-query-gpu-allfields-csv-load.txt",
               "h100-query-gpu-name-busid-vbios-csv-elided.txt", "h100-query-retired-pages-csv-empty.txt",
               "h200-query-gpu-allfields-csv-idle.txt", "query-gpu-recovery-action-csv-noheader-gpu1-reset.txt",
               "query-remapped-rows-csv-4gpu-after-reset-uncorr1-pending-no-uuid-shortened.txt"}


@pytest.mark.parametrize("path", corpus_files("nvidia-smi"), ids=lambda p: p.name)
def test_conformance_every_nvidia_smi_corpus_file(path):
    text = path.read_text(errors="replace").split("\n", 1)[1]
    if path.name in NOT_A_TABLE:
        with pytest.raises(ParseError):
            parse_nvidia_smi_table(text)
        return
    log = parse_nvidia_smi_table(text)
    assert log.gpus or log.errors


@pytest.mark.parametrize("name, rc, kind, bus", [
    ("driver-not-loaded.txt", 9, "driver_not_loaded", None),
    ("driver-library-mismatch.txt", 18, "driver_mismatch", None),
    ("gpu-lost.txt", 15, "gpu_lost", "00000000:02:00.0"),
    ("no-devices.txt", 6, "no_devices", None),
])
def test_error_outputs_become_errors_not_parse_failures(name, rc, kind, bus):
    for command_id in ("nvidia-smi-q-x", "nvidia-smi-q", "nvidia-smi", "nvidia-smi-l"):
        obs = parse_nvidia_smi_output(command_id, fixture_text(f"nvidia-smi-errors/{name}"), rc)
        assert [(e.kind, e.bus_id) for e in obs.errors] == [(kind, bus)], command_id
        assert (obs.count, obs.gpus) == (0, ())


def test_corpus_unable_to_determine_device_handle_after_xid79():
    text = corpus_text("nvidia-smi/unable-to-determine-device-handle-unknown-error-after-xid79.txt")
    errors = find_nvidia_smi_errors(text)
    assert [(e.kind, e.bus_id) for e in errors] == [("gpu_lost", "00000000:A1:00.0")]
    assert errors[0].message == "Unable to determine the device handle for GPU0000:A1:00.0: Unknown Error"


def test_unknown_nonzero_exit_code_is_an_error_and_zero_with_garbage_raises():
    obs = parse_nvidia_smi_output("nvidia-smi-q-x", "Segmentation fault (core dumped)\n", 139)
    assert obs.errors[0].kind == "exit_code" and "exit code 139" in obs.errors[0].message
    assert exit_code_error(15, "").message == ("nvidia-smi exit code 15 (GPU has fallen off the bus or is "
                                               "otherwise inaccessible)")
    with pytest.raises(ParseError):
        parse_nvidia_smi_output("nvidia-smi-q-x", "Segmentation fault (core dumped)\n", 0)


def test_bus_id_normalization():
    assert normalize_bus_id("0000:a1:00.0") == "00000000:A1:00.0"
    assert normalize_bus_id("GPU0000:A1:00.0") == "00000000:A1:00.0"
    assert normalize_bus_id("00000001:00:00.0") == "00000001:00:00.0"


def test_nvidia_smi_l_fixture():
    log = parse_nvidia_smi_l(fixture_text("nvidia-smi-l/h100-8x-faulty.txt"))
    assert log.attached_gpus == 8 and log.gpus[7]["uuid"] == "GPU-8d3f2a71-5c4e-4b9a-9e21-0a7c61b4f007"
    obs = parse_nvidia_smi_output("nvidia-smi-l", fixture_text("nvidia-smi-l/h100-8x-healthy.txt"), 0)
    assert (obs.count, obs.partial, obs.gpus[0].name) == (8, True, "NVIDIA H100 80GB HBM3")
    with pytest.raises(ParseError):
        parse_nvidia_smi_l("some other text\n")


def test_table_h100_fabricmanager_down_persistence_off():
    log = parse_nvidia_smi_table(corpus_text("nvidia-smi/h100-8gpu-drv560-persistence-off-fabricmanager-down.txt"))
    assert (log.driver_version, log.cuda_version, len(log.gpus)) == ("560.35.03", "12.6", 8)
    g = log.gpus[4]
    assert (g["@id"], g["persistence_mode"], g["temperature"]["gpu_temp"]) == ("00000000:9B:00.0", "Disabled",
                                                                              "38 C")
    assert g["gpu_power_readings"] == {"power_draw": "73 W", "current_power_limit": "700 W"}
    assert (g["fb_memory_usage"]["total"], g["mig_mode"]["current_mig"]) == ("81559 MiB", "Disabled")


def test_table_fan_err_and_old_k80_layout():
    fan = parse_nvidia_smi_table(corpus_text("nvidia-smi/rtx-geforce-drv525-fan-ERR.txt")).gpus[0]
    assert (fan["fan_speed"], fan["product_name"], fan["performance_state"]) == ("ERR!", "NVIDIA GeForce ...", "P5")
    k80 = parse_nvidia_smi_table(corpus_text("nvidia-smi/k80-4gpu-drv375-2017-old-layout.txt"))
    assert (k80.driver_version, k80.cuda_version, len(k80.gpus)) == ("375.66", None, 4)
    assert k80.gpus[1]["@id"] == "00000000:00:05.0" and "mig_mode" not in k80.gpus[1]


def test_table_mig_devices_table_is_not_read_as_gpus():
    log = parse_nvidia_smi_table(corpus_text("nvidia-smi/h100-mig-4instances-drv590-load.txt"))
    assert len(log.gpus) == 1 and log.gpus[0]["mig_mode"]["current_mig"] == "Enabled"
    assert log.gpus[0]["utilization"]["gpu_util"] == "N/A"
