"""summary.md: short, grouped, and inert when node text contains markup."""

from __future__ import annotations

import re
from pathlib import Path

from healthcheck.reports.digest import load_digest
from healthcheck.reports.markdown import md_code, md_text, render_markdown
from tests.unit.test_report_digest import make_run


def test_summary_lists_counts_and_folded_groups(tmp_path: Path) -> None:
    text = render_markdown(load_digest(make_run(tmp_path))).decode()
    lines = text.splitlines()
    assert lines[0] == "## healthcheck FAIL: 6 of 7 hosts failing or in error"
    assert "| FAIL | 5 | `gpu[001-002,004-005,017]` |" in lines
    assert "| ERROR | 1 | `node-a` |" in lines
    remap = next(line for line in lines if "gpu.row_remap.pending" in line)
    assert remap.startswith("- **FAIL** `gpu.row_remap.pending` gpu3 on `gpu[001-002,017]` (3):")
    assert "→ Reset the GPU (nvidia-smi -r)" in remap


def test_node_text_cannot_inject_markup(tmp_path: Path) -> None:
    text = render_markdown(load_digest(make_run(tmp_path))).decode()
    assert not re.search(r"(?<!\\)[<>]", text)  # every < and > from a node is backslash-escaped
    assert "\\<script\\>" in text and "\\<img src=x" in text
    assert md_text("a|b`c`\n# h") == "a\\|b\\`c\\` \\# h"
    assert md_code("x`y|z") == "`x'y\\|z`"
