"""End to end without SSH: ``healthcheck run --replay`` of a simulated GB200 NVL72 rack (18 trays, 5 of them
with degraded NVLink bandwidth, IMEX connected) writes the per-domain table into results.json and
summary.md and a rack map into report.html.

Each tray's ``nvidia-smi -q -x`` is our GB200 tray fixture (layout of a real capture) with its slot and
faults edited; the IMEX outputs are our fixtures in the layout of real ``nvidia-imex-ctl -N`` outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from healthcheck.cli.main import main
from tests.conftest import fixture_text

TRAY = fixture_text("nvidia-smi-xml/gb200-tray-4x-healthy.xml")
BAD = (2, 3, 8, 13, 17)
HOSTS = [f"r1t{s:02d}" for s in range(1, 19)]


def tray_xml(slot: int) -> str:
    xml = TRAY.replace("<slot_number>7</slot_number>", f"<slot_number>{slot}</slot_number>")
    if slot in BAD:
        head, *gpus = xml.split("<gpu id=")
        gpus[1] = gpus[1].replace("<bandwidth>Full</bandwidth>", "<bandwidth>Degraded</bandwidth>")
        xml = "<gpu id=".join([head, *gpus])
    return xml


def write(folder: Path, cid: str, text: str, rc: int = 0) -> None:
    (folder / f"{cid}.out").write_text(text)
    (folder / f"{cid}.rc").write_text(f"{rc}\n")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rack")
    for slot, host in enumerate(HOSTS, start=1):
        folder = root / "bundle" / "raw" / host
        folder.mkdir(parents=True)
        write(folder, "nvidia-smi-q-x", tray_xml(slot))
        write(folder, "imex-service", "active\n")
        write(folder, "imex-nodes-config", fixture_text("imex/nodes_config-18.cfg"))
        write(folder, "imex-ctl-nodes", fixture_text("imex/ctl-N-18-nodes-up.txt"))
    out = root / "run"
    result = CliRunner().invoke(main, ["run", "--replay", str(root / "bundle"), "--run-dir", str(out),
                                       "--probes", "fabric,imex", "--profile", "gb200-nvl72-tray"])
    assert result.exit_code == 1, result.output
    return out


def test_results_json_has_the_domain_table(run_dir: Path) -> None:
    doc = json.loads((run_dir / "results.json").read_text())
    (row,) = doc["domains"]
    names = [f"r1t{s:02d}" for s in BAD]
    assert (row["trays"], row["gpus"], row["verdict"], row["bad_trays"], row["bad_share"]) == (
        18, 72, "FAIL", names, 0.278)
    assert [m["slot"] for m in row["members"]] == [str(s) for s in range(1, 19)]
    service = [f for f in doc["hosts"]["r1t02"]["findings"] if f["check"] == "nvl.domain.service"]
    assert service and service[0]["status"] == "FAIL" and service[0]["message"].startswith("rack needs service")
    healthy = [f for f in doc["hosts"]["r1t01"]["findings"] if f["check"] == "nvl.domain.service"]
    assert healthy and healthy[0]["status"] == "WARN"
    imex = [f for f in doc["hosts"]["r1t01"]["findings"] if f["check"].startswith("imex")]
    assert imex == []   # all PASS: not listed among the host's non-PASS findings


def test_summary_md_lists_the_domain(run_dir: Path) -> None:
    text = (run_dir / "summary.md").read_text()
    assert "### NVLink domains" in text
    row = next(line for line in text.splitlines() if "6f1d2c9e-41b7-4e0a-9c35-8b2a7d5e0c14" in line)
    assert row.startswith("| FAIL |") and "18 of 18" in row and "72 of 72" in row
    assert "r1t02, r1t03, r1t08, r1t13, r1t17" in row


def test_report_has_a_rack_map(run_dir: Path) -> None:
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    assert page.count('class="grid rackmap"') == 1
    assert "NVLink domain <code>6f1d2c9e</code>" in page
    rack = page[page.index('class="grid rackmap"'):]
    rack = rack[:rack.index("</table>")]
    assert rack.count("<tr class=") == 18
    assert rack.count('st-FAIL" title="bandwidth Degraded">gpu1') == 5


def test_merge_of_node_bundles_grades_the_domain(tmp_path: Path) -> None:
    """``healthcheck merge`` of 18 node-local bundles (one per tray): the domain is graded on the merged fleet."""
    from healthcheck.ops.merge import merge_bundles

    spool = tmp_path / "spool"
    for slot, host in enumerate(HOSTS, start=1):
        folder = spool / host / "raw" / host
        folder.mkdir(parents=True)
        write(folder, "nvidia-smi-q-x", tray_xml(slot))
        (folder / "_host.json").write_text(json.dumps({"transport_error": None, "duration_s": 2.0,
                                                       "collected_at": "2026-11-24T04:00:00+00:00", "commands": {}}))
        (spool / host / "manifest.json").write_text(json.dumps({"hosts": [{"name": host,
                                                                           "profile": "gb200-nvl72-tray"}]}))
    merge_bundles(sorted(spool.iterdir()), tmp_path / "run")
    doc = json.loads((tmp_path / "run" / "results.json").read_text())
    (row,) = doc["domains"]
    assert (row["trays"], row["verdict"], row["bad_trays"]) == (18, "FAIL", [f"r1t{s:02d}" for s in BAD])
