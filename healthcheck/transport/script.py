"""The one remote script per host, and the reader of the framed stream it prints.

    script = build_script([Command("uname-r", "uname -r", 10.0)], marker="HC-3f9a", cap=4 << 20)
    # ssh node 'sh -c <script>' prints, per command, a header line, exactly the announced
    # number of stdout then stderr bytes, and an END line:
    #   \n@@HC-3f9a BEGIN uname-r rc=0 out=18 err=0 outsize=18 errsize=0\n<18 bytes>\n@@HC-3f9a END uname-r\n

Each command runs under ``timeout -k`` (when the node has it), with stdin from /dev/null, its
stdout and stderr captured separately and capped on the node with ``head -c`` (so a runaway
command cannot flood the orchestrator), and its exit code kept. Sections are printed as each
command finishes, so a host that hangs later still yields the commands that completed.
Lengths, not delimiters, frame the payload: node output cannot forge a section.
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from healthcheck.model import CommandResult

TIMEOUT_RCS = (124, 137)  # GNU timeout: 124 after SIGTERM, 137 (128+9) after the -k SIGKILL

_PRELUDE = r"""d=$(mktemp -d 2>/dev/null) || d=/tmp/healthcheck.$$
mkdir -p "$d" && trap 'rm -rf "$d"' EXIT HUP INT TERM
if command -v timeout >/dev/null 2>&1; then hc_to=1; else hc_to=; fi
hc_run() {
  if [ -n "$hc_to" ]; then set -- "$1" timeout -k "$KILL" "$2" sh -c "$3"; else set -- "$1" sh -c "$3"; fi
  hc_id=$1; shift; echo 255 >"$d/rc"
  { { "$@" </dev/null; echo $? >"$d/rc"; } 2>&1 >&3 3>&- | head -c "$CAP1" >"$d/e"; } 3>&1 | head -c "$CAP1" >"$d/o"
  os=$(wc -c <"$d/o" | tr -d ' '); es=$(wc -c <"$d/e" | tr -d ' ')
  on=$os; [ "$on" -gt "$CAP" ] && on=$CAP; en=$es; [ "$en" -gt "$CAP" ] && en=$CAP
  read -r hc_rc <"$d/rc" || hc_rc=255
  printf '\n%s BEGIN %s rc=%s out=%s err=%s outsize=%s errsize=%s\n' "$M" "$hc_id" "$hc_rc" "$on" "$en" "$os" "$es"
  head -c "$CAP" "$d/o"; head -c "$CAP" "$d/e"
  printf '\n%s END %s\n' "$M" "$hc_id"
}
"""


@dataclass(frozen=True)
class Command:
    """One command to run on a node: stable id, shell line, timeout."""

    id: str
    line: str
    timeout_s: float


def new_marker() -> str:
    return "@@HC-" + secrets.token_hex(8)


_ID_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def build_script(commands: Sequence[Command], marker: str, cap: int, kill_after_s: float = 5.0) -> str:
    """The POSIX sh script that runs ``commands`` in order and frames their outputs."""
    lines = [f"M={shlex.quote(marker)}; CAP={int(cap)}; CAP1={int(cap) + 1}; KILL={kill_after_s:g}",
             _PRELUDE]
    for cmd in commands:
        if not _ID_OK.match(cmd.id):
            raise ValueError(f"command id {cmd.id!r} is not a stable kebab-case id")
        lines.append(f"hc_run {shlex.quote(cmd.id)} {cmd.timeout_s:g} {shlex.quote(cmd.line)}")
    return "\n".join(lines) + "\n"


_HEADER = re.compile(
    rb"BEGIN (?P<id>\S+) rc=(?P<rc>-?\d+) out=(?P<out>\d+) err=(?P<err>\d+)"
    rb" outsize=(?P<outsize>\d+) errsize=(?P<errsize>\d+)\n")


@dataclass
class FrameReader:
    """Incremental reader of the framed stream: ``feed`` bytes, get finished sections back."""

    host: str
    marker: str
    buffer: bytearray = field(default_factory=bytearray)
    last_event_s: float = 0.0

    def feed(self, data: bytes, now_s: float) -> Iterator[CommandResult]:
        self.buffer += data
        while True:
            result = self._next_section(now_s)
            if result is None:
                return
            yield result

    def _next_section(self, now_s: float) -> CommandResult | None:
        start_tag = b"\n" + self.marker.encode() + b" "
        pos = self.buffer.find(start_tag)
        if pos < 0:
            return None
        header = _HEADER.match(self.buffer, pos + len(start_tag))
        if header is None:
            return None  # header not complete yet (or garbage: the caller times out)
        out_n, err_n = int(header["out"]), int(header["err"])
        body = header.end()
        end_tag = f"\n{self.marker} END ".encode() + header["id"] + b"\n"
        total = body + out_n + err_n + len(end_tag)
        if len(self.buffer) < total:
            return None
        if bytes(self.buffer[body + out_n + err_n:total]) != end_tag:
            raise FrameError(f"{self.host}: section {header['id'].decode()} is malformed")
        rc = int(header["rc"])
        result = CommandResult(
            host=self.host, command_id=header["id"].decode(),
            stdout=bytes(self.buffer[body:body + out_n]),
            stderr=bytes(self.buffer[body + out_n:body + out_n + err_n]),
            rc=rc, duration_s=round(max(0.0, now_s - self.last_event_s), 3),
            timed_out=rc in TIMEOUT_RCS,
            stdout_truncated=int(header["outsize"]) > out_n,
            stderr_truncated=int(header["errsize"]) > err_n)
        del self.buffer[:total]
        self.last_event_s = now_s
        return result


class FrameError(ValueError):
    """The framed stream from a host is corrupt."""
