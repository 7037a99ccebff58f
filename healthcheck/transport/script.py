"""The one remote script per host, and the reader of the framed stream it prints.

    script = build_script([Command("uname-r", "uname -r", 10.0)], marker="HC-3f9a", cap=4 << 20)
    # ssh node 'sh -c <script>' prints, per command, a header line, exactly the announced
    # number of stdout then stderr bytes, and an END line:
    #   \n@@HC-3f9a BEGIN uname-r rc=0 out=18 err=0 outsize=18 errsize=0\n<18 bytes>\n@@HC-3f9a END uname-r\n
    # or, for a command not started because a tool it depends on hung earlier on this node:
    #   \n@@HC-3f9a NOTRUN nvidia-smi-topo tool=nvidia-smi hung_s=20 in=nvidia-smi-q-x\n

Each command runs under one ``timeout -k`` (when the node has it) with stdin from /dev/null and
its stdout and stderr written to two files on the node, never to the session's pipe: a descendant
that outlives the command (``setsid sleep 200 &``, a process stuck in D state after SIGKILL)
cannot hold the section open. The files are capped by ``ulimit -f`` in the command's own
subshell (output past the cap is refused by the kernel; SIGXFSZ is ignored, so the tool sees a
write error as on a full disk and nothing dumps core), their sizes are counted once, and the
section is printed from them with ``head -c`` of exactly the announced length (a writer that is
still appending cannot break the frame). Sections are printed as each command finishes, so a
host that hangs later still yields what finished. Lengths, not delimiters, frame the payload:
node output cannot forge a section. A command line of plain words is executed directly by
``timeout``; anything else goes through ``sh -c``.

A command declares the node tools it depends on (``Command.tools``); when one times out, later
commands of the same tool are not started on that node (a NOTRUN section instead), so a hung
``nvidia-smi`` costs one timeout per host, not one per command. A command that writes through a
re-opened ``/dev/stdout`` with ``>`` truncates its own earlier output, as on any file.
"""

from __future__ import annotations

import functools
import re
import secrets
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from healthcheck.core.model import CommandResult
from healthcheck.transport import nodeframer
from healthcheck.transport.nodeframer import TIMEOUT_RCS  # GNU timeout's 124 (SIGTERM) and 137 (-k SIGKILL)

_TRAPS = "trap 'exit 129' HUP; trap 'exit 130' INT; trap 'exit 141' PIPE; trap 'exit 143' TERM"
_TEMPDIR = r"""d=$(mktemp -d 2>/dev/null) || { d=/tmp/healthcheck.$$; mkdir -m 700 "$d" 2>/dev/null; } || {
  echo "healthcheck: cannot create a temporary directory on the node" >&2; exit 1; }
trap 'rm -rf "$d"' EXIT"""

# The node's system interpreters tried, in order, for the Python framer (nodeframer.py). Absolute paths,
# never a PATH search: a login's PATH may lead to a pyenv or conda shim that costs more than it saves.
NODE_PYTHONS = ("/usr/bin/python3", "/usr/libexec/platform-python")
_PY_BOOT = ('import sys;sys.version_info>=(3,8) or sys.exit(98);'
            'exec(compile(sys.stdin.buffer.read(),"healthcheck-framer","exec"))')
# Exit codes 1, 2, 126 and 127 (the interpreter could not start or run the boot line) and 98 (nodeframer
# started nothing): the next interpreter, then the sh framer below, runs every command. Any other code is
# the Python framer's own (0, 97, 129, 130, 141, 143) or its death by a signal: its sections stand.
_PY_TRY = """for hc_py in {pythons}; do
  [ -x "$hc_py" ] || continue
  "$hc_py" -I -S -c {boot} <<'{eof}'
{program}
{eof}
  hc_rc=$?; case $hc_rc in 1|2|98|126|127) ;; *) exit "$hc_rc";; esac
done"""

_PRELUDE = r"""hc_to=$(command -v timeout 2>/dev/null) || hc_to=
hc_head=$(command -v head 2>/dev/null) || hc_head=head
if [ -r "/proc/$$/fdinfo/0" ]; then hc_fdinfo=/proc/$$/fdinfo; else hc_fdinfo=; fi
hc_hung='|'
hc_size() {
  hc_n=0; [ -s "$1" ] || return 0
  if [ -n "$hc_fdinfo" ] && { command exec 6>>"$1"; } 2>/dev/null; then
    if printf x >&6 2>/dev/null && read -r hc_k hc_n <"$hc_fdinfo/6"; then exec 6>&-; hc_n=$((hc_n - 1)); return 0; fi
    exec 6>&-
  fi
  hc_n=$(LC_ALL=C wc -c <"$1") || hc_n=0; hc_n=$((hc_n))
}
hc_run() {
  hc_id=$1 hc_t=$2 hc_tools=$3; shift 3
  for hc_tool in $hc_tools; do
    case $hc_hung in *"|$hc_tool="*)
      hc_r=${hc_hung#*"|$hc_tool="}; hc_r=${hc_r%%"|"*}
      printf '\n%s NOTRUN %s tool=%s hung_s=%s in=%s\n' "$M" "$hc_id" "$hc_tool" "${hc_r%%@*}" "${hc_r#*@}"
      return 0;;
    esac
  done
  if [ -n "$hc_to" ]; then set -- "$hc_to" -k "$KILL" "$hc_t" "$@"; fi
  hc_o=$d/$hc_id.o hc_e=$d/$hc_id.e
  if ! { command exec 4>>"$hc_o" 5>>"$hc_e"; } 2>/dev/null; then
    hc_r="healthcheck: cannot write the output files in the node's temporary directory (disk full?)"
    printf '\n%s BEGIN %s rc=255 out=0 err=%s outsize=0 errsize=%s\n%s\n%s END %s\n' "$M" "$hc_id" "${#hc_r}" \
      "${#hc_r}" "$hc_r" "$M" "$hc_id"
    return 0
  fi
  (trap '' XFSZ; ulimit -f "$BLK" 2>/dev/null; exec "$@") </dev/null >&4 2>&5 4>&- 5>&-
  hc_rc=$?
  case $hc_rc in 124|137) for hc_tool in $hc_tools; do hc_hung="$hc_hung$hc_tool=$hc_t@$hc_id|"; done;; esac
  hc_size "$hc_o"; hc_os=$hc_n; hc_size "$hc_e"; hc_es=$hc_n
  exec 4>&- 5>&-
  hc_on=$hc_os; [ "$hc_on" -gt "$CAP" ] && hc_on=$CAP
  hc_en=$hc_es; [ "$hc_en" -gt "$CAP" ] && hc_en=$CAP
  printf '\n%s BEGIN %s rc=%s out=%s err=%s outsize=%s errsize=%s\n' "$M" "$hc_id" "$hc_rc" "$hc_on" "$hc_en" \
    "$hc_os" "$hc_es"
  [ "$hc_on" -eq 0 ] || LC_ALL=C "$hc_head" -c "$hc_on" "$hc_o"
  [ "$hc_en" -eq 0 ] || LC_ALL=C "$hc_head" -c "$hc_en" "$hc_e"
  printf '\n%s END %s\n' "$M" "$hc_id"
  : >"$hc_o"; : >"$hc_e"
}
"""


@dataclass(frozen=True)
class Command:
    """One command to run on a node: stable id, shell line, timeout, and the node tools it depends
    on (``("nvidia-smi",)``): after one of them hung, the command is not started on that node."""

    id: str
    line: str
    timeout_s: float
    tools: tuple[str, ...] = ()


def new_marker() -> str:
    return "@@HC-" + secrets.token_hex(8)


_ID_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_TOOL_OK = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
_PLAIN_WORD = re.compile(r"^[A-Za-z0-9_./:,+@%=-]+$")
# words that sh would not look up on PATH: such a line keeps its sh -c
_SH_WORDS = frozenset({".", ":", "[", "[[", "alias", "bg", "break", "cd", "chdir", "command", "continue", "echo",
                       "eval", "exec", "exit", "export", "false", "fc", "fg", "getopts", "hash", "jobs", "kill",
                       "local", "printf", "pwd", "read", "readonly", "return", "set", "shift", "source", "test",
                       "times", "trap", "true", "type", "ulimit", "umask", "unalias", "unset", "wait", "!", "{",
                       "}", "case", "do", "done", "elif", "else", "esac", "fi", "for", "if", "in", "then", "until",
                       "while"})


def direct_argv(line: str) -> list[str] | None:
    """The argv of a line of plain words (``nvidia-smi -q -x``) that ``timeout`` can exec without a
    shell, or None when the line needs ``sh -c`` (quotes, expansions, redirections, builtins)."""
    words = line.split(" ")
    if not all(w and _PLAIN_WORD.match(w) for w in words) or "=" in words[0] or words[0] in _SH_WORDS:
        return None
    return words


def build_script(commands: Sequence[Command], marker: str, cap: int, kill_after_s: float = 5.0,
                 pythons: Sequence[str] = NODE_PYTHONS) -> str:
    """The POSIX sh script that runs ``commands`` in order and frames their outputs.

    With ``pythons`` (absolute paths), the first of them that is on the node and 3.8 or later runs
    the commands (nodeframer.py); the sh framer runs them where none can. ``pythons=()``: sh only."""
    blocks = (int(cap) + 1 + 511) // 512  # ulimit -f counts 512-byte blocks: room for cap + 1 bytes
    kill = f"{kill_after_s:g}"
    planned: list[tuple[str, str, tuple[str, ...], list[str]]] = []
    for cmd in commands:
        if not _ID_OK.match(cmd.id):
            raise ValueError(f"command id {cmd.id!r} is not a stable kebab-case id")
        bad = [t for t in cmd.tools if not _TOOL_OK.match(t)]
        if bad:
            raise ValueError(f"command {cmd.id}: tool name {bad[0]!r} is not a plain lowercase name")
        planned.append((cmd.id, f"{cmd.timeout_s:g}", cmd.tools, direct_argv(cmd.line) or ["sh", "-c", cmd.line]))
    lines = [f"M={shlex.quote(marker)}; CAP={int(cap)}; BLK={blocks}; KILL={kill}", _TRAPS]
    if pythons:
        lines.append(_python_try(pythons, {"marker": marker, "cap": int(cap), "blk": blocks, "kill": kill,
                                           "commands": planned}))
    lines += [_TEMPDIR, _PRELUDE]
    for cid, timeout, tools, argv in planned:
        lines.append(f"hc_run {shlex.quote(cid)} {timeout} {shlex.quote(' '.join(tools))} "
                     + " ".join(shlex.quote(w) for w in argv))
    return "\n".join(lines) + "\n"


@functools.cache
def _framer_source() -> str:
    return Path(nodeframer.__file__).read_text(encoding="ascii")


def _python_try(pythons: Sequence[str], config: dict[str, object]) -> str:
    """The sh lines that hand the commands to the node's Python framer (a quoted here-document:
    ``ascii()`` of the plan, so no line of it can end the document or reach the shell)."""
    bad = [p for p in pythons if not p.startswith("/") or not _PLAIN_WORD.match(p)]
    if bad:
        raise ValueError(f"node interpreter {bad[0]!r} is not an absolute path of plain characters")
    eof = "HC_FRAMER_" + secrets.token_hex(8)
    program = f"{_framer_source()}\nmain({config!a})"
    return _PY_TRY.format(pythons=" ".join(pythons), boot=shlex.quote(_PY_BOOT), eof=eof, program=program)


_HEADER = re.compile(
    rb"BEGIN (?P<id>\S+) rc=(?P<rc>-?\d{1,10}) out=(?P<out>\d{1,20}) err=(?P<err>\d{1,20})"
    rb" outsize=(?P<outsize>\d{1,20}) errsize=(?P<errsize>\d{1,20})\n")  # bounded: int() never sees a digit run
_NOTRUN = re.compile(rb"NOTRUN (?P<id>\S+) tool=(?P<tool>\S+) hung_s=(?P<hung>[0-9.]+) in=(?P<cause>\S+)\n")
_HEADER_MAX = 512  # a header line longer than this is garbage, not a header still arriving


def not_run_reason(tool: str, hung_s: str, cause: str) -> str:
    return f"not run: {tool} hung for {hung_s} s in {cause}"


@dataclass
class FrameReader:
    """Incremental reader of the framed stream: ``feed`` bytes, get finished sections back.

    With ``planned`` (the command ids of the script), a section or NOTRUN line for an id that is not
    planned, or a second one for an id, raises ``FrameError`` naming the id: a command that reaches the
    session's output (``/proc/<framer>/fd/1``) and learns the marker could otherwise forge another
    command's output. Which of two sections for an id is the real one cannot be told, so neither is kept
    (``FrameError.command_id``)."""

    host: str
    marker: str
    buffer: bytearray = field(default_factory=bytearray)
    last_event_s: float = 0.0
    planned: frozenset[str] | None = None
    seen: set[str] = field(default_factory=set)

    def _claim(self, command_id: str) -> None:
        if self.planned is not None and command_id not in self.planned:
            raise FrameError(f"{self.host}: a section for {command_id[:80]!r}, which the script did not plan: "
                             "refused (something on the node wrote into the session)")
        if command_id in self.seen:
            raise FrameError(f"{self.host}: a second section for {command_id}: both refused (something on the "
                             "node wrote into the session; which one is real cannot be told)", command_id)
        self.seen.add(command_id)

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
        at = pos + len(start_tag)
        header = _HEADER.match(self.buffer, at)
        if header is None:
            return self._not_run(at, now_s)
        out_n, err_n = int(header["out"]), int(header["err"])
        body = header.end()
        end_tag = f"\n{self.marker} END ".encode() + header["id"] + b"\n"
        total = body + out_n + err_n + len(end_tag)
        if len(self.buffer) < total:
            return None
        if bytes(self.buffer[body + out_n + err_n:total]) != end_tag:
            raise FrameError(f"{self.host}: section {header['id'].decode()} is malformed")
        self._claim(header["id"].decode(errors="replace"))
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

    def _not_run(self, at: int, now_s: float) -> CommandResult | None:
        """A NOTRUN line at ``at``; None while it may still be arriving; FrameError for garbage."""
        line = _NOTRUN.match(self.buffer, at)
        if line is None:
            newline = self.buffer.find(b"\n", at, at + _HEADER_MAX)
            if newline >= 0 or len(self.buffer) - at >= _HEADER_MAX:
                raise FrameError(f"{self.host}: garbage after the section marker: "
                                 f"{bytes(self.buffer[at:at + 80])!r}")
            return None  # header not complete yet
        self._claim(line["id"].decode(errors="replace"))
        result = CommandResult(host=self.host, command_id=line["id"].decode(),
                               not_run=not_run_reason(line["tool"].decode(), line["hung"].decode(),
                                                      line["cause"].decode()))
        del self.buffer[:line.end()]
        self.last_event_s = now_s
        return result


class FrameError(ValueError):
    """The framed stream from a host is corrupt; ``command_id``: a command whose output can no longer be
    believed (it had two sections)."""

    def __init__(self, message: str, command_id: str | None = None) -> None:
        super().__init__(message)
        self.command_id = command_id
