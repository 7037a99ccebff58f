"""The framed remote script, run for real with sh (and the node's Python framer), and its reader.

Every behaviour test runs twice: with the Python framer (nodeframer.py, on this machine's
/usr/bin/python3) and with the sh framer alone (``pythons=()``), the one nodes without a Python 3.8
get. ``test_the_python_framer_ran`` checks that the first really ran in Python."""

from __future__ import annotations

import ast
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from healthcheck.transport import nodeframer
from healthcheck.transport.script import (
    NODE_PYTHONS,
    Command,
    FrameError,
    FrameReader,
    build_script,
    direct_argv,
    new_marker,
)

HAVE_PYTHON = any(os.access(p, os.X_OK) for p in NODE_PYTHONS) and sys.platform == "linux"
FRAMERS = {"python": NODE_PYTHONS, "sh": ()}


@pytest.fixture(params=["python", "sh"])
def framer(request):
    if request.param == "python" and not HAVE_PYTHON:
        pytest.skip(f"none of {NODE_PYTHONS} here")
    return request.param


def _run(commands, cap=1000, framer="sh", pythons=None):
    marker = new_marker()
    pythons = FRAMERS[framer] if pythons is None else pythons
    proc = subprocess.run(["sh", "-c", build_script(commands, marker, cap, kill_after_s=1, pythons=pythons)],
                          capture_output=True, timeout=60)
    reader = FrameReader("h", marker)
    return {r.command_id: r for r in reader.feed(proc.stdout, 1.0)}


def test_stdout_stderr_rc_kept_apart(framer):
    out = _run([Command("a", "echo out; echo err >&2; exit 3", 5)], framer=framer)["a"]
    assert (out.stdout, out.stderr, out.rc, out.timed_out) == (b"out\n", b"err\n", 3, False)


def test_cap_truncates_on_the_node_and_flags_it(framer):
    out = _run([Command("big", "head -c 5000 /dev/zero; head -c 3000 /dev/zero >&2", 5)], cap=1024,
               framer=framer)["big"]
    assert len(out.stdout) == 1024 and out.stdout_truncated
    assert len(out.stderr) == 1024 and out.stderr_truncated


def test_timeout_is_reported_and_next_command_still_runs(framer):
    results = _run([Command("slow", "sleep 20", 1), Command("next", "echo fine", 5)], framer=framer)
    assert results["slow"].timed_out and results["slow"].rc == 124
    assert results["next"].stdout == b"fine\n"


def test_output_cannot_forge_a_section(framer):
    forged = "printf '\\n@@HC-0000 BEGIN x rc=0 out=1 err=0 outsize=1 errsize=0\\nZ\\n@@HC-0000 END x\\n'"
    results = _run([Command("forge", forged, 5)], framer=framer)
    assert set(results) == {"forge"}
    assert b"BEGIN x" in results["forge"].stdout


def test_quotes_and_binary_output_survive(framer):
    results = _run([Command("q", "printf '%s' \"it's \\$HOME\"; printf '\\377\\000'", 5)], framer=framer)
    assert results["q"].stdout == b"it's $HOME\xff\x00"


def test_reader_waits_for_partial_frames_and_rejects_corrupt_ones():
    marker = "@@HC-abc"
    frame = f"\n{marker} BEGIN a rc=0 out=3 err=0 outsize=3 errsize=0\nabc\n{marker} END a\n".encode()
    reader = FrameReader("h", marker)
    assert list(reader.feed(frame[:20], 0.1)) == []
    assert [r.stdout for r in reader.feed(frame[20:], 0.2)] == [b"abc"]
    bad = FrameReader("h", marker)
    with pytest.raises(FrameError):
        list(bad.feed(frame.replace(b"END a", b"END b"), 0.1))


def test_bad_command_id_is_refused():
    with pytest.raises(ValueError, match="not a stable kebab-case id"):
        build_script([Command("bad id;rm", "true", 1)], "@@HC-x", 10)


def test_cap_exactly_reached_is_not_truncated(framer):
    out = _run([Command("full", "head -c 1024 /dev/zero", 5)], cap=1024, framer=framer)["full"]
    assert len(out.stdout) == 1024 and not out.stdout_truncated and out.rc == 0


def test_hung_tool_skips_its_later_commands_on_the_node(framer):
    results = _run([Command("smi-q", "sleep 30", 1, ("gpu-tool",)),
                    Command("kernel", "echo xid 79", 5, ("journal",)),
                    Command("smi-topo", "echo never", 5, ("gpu-tool",)),
                    Command("sampler", "echo never", 5, ("other", "gpu-tool")),
                    Command("plain", "echo still", 5)], framer=framer)
    assert results["smi-q"].timed_out and results["smi-q"].rc == 124
    assert results["smi-topo"].not_run == "not run: gpu-tool hung for 1 s in smi-q"
    assert results["sampler"].not_run == "not run: gpu-tool hung for 1 s in smi-q"
    assert (results["smi-topo"].rc, results["smi-topo"].stdout, results["smi-topo"].ok) == (None, b"", False)
    assert results["kernel"].stdout == b"xid 79\n" and results["plain"].stdout == b"still\n"


def test_a_command_that_ignores_sigterm_is_killed_and_counts_as_hung(framer):
    results = _run([Command("stubborn", "trap '' TERM; sleep 30", 1, ("gpu-tool",)),
                    Command("again", "echo never", 5, ("gpu-tool",))], framer=framer)
    assert results["stubborn"].rc == 137 and results["stubborn"].timed_out
    assert results["again"].not_run == "not run: gpu-tool hung for 1 s in stubborn"


def test_an_escaped_descendant_cannot_hold_the_section_open(tmp_path, framer):
    """``setsid sleep &`` keeps no pipe of ours: the script ends at once (bounded by _run's timeout)."""
    pidfile = tmp_path / "escaped.pid"
    try:
        results = _run([Command("escape", f"setsid sleep 300 & echo $! >{pidfile}; echo printed", 5),
                        Command("after", "echo after", 5)], framer=framer)
        assert results["escape"].stdout == b"printed\n" and results["after"].stdout == b"after\n"
    finally:
        if pidfile.is_file():
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


def test_a_writer_still_appending_cannot_break_the_frame(framer):
    writer = "(i=0; while [ $i -lt 3000 ]; do echo junk; i=$((i+1)); done) & echo first"
    results = _run([Command("w", writer, 5), Command("x", "echo next", 5)], cap=1 << 20, framer=framer)
    lines = results["w"].stdout.split(b"\n")
    assert b"first" in lines and set(lines[:-1]) <= {b"first", b"junk"} and b"junk".startswith(lines[-1])
    assert results["x"].stdout == b"next\n"


def test_missing_tool_is_rc_127_with_and_without_a_shell(framer):
    results = _run([Command("direct", "no-such-tool-hc -q -x", 5), Command("shell", "no-such-tool-hc | cat", 5)],
                   framer=framer)
    assert results["direct"].rc == 127 and results["shell"].rc == 0
    assert b"no-such-tool-hc" in results["direct"].stderr


def test_plain_word_lines_run_without_a_shell_others_keep_it():
    assert direct_argv("nvidia-smi -q -x") == ["nvidia-smi", "-q", "-x"]
    assert direct_argv("nvidia-smi --query-gpu=index,name --format=csv") is not None
    for line in ("echo hi", "A=1 env", "ls /tmp/*", "a; b", "a  b", "cat $HOME", "x >f", "kill -9 1", ""):
        assert direct_argv(line) is None, line


def test_reader_takes_notrun_lines_and_rejects_garbage_headers():
    marker = "@@HC-abc"
    reader = FrameReader("h", marker)
    line = f"\n{marker} NOTRUN topo tool=nvidia-smi hung_s=20 in=nvidia-smi-q-x\n".encode()
    assert list(reader.feed(line[:30], 0.1)) == []
    [skipped] = reader.feed(line[30:], 0.2)
    assert (skipped.command_id, skipped.not_run, skipped.rc) == (
        "topo", "not run: nvidia-smi hung for 20 s in nvidia-smi-q-x", None)
    with pytest.raises(FrameError, match="garbage after the section marker"):
        list(FrameReader("h", marker).feed(f"\n{marker} BEGIN a rc=zero\n".encode(), 0.1))


def test_bad_tool_name_is_refused():
    with pytest.raises(ValueError, match="tool name"):
        build_script([Command("a", "true", 1, ("nv;rm",))], "@@HC-x", 10)


@pytest.mark.parametrize("shell", ["dash", "bash"])
@pytest.mark.parametrize("fdinfo", [True, False])
@pytest.mark.parametrize("use_python", [False, True])
def test_same_sections_from_dash_and_bash_with_and_without_proc_fdinfo(shell, fdinfo, use_python):
    """/bin/sh is dash on Debian/Ubuntu and bash on RHEL; without /proc the sizes come from wc -c; the
    Python framer, started by either shell, prints the same sections."""
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} not installed")
    if use_python and (not HAVE_PYTHON or not fdinfo):
        pytest.skip("the Python framer reads no /proc" if use_python and HAVE_PYTHON else "no Python framer here")
    commands = [Command("big", "head -c 5000 /dev/zero; printf 'e' >&2", 5), Command("none", "true", 5),
                Command("hang", "sleep 30", 1, ("gpu-tool",)), Command("skip", "echo x", 5, ("gpu-tool",)),
                Command("rc", "printf 'a\\000b'; exit 7", 5)]
    marker = new_marker()
    script = build_script(commands, marker, 1024, kill_after_s=1, pythons=NODE_PYTHONS if use_python else ())
    if not fdinfo:  # what a node without /proc does
        script = script.replace("hc_fdinfo=/proc/$$/fdinfo;", "hc_fdinfo=;")
    proc = subprocess.run([shell, "-c", script], capture_output=True, timeout=60)
    results = {r.command_id: r for r in FrameReader("h", marker).feed(proc.stdout, 1.0)}
    big = results["big"]
    assert (len(big.stdout), big.stdout_truncated, big.stderr_truncated) == (1024, True, False)
    assert b"File too large" in big.stderr and big.stderr.endswith(b"e")  # past the cap the tool sees EFBIG
    assert (results["none"].stdout, results["none"].rc) == (b"", 0)
    assert results["hang"].rc == 124 and results["skip"].not_run == "not run: gpu-tool hung for 1 s in hang"
    assert (results["rc"].stdout, results["rc"].rc) == (b"a\x00b", 7)


# The Python framer (nodeframer.py): that it runs, when the sh framer takes over, and what only it does.

needs_python = pytest.mark.skipif(not HAVE_PYTHON, reason=f"none of {NODE_PYTHONS} here")
PARENT = Command("parent", "cat /proc/$PPID/comm", 5)  # sh -c's parent: the framer's process or timeout


@needs_python
def test_the_python_framer_ran():
    assert _run([PARENT], framer="python")["parent"].stdout.startswith(b"python3")
    assert _run([PARENT], framer="sh")["parent"].stdout == b"timeout\n"


def _fake_python(tmp_path: Path, name: str, body: str) -> str:
    """An executable standing in for a node's interpreter (exits as a real one would)."""
    path = tmp_path / name
    path.write_text("#!/bin/sh\ncat >/dev/null\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize(("body", "why"), [
    ("exit 98", "too old (sys.version_info < 3.8) or no posix_spawnp/memfd_create"),
    ("echo 'Fatal Python error: init_fs_encoding' >&2; exit 1", "a broken interpreter"),
    ("exit 2", "an interpreter without -I"),
])
def test_the_sh_framer_runs_every_command_where_no_python_framer_started(tmp_path, body, why):
    fake = _fake_python(tmp_path, "python3", body)
    results = _run([PARENT, Command("b", "echo b", 5)], pythons=(fake, "/nonexistent/python3"))
    assert results["parent"].stdout == b"timeout\n", why
    assert results["b"].stdout == b"b\n"


@needs_python
def test_a_missing_or_refusing_interpreter_passes_to_the_next(tmp_path):
    old = _fake_python(tmp_path, "python3.7", "exit 98")
    results = _run([PARENT], pythons=("/nonexistent/python3", old, *NODE_PYTHONS))
    assert results["parent"].stdout.startswith(b"python3")


def test_a_python_framer_that_started_is_not_followed_by_the_sh_framer(tmp_path):
    """Exit 97 (failed after starting) or a death by signal: its sections stand, nothing runs twice."""
    marker = new_marker()
    printed = f"printf '\\n{marker} BEGIN a rc=0 out=2 err=0 outsize=2 errsize=0\\nA\\n\\n{marker} END a\\n'"
    for body, rc in ((printed + "; exit 97", 97), (printed + "; kill -9 $$", 137)):
        fake = _fake_python(tmp_path, "python3", body)
        proc = subprocess.run(["sh", "-c", build_script([Command("a", "echo A", 5), Command("b", "echo B", 5)], marker,
                                                        100, pythons=(fake,))], capture_output=True, timeout=30)
        assert proc.returncode == rc
        assert [(r.command_id, r.stdout) for r in FrameReader("h", marker).feed(proc.stdout, 1.0)] == [("a", b"A\n")]


def _pid_written(pidfile: Path) -> int:
    """The pid a command wrote to ``pidfile`` (waits at most 10 s for it)."""
    for _ in range(200):
        if pidfile.is_file() and pidfile.read_text().strip():
            break
        time.sleep(0.05)
    return int(pidfile.read_text())


def _ends(pid: int) -> bool:
    """Whether ``pid`` is gone (or a zombie) within 5 s."""
    for _ in range(100):
        stat = Path(f"/proc/{pid}/stat")
        if not stat.exists() or ") Z " in stat.read_text():
            return True
        time.sleep(0.05)
    return False


def _skip_without(framer_name: str) -> None:
    if framer_name == "python" and not HAVE_PYTHON:
        pytest.skip("no Python framer here")


@contextlib.contextmanager
def _started(script: str, **popen):
    """The script running under ``sh -c`` in its own session; its whole group killed afterwards."""
    proc = subprocess.Popen(["sh", "-c", script], start_new_session=True, **popen)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@pytest.mark.parametrize("framer_name", ["python", "sh"])
def test_sigterm_ends_the_script_with_143(tmp_path, framer_name):
    """The Python framer also stops the command it was waiting for (SIGTERM to its group)."""
    _skip_without(framer_name)
    pidfile = tmp_path / "cmd.pid"
    script = build_script([Command("long", f"echo $$ >{pidfile}; exec sleep 60", 120)], new_marker(), 100,
                          pythons=FRAMERS[framer_name])
    with _started(script, stdout=subprocess.DEVNULL) as proc:
        command_pid = _pid_written(pidfile)
        framer_pid = int(Path(f"/proc/{command_pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        os.kill(framer_pid if framer_name == "python" else proc.pid, signal.SIGTERM)
        if framer_name == "sh":
            os.kill(command_pid, signal.SIGTERM)  # sh runs its trap once the foreground command is gone
        assert proc.wait(timeout=30) == 143
        assert _ends(command_pid), "the running command outlived the framer's SIGTERM"


@pytest.mark.parametrize("framer_name", ["python", "sh"])
def test_a_closed_session_ends_the_script_with_141(framer_name, tmp_path):
    """The sh framer notices when it next prints; the Python framer while the command runs, and stops it."""
    _skip_without(framer_name)
    pidfile = tmp_path / "cmd.pid"
    long = "sleep 300" if framer_name == "python" else "sleep 0.5"  # the sh framer waits for it to end
    script = build_script([Command("a", f"echo $$ >{pidfile}; exec {long}", 600), Command("b", "echo b", 5)],
                          new_marker(), 100, pythons=FRAMERS[framer_name])
    with _started(script, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as proc:
        command_pid = _pid_written(pidfile)
        proc.stdout.close()  # the session went away before the first section was printed
        assert proc.wait(timeout=30) == 141
        assert _ends(command_pid), "the command outlived the closed session"


@needs_python
def test_the_plan_cannot_leave_the_here_document():
    """Lines that look like the document's end, quotes, newlines and non-ASCII reach the node verbatim."""
    tricky = "printf '%s\\n' 'HC_FRAMER_0000' \"it's\" '$(id)' 'naïve'; printf 'two\\nlines\\n'"
    by_python = _run([Command("t", tricky, 5)], framer="python")["t"]
    by_sh = _run([Command("t", tricky, 5)], framer="sh")["t"]
    assert by_python.stdout == by_sh.stdout == "HC_FRAMER_0000\nit's\n$(id)\nnaïve\ntwo\nlines\n".encode()


def test_node_interpreters_must_be_absolute_plain_paths():
    for bad in ("python3", "/usr/bin/python3; rm -rf /", "/opt/my python/bin/python3"):
        with pytest.raises(ValueError, match="absolute path"):
            build_script([Command("a", "true", 1)], "@@HC-x", 10, pythons=(bad,))


def test_the_node_framer_is_python_38_syntax_and_ascii():
    source = Path(nodeframer.__file__).read_bytes()
    source.decode("ascii")
    tree = ast.parse(source, feature_version=(3, 8))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)
                for alias in node.names} | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported == {"errno", "posix", "select", "sys", "time", "_signal", "resource"}
    annotations = [node for node in ast.walk(tree) if isinstance(node, ast.arg | ast.FunctionDef) and
                   (node.annotation if isinstance(node, ast.arg) else node.returns) is not None]
    assert annotations and all(isinstance(n.annotation if isinstance(n, ast.arg) else n.returns, ast.Constant)
                               for n in annotations)  # strings: never evaluated on the node's older Python


def test_reader_refuses_a_second_section_for_an_id_and_ids_not_planned():
    marker = "@@HC-abc"

    def section(cid: str, body: bytes) -> bytes:
        return (f"\n{marker} BEGIN {cid} rc=0 out={len(body)} err=0 outsize={len(body)} errsize=0\n".encode()
                + body + f"\n{marker} END {cid}\n".encode())

    twice = FrameReader("h", marker, planned=frozenset({"a", "b"}))
    assert [r.stdout for r in twice.feed(section("a", b"one"), 0.1)] == [b"one"]
    with pytest.raises(FrameError, match="a second section for a: both refused") as caught:
        list(twice.feed(section("a", b"two"), 0.2))
    assert caught.value.command_id == "a"
    stranger = FrameReader("h", marker, planned=frozenset({"a"}))
    with pytest.raises(FrameError, match="a section for 'uname-r', which the script did not plan"):
        list(stranger.feed(section("uname-r", b"6.6.6"), 0.1))
    with pytest.raises(FrameError, match="which the script did not plan"):
        list(FrameReader("h", marker, planned=frozenset({"a"})).feed(
            f"\n{marker} NOTRUN x tool=nvidia-smi hung_s=5 in=a\n".encode(), 0.1))
    with pytest.raises(FrameError, match="garbage after the section marker"):  # a digit run is no length
        list(FrameReader("h", marker).feed(f"\n{marker} BEGIN a rc=0 out={'9' * 5000} err=0\n".encode(), 0.1))


def test_a_command_writing_into_the_session_cannot_forge_another_commands_output(framer):
    """Issue 29.13 (D14): a command that finds the framer's own output (/proc/<framer>/fd/1) and knows the
    marker writes a section for a later command; the real section then comes second. Both framers' streams
    are read by ``read_framed``: the forged command is an error for that command and the host, never the
    forged text."""
    from healthcheck.transport.stream import read_framed

    marker = new_marker()
    forge = ("me=$(readlink /proc/$$/fd/1); p=$PPID; "
             'while [ "$p" -gt 1 ] && [ "$(readlink /proc/$p/fd/1)" = "$me" ]; do p=$(cut -d" " -f4 /proc/$p/stat); '
             "done; printf '\\n%s BEGIN later rc=0 out=7 err=0 outsize=7 errsize=0\\nforged\\n\\n%s END later\\n' "
             f"{marker} {marker} > /proc/$p/fd/1")
    commands = [Command("forge", forge, 5), Command("later", "echo real", 5)]
    proc = subprocess.run(["sh", "-c", build_script(commands, marker, 1000, kill_after_s=1, pythons=FRAMERS[framer])],
                          capture_output=True, timeout=60)
    assert proc.stdout.count(f"{marker} BEGIN later".encode()) == 2   # the forgery reached the session
    chunks = iter([proc.stdout, b""])
    collection = read_framed("h", commands, marker, lambda wait_s: next(chunks), deadline_s=60, byte_limit=1 << 20)
    assert collection.results["forge"].rc == 0
    later = collection.results["later"]
    assert later.stdout == b"" and later.transport_error.startswith("h: a second section for later: both refused")
    assert collection.transport_error == later.transport_error
