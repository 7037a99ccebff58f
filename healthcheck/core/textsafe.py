"""Node output made harmless for a terminal or a page: control characters and bidi overrides shown.

    printable("gpu\x1b]0;PWNED\x07 ok")     # 'gpu\\x1b]0;PWNED\\x07 ok'
    printable("evil\u202egnp.exe")          # 'evil\\u202egnp.exe'
    csv_cell("=HYPERLINK(\"http://x\")")     # '\'=HYPERLINK("http://x")': a spreadsheet shows it, never runs it

Terminal escape sequences (CSI, OSC: they retitle windows, move the cursor, rewrite earlier lines) and
bidirectional overrides (U+202A-U+202E, U+2066-U+2069: they display a name as another name) are
replaced by their visible escapes, so what the operator reads is what the node sent. Tab and
newline are kept; everything else below U+0020, DEL, the C1 range U+0080-U+009F and the bidi and
zero-width format characters are escaped.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with terminal control and bidi/format characters replaced by visible escapes."""
    return _UNSAFE.sub(_escape, text) if _UNSAFE.search(text) else text


def has_unsafe(text: str) -> bool:
    return _UNSAFE.search(text) is not None


# OWASP "CSV Injection": a cell starting with one of these is a formula to a spreadsheet (a leading TAB or
# CR is stripped on import, and what follows it is read as a formula)
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(text: str) -> str:
    """A node string made safe as a CSV cell: a leading formula character is neutralised by a ``'``
    prefix (the OWASP rule), and control and bidi characters are made visible (``printable``)."""
    return printable("'" + text if text.startswith(FORMULA_START) else text)
