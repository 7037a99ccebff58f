"""``healthcheck sweep`` end to end: replayed nightly bundles through the real pipeline into a history.

Each night is a capture bundle of four hosts whose ``nvidia-smi-q-x`` output is the real A10G
corpus file (nvidia-smi-xml/a10g-drv515-aws.txt), with values changed per night in the test:
the GPU temperature, the aggregate DRAM correctable ECC count and the PCIe link width (x8 of x16
FAILs ``gpu.pcie.width``). node01 degrades over three nights; node03 fails, then recovers.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from healthcheck.cli.main import main
from healthcheck.ops.history import sweep_lock
from healthcheck.store.findings_table import read_table
from tests.conftest import corpus_text

HOSTS = ("node01", "node02", "node03", "node04")


def smi_xml(temp_c: int, dram_ce: int, width: str) -> str:
    text = corpus_text("nvidia-smi-xml/a10g-drv515-aws.txt")
    text = re.sub(r"<gpu_temp>\d+ C</gpu_temp>", f"<gpu_temp>{temp_c} C</gpu_temp>", text)
    text = re.sub(r"<current_link_width>\w+</current_link_width>",
                  f"<current_link_width>{width}</current_link_width>", text)
    aggregate = re.compile(r"(<aggregate>.*?<dram_correctable>)\d+(</dram_correctable>)", re.S)
    text, n = aggregate.subn(rf"\g<1>{dram_ce}\g<2>", text)
    assert n == 1
    return text


def bundle(base: Path, night: dict[str, tuple[int, int, str]]) -> Path:
    for host in HOSTS:
        temp, ce, width = night.get(host, (40, 0, "16x"))
        raw = base / "raw" / host
        raw.mkdir(parents=True)
        (raw / "nvidia-smi-q-x.out").write_text(smi_xml(temp, ce, width))
        (raw / "nvidia-smi-q-x.rc").write_text("0\n")
    return base


NIGHTS = [
    {"node01": (40, 0, "16x"), "node03": (40, 0, "8x")},
    {"node01": (44, 3, "16x")},
    {"node01": (52, 10, "16x"), "node04": (40, 0, "8x")},
]


def sweep(history: Path, bundle_dir: Path, *extra: str):
    return CliRunner().invoke(main, ["sweep", "--replay", str(bundle_dir), "--history", str(history), *extra],
                              catch_exceptions=False)


def latest_results(history: Path) -> dict:
    runs = sorted((p for p in (history / "runs").iterdir() if not p.is_symlink()), key=lambda p: p.stat().st_mtime)
    return json.loads((runs[-1] / "results.json").read_text())


@pytest.mark.corpus
def test_three_replayed_nights(tmp_path):
    history = tmp_path / "history"
    out1 = sweep(history, bundle(tmp_path / "n1", NIGHTS[0]))
    assert out1.exit_code == 1, out1.output                  # node03 FAILs gpu.pcie.width
    doc1 = latest_results(history)
    assert doc1["changes"]["previous_run"] is None
    assert [c["host"] for c in doc1["changes"]["new_failures"]] == ["node03"]
    assert "gpu.pcie.width" in doc1["changes"]["new_failures"][0]["checks"]

    out2 = sweep(history, bundle(tmp_path / "n2", NIGHTS[1]))
    assert out2.exit_code == 0, out2.output                  # WARN (ECC growth) is allowed
    doc2 = latest_results(history)
    assert doc2["changes"]["previous_run"] == doc1["run"]["id"]
    assert [c["host"] for c in doc2["changes"]["recovered"]] == ["node03"]
    growth = [f for f in doc2["hosts"]["node01"]["findings"] if f["check"] == "history.counter.growth"]
    assert [(f["component"], f["value"]) for f in growth] == [("gpu0", 3.0)]
    assert "RECOVERED node03" in out2.output

    out3 = sweep(history, bundle(tmp_path / "n3", NIGHTS[2]), "--fail-on", "new")
    assert out3.exit_code == 1, out3.output                  # node04 newly fails
    doc3 = latest_results(history)
    assert [c["host"] for c in doc3["changes"]["new_failures"]] == ["node04"]
    history_findings = {(f["check"], f["component"], f["value"]): f["message"]
                        for f in doc3["hosts"]["node01"]["findings"] if f["check"].startswith("history.")}
    assert history_findings == {
        ("history.counter.growth", "gpu0", 7.0):
            f"gpu.ecc.aggregate.dram_correctable gpu0 grew by 7 since run {doc2['run']['id']} (was 3, now 10)",
        ("history.regression.baseline", "gpu0", 52.0):
            "gpu.temp_c gpu0: 52 C is 24% worse than this node's baseline 42 C (median of its last 2 passing runs)",
    }
    temps = doc3["trends"]["node01"]["gpu.temp_c"]["values"]
    assert [v for _, v in temps] == [40.0, 44.0, 52.0]
    assert [t for t, _ in temps] == [doc1["run"]["started"], doc2["run"]["started"], doc3["run"]["started"]]
    assert [v for _, v in doc3["trends"]["node03"]["gpu.temp_c"]["values"]] == [40.0, 40.0, 40.0]
    html = (history / "runs" / doc3["run"]["id"] / "report.html").read_text()
    assert "What changed since the last run" in html
    assert '<span class="trend" title="gpu.temp_c">' in html           # the sparkline per node
    assert (history / "history.sqlite").is_file()
    run3 = history / "runs" / doc3["run"]["id"]
    assert (run3 / "report.html").is_file()
    assert sum(f.check.startswith("history.") for host in read_table(run3).values() for f in host) == 2

    # Retention: a fourth sweep keeping 0 days forgets (and deletes) the three earlier runs.
    out4 = sweep(history, bundle(tmp_path / "n4", {}), "--keep-days", "0")
    assert out4.exit_code == 0, out4.output
    assert sorted(p.name for p in (history / "runs").iterdir()) == [latest_results(history)["run"]["id"], "latest"]
    assert (history / "runs" / "latest").resolve().name == latest_results(history)["run"]["id"]
    assert "retention: forgot 3 run(s)" in out4.output


def test_second_sweep_exits_3_while_one_holds_the_lock(tmp_path):
    history = tmp_path / "history"
    bundle_dir = tmp_path / "bundle" / "raw" / "node01"
    bundle_dir.mkdir(parents=True)
    (bundle_dir / "nvidia-smi-q-x.out").write_text("")
    with sweep_lock(history):
        out = sweep(history, tmp_path / "bundle")
    assert out.exit_code == 3
    assert "another sweep holds" in out.output and "not starting" in out.output
    assert not (history / "runs").exists()


def test_sweep_needs_an_inventory_or_a_replay(tmp_path):
    out = CliRunner().invoke(main, ["sweep", "--history", str(tmp_path)])
    assert out.exit_code == 2


def test_sweep_renders_the_reports_once_with_the_changes_in(tmp_path, monkeypatch):
    from healthcheck import reports

    rendered: list[bool] = []
    real = reports.write_all

    def counting(run_dir: Path):
        rendered.append("changes" in json.loads((Path(run_dir) / "results.json").read_text()))
        return real(run_dir)

    monkeypatch.setattr(reports, "write_all", counting)
    bundle_dir = tmp_path / "bundle" / "raw" / "node01"
    bundle_dir.mkdir(parents=True)
    (bundle_dir / "nvidia-smi-q-x.out").write_text("")
    (bundle_dir / "nvidia-smi-q-x.rc").write_text("0\n")
    out = sweep(tmp_path / "history", tmp_path / "bundle")
    assert out.exit_code == 1, out.output  # empty nvidia-smi output: an ERROR
    assert rendered == [True]  # once, after the history annotation
