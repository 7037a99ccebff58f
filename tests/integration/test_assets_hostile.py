"""``healthcheck assets`` and ``diff`` on node strings built to attack a spreadsheet or a terminal (issue 29.12).

Bundle B is the sample bundle with node01's part strings replaced the way a hostile or broken node could
print them, each edit on the real text (nvidia-smi XML, our own sysfs fixtures for HCA and DMI ids):
formulas (``=HYPERLINK``, ``+cmd|``, ``@SUM``, ``-2+3``, a leading TAB before ``=``) in the serial,
VBIOS, board name, HCA firmware and BIOS version; an OSC title sequence, a CSI clear-screen and a bidi
override in the product name, product version and HCA PSID. The CSV never starts a cell with a formula
character (the OWASP rule: a leading ``'``), and nothing printed holds a raw escape or bidi character.
"""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

from click.testing import CliRunner

from healthcheck.cli.main import main
from healthcheck.run.execute import execute_run
from healthcheck.run.options import OutputOptions, RunOptions, SelectionOptions, TargetOptions
from tests.conftest import fixture_text

SAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "samples" / "h100-4node"
RAW_BAD = ("\x1b", "\x07", "\u202e")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")   # OWASP, CSV Injection


def bundle(base: Path, hostile: bool) -> Path:
    shutil.copytree(SAMPLE, base)
    node = base / "raw" / "h100-node01"
    hca = fixture_text("assets/hca-ids-2x-cx7.txt")
    dmi = fixture_text("assets/dmi-sysfs-unprivileged.txt")
    if hostile:
        smi = node / "nvidia-smi-q-x.out"
        smi.write_text(smi.read_text()
                       .replace("<serial>1652323004110</serial>", "<serial>=HYPERLINK(&quot;http://x&quot;)</serial>")
                       .replace("<vbios_version>96.00.99.00.01", "<vbios_version>+cmd|' /C calc'!A0", 1))
        hca = hca.replace("mlx5_0/fw_ver:28.39.1002", "mlx5_0/fw_ver:-2+3") \
            .replace("mlx5_0/board_id:MT_0000000838", "mlx5_0/board_id:MT_\u202e8380000000")
        dmi = dmi.replace("bios_version:2.1.V1", "bios_version:\t=1+1") \
            .replace("product_name:SYS-821GE-TNHR", "product_name:\x1b]0;PWNED\x07SYS-821GE-TNHR") \
            .replace("product_version:0123456789", "product_version:\x1b[2J0123456789") \
            .replace("board_name:X13DEG-OAD", "board_name:@SUM(1+1)")
    for cid, text in (("hca-ids", hca), ("dmi-sysfs", dmi)):
        (node / f"{cid}.out").write_text(text)
        (node / f"{cid}.rc").write_text("0\n")
    return base


def run(tmp_path: Path, name: str, hostile: bool) -> Path:
    return execute_run(RunOptions(target=TargetOptions(replay=bundle(tmp_path / f"bundle-{name}", hostile)),
                                  outputs=OutputOptions(run_dir=tmp_path / name, render=False),
                                  selection=SelectionOptions(probes=["assets"]))).run_dir


def test_csv_cells_never_start_a_formula_and_nothing_printed_is_raw(tmp_path: Path) -> None:
    clean, hostile = run(tmp_path, "a", False), run(tmp_path, "b", True)
    table = CliRunner().invoke(main, ["assets", str(hostile), "--csv"])
    assert table.exit_code == 0, table.output
    rows = list(csv.DictReader(io.StringIO(table.output)))
    cells = [cell for row in rows for cell in row.values() if cell]
    assert not [c for c in cells if c.startswith(FORMULA_START)]
    node01 = [r for r in rows if r["host"] == "h100-node01"]
    assert "'=HYPERLINK(\"http://x\")" in {r["serial"] for r in node01}
    assert "'+cmd|' /C calc'!A0" in {r["firmware"] for r in node01}
    assert {"'-2+3", "'=1+1"} <= {r["firmware"] for r in node01}   # the parser strips the TAB: still neutral
    assert "'@SUM(1+1)" in {r["part_number"] for r in node01}
    assert "MT_\\u202e8380000000" in {r["part_number"] for r in node01}
    assert "Supermicro \\x1b]0;PWNED\\x07SYS-821GE-TNHR" in {r["model"] for r in node01}
    assert not any(ch in table.output for ch in RAW_BAD)
    shown = CliRunner().invoke(main, ["assets", str(hostile)])
    assert not any(ch in shown.output for ch in RAW_BAD)
    changes = CliRunner().invoke(main, ["diff", str(clean), str(hostile)])
    assert changes.exit_code == 1, changes.output
    assert not any(ch in changes.output for ch in RAW_BAD)
    assert "MT_0000000838 -> MT_\\u202e8380000000" in changes.output
