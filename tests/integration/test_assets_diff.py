"""``healthcheck assets`` and ``healthcheck diff`` end to end: replayed bundles and real sshd hosts.

Bundle B is the sample bundle (``inventories/samples/h100-4node``) with parts changed the way a
repair changes them, each edit on the real XML/sysfs text: node03's GPU at 4C:00.0 gets another
serial (swapped) and 5,000 PCIe replays, node01 a new driver, node02's first GPU a new VBIOS, node04
loses its GPU at DB:00.0, node03's mlx5_1 another node GUID (swapped) with 9,000 symbol errors.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from healthcheck.cli.main import main
from healthcheck.run.execute import execute_run
from healthcheck.run.options import OutputOptions, RunOptions, SelectionOptions, TargetOptions, TransportOptions
from tests.conftest import corpus_text, fixture_text

SAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "samples" / "h100-4node"


def hca_ids(guid0: str) -> str:
    return fixture_text("assets/hca-ids-2x-cx7.txt").replace("b83f:d203:00b6:eb16", guid0)


def bundles(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "bundle-a", tmp_path / "bundle-b"
    shutil.copytree(SAMPLE, a)
    shutil.copytree(SAMPLE, b)
    for bundle, guid in ((a, "b83f:d203:00b6:eb16"), (b, "0c42:a103:00aa:bb01")):
        (bundle / "raw" / "h100-node03" / "hca-ids.out").write_text(hca_ids(guid))
        (bundle / "raw" / "h100-node03" / "hca-ids.rc").write_text("0\n")
    raw = b / "raw"
    smi = raw / "h100-node03" / "nvidia-smi-q-x.out"
    text = smi.read_text()
    block = re.search(r'<gpu id="00000000:4C:00.0">.*?</gpu>', text, re.S)
    swapped = block.group().replace("<serial>1652323004112</serial>", "<serial>1652323009999</serial>") \
        .replace("<replay_counter>0</replay_counter>", "<replay_counter>5000</replay_counter>")
    smi.write_text(text.replace(block.group(), swapped))
    driver = raw / "h100-node01" / "nvidia-smi-q-x.out"
    driver.write_text(driver.read_text().replace("<driver_version>535.183.01", "<driver_version>550.90.07"))
    vbios = raw / "h100-node02" / "nvidia-smi-q-x.out"
    vbios.write_text(vbios.read_text().replace("<vbios_version>96.00.99.00.01", "<vbios_version>96.00.A5.00.01", 1))
    lost = raw / "h100-node04" / "nvidia-smi-q-x.out"
    lost.write_text(re.sub(r'<gpu id="00000000:DB:00.0">.*?</gpu>', "", lost.read_text(), flags=re.S))
    ib = raw / "h100-node03" / "ib-sysfs.out"
    ib.write_text(ib.read_text().replace("/sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error:0",
                                         "/sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error:9000"))
    return a, b


def test_diff_names_swapped_moved_lost_parts_firmware_and_driver(tmp_path):
    a, b = bundles(tmp_path)
    run_a = execute_run(RunOptions(target=TargetOptions(replay=a),
                                   outputs=OutputOptions(run_dir=tmp_path / "a"))).run_dir
    run_b = execute_run(RunOptions(target=TargetOptions(replay=b),
                                   outputs=OutputOptions(run_dir=tmp_path / "b"))).run_dir
    result = CliRunner().invoke(main, ["diff", str(run_a), str(run_b)])
    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == [
        "h100-node01 driver.changed driver: version 535.183.01 -> 550.90.07",
        "h100-node02 gpu.firmware 00000000:19:00.0: vbios 96.00.99.00.01 -> 96.00.A5.00.01",
        "h100-node03 gpu.swapped 00000000:4C:00.0: serial 1652323004112 -> 1652323009999",
        "h100-node03 hca.swapped mlx5_0: node_guid b83f:d203:00b6:eb16 -> 0c42:a103:00aa:bb01",
        "h100-node04 gpu.missing 00000000:DB:00.0: serial 1652323004117 -> -",
        "# 5 change(s) from a to b"]
    same = CliRunner().invoke(main, ["diff", str(run_a), str(run_a)])
    assert same.exit_code == 0 and same.output.strip() == "# 0 change(s) from a to a"

    table = CliRunner().invoke(main, ["assets", str(run_b), "--csv"])
    assert table.exit_code == 0
    rows = [line.split(",") for line in table.output.splitlines()]
    assert rows[0] == ["host", "kind", "slot", "model", "serial", "uuid", "firmware", "part_number", "detail"]
    swapped = next(r for r in rows if r[:3] == ["h100-node03", "gpu", "00000000:4C:00.0"])
    assert swapped[3:5] == ["NVIDIA H100 80GB HBM3", "1652323009999"]
    hca = next(r for r in rows if r[:3] == ["h100-node03", "hca", "mlx5_0"])
    assert hca[4:8] == ["0c42:a103:00aa:bb01", "0c42:a103:00aa:bb01", "28.39.1002", "MT_0000000838"]
    assert sum(r[1] == "gpu" for r in rows) == 31  # 4 nodes x 8 GPUs, one lost


def test_a_swapped_part_starts_a_fresh_counter_baseline(tmp_path):
    a, b = bundles(tmp_path)
    run_a = execute_run(RunOptions(target=TargetOptions(replay=a),
                                   outputs=OutputOptions(run_dir=tmp_path / "a"))).run_dir
    graded = execute_run(RunOptions(target=TargetOptions(replay=b),
                                    outputs=OutputOptions(run_dir=tmp_path / "b"),
                                    selection=SelectionOptions(previous=run_a))).results.hosts["h100-node03"]
    [replays] = [f for f in graded.findings if f.check == "gpu.pcie.replays" and f.component == "gpu2"]
    assert replays.status.value == "SKIP" and "4C:00.0" in replays.message  # new GPU: recorded, not graded
    assert "no previous run" in replays.message
    # the new card's 9000 symbol errors are graded as they stand, never as growth over the old card's count
    assert [(f.check, f.status.value) for f in graded.findings if f.component == "mlx5_0/1"] == [
        ("ib.counter.symbol_error", "FAIL")]  # its state and rate pass: folded with the other ports
    # the same growth on parts that were NOT swapped is graded against the previous run
    (b / "raw" / "h100-node03" / "hca-ids.out").write_text(hca_ids("b83f:d203:00b6:eb16"))
    smi = b / "raw" / "h100-node03" / "nvidia-smi-q-x.out"
    smi.write_text(smi.read_text().replace("<serial>1652323009999</serial>", "<serial>1652323004112</serial>"))
    kept = execute_run(RunOptions(target=TargetOptions(replay=b),
                                  outputs=OutputOptions(run_dir=tmp_path / "c"),
                                  selection=SelectionOptions(previous=run_a))).results.hosts["h100-node03"]
    [kept_replays] = [f for f in kept.findings if f.check == "gpu.pcie.replays" and f.component == "gpu2"]
    assert kept_replays.status.value == "WARN" and kept_replays.value == 5000
    assert [f.status.value for f in kept.findings if f.check == "ib.counter_growth.symbol_error"
            and f.component == "mlx5_0/1"] == ["FAIL"]


@pytest.mark.sshd
def test_assets_recorded_over_sshd_and_a_swapped_gpu_is_found(ssh_cluster_factory, tmp_path):
    cluster = ssh_cluster_factory(2)
    a100 = corpus_text("nvidia-smi-xml/a100-sxm4-80gb-mig-enabled-drv535-v12dtd.txt").split("\n", 1)[1]
    for host in cluster.hosts:
        cluster.add_tool(host.name, "nvidia-smi", {"-q -x": (a100, 0)})
    inv = cluster.write_inventory(tmp_path / "inv.yaml", profile=None)
    first = execute_run(RunOptions(target=TargetOptions(inventory=inv),
                                   transport=TransportOptions(ssh_config=cluster.ssh_config),
                                   selection=SelectionOptions(probes=["assets"]),
                                   outputs=OutputOptions(run_dir=tmp_path / "one")))
    assert {n: h.verdict.value for n, h in first.results.hosts.items()} == {"node01": "PASS", "node02": "PASS"}
    cluster.add_tool("node02", "nvidia-smi", {"-q -x": (a100.replace("1650522003820", "1650522007777"), 0)})
    execute_run(RunOptions(target=TargetOptions(inventory=inv),
                           transport=TransportOptions(ssh_config=cluster.ssh_config),
                           selection=SelectionOptions(probes=["assets"]),
                           outputs=OutputOptions(run_dir=tmp_path / "two")))
    result = CliRunner().invoke(main, ["diff", str(tmp_path / "one"), str(tmp_path / "two")])
    assert result.output.splitlines()[0] == \
        "node02 gpu.swapped 00000000:01:00.0: serial 1650522003820 -> 1650522007777"
    table = CliRunner().invoke(main, ["assets", str(tmp_path / "two")])
    assert [line.split()[:3] for line in table.output.splitlines()[1:3]] == \
           [["node01", "gpu", "00000000:01:00.0"], ["node01", "driver", "nvidia"]]


def test_sweep_history_reports_hardware_changes_since_the_last_night(tmp_path):
    import json

    a, b = bundles(tmp_path)
    history = tmp_path / "history"
    for bundle in (a, b):
        result = CliRunner().invoke(main, ["sweep", "--replay", str(bundle), "--history", str(history)])
        assert result.exit_code == 1, result.output  # node03 fails in the sample
    assert "  HARDWARE  h100-node03      gpu.swapped     00000000:4C:00.0: serial 1652323004112 -> 1652323009999" \
        in result.output.splitlines()
    document = json.loads(((history / "runs" / "latest") / "results.json").read_text())
    kinds = sorted((c["host"], c["kind"]) for c in document["changes"]["assets"])
    assert kinds == [("h100-node01", "driver.changed"), ("h100-node02", "gpu.firmware"),
                     ("h100-node03", "gpu.swapped"), ("h100-node03", "hca.swapped"), ("h100-node04", "gpu.missing")]
