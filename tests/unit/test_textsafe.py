"""Terminal escapes and bidi overrides from node output are neutralised (issue 13.10): the console
prints visible escapes, the report shows them visibly, nothing reaches the terminal or the page raw."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from healthcheck.cli.main import main
from healthcheck.core.model import Finding, Status
from healthcheck.core.textsafe import printable
from healthcheck.run.outputs import render_reports
from healthcheck.store.results import HostResult, RunResults, write_results

OSC = "\x1b]0;PWNED-TITLE\x07"
RLO = "\u202e"


def test_printable_escapes_controls_and_bidi_keeps_text():
    assert printable(f"remote script ended: {OSC}done") == "remote script ended: \\x1b]0;PWNED-TITLE\\x07done"
    assert printable(f"proc {RLO}gnp.exe\u2066x\u2069") == "proc \\u202egnp.exe\\u2066x\\u2069"
    assert printable("gpu3: 91 C\tok\nnext – café") == "gpu3: 91 C\tok\nnext – café"
    assert printable("\x9b31m\x00") == "\\x9b31m\\x00"


def _run(tmp_path: Path) -> Path:
    finding = Finding(host="gpu001", check="host.reachable", status=Status.ERROR, value=f"{RLO}x",
                      message=f"gpu001: remote script ended before all commands reported: {OSC} evil{RLO}fdp.exe")
    write_results(tmp_path, RunResults(run={"id": "esc"}, hosts={"gpu001": HostResult(name="gpu001",
                                                                                      findings=[finding])}))
    return tmp_path


def test_console_summary_prints_visible_escapes(tmp_path):
    out = CliRunner().invoke(main, ["results", str(_run(tmp_path))])
    assert out.exit_code == 1
    assert "\x1b" not in out.output and "\x07" not in out.output and RLO not in out.output
    assert "ended before all commands reported: \\x1b]0;PWNED-TITLE\\x07 evil\\u202efdp.exe" in out.output


def test_report_shows_escapes_visibly(tmp_path):
    run = _run(tmp_path)
    render_reports(run)
    page = (run / "report.html").read_text()
    assert RLO not in page and "\x1b" not in page and "\x07" not in page
    assert "evil\\u202efdp.exe" in page  # in the page's text and in its embedded JSON (as \\u202e)


def test_csv_cells_that_a_spreadsheet_would_run_are_neutralised():
    from healthcheck.core.textsafe import csv_cell

    for text in ("=1+1", "+cmd|' /C calc'!A0", "-2+3", "@SUM(1+1)", "\t=1+1", "\r=1+1"):
        assert csv_cell(text).startswith("'"), text
    assert csv_cell("\t=1+1") == "'\t=1+1" and csv_cell("\r=1") == "'\\x0d=1"
    assert csv_cell("1652323004110") == "1652323004110" and csv_cell("") == ""
    assert csv_cell("a\x1b]0;x\x07") == "a\\x1b]0;x\\x07"
