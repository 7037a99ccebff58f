"""The framed remote script, run for real with sh, and its reader."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess

import pytest

from healthcheck.transport.script import Command, FrameError, FrameReader, build_script, direct_argv, new_marker


def _run(commands, cap=1000):
    marker = new_marker()
    proc = subprocess.run(["sh", "-c", build_script(commands, marker, cap, kill_after_s=1)],
                          capture_output=True, timeout=60)
    reader = FrameReader("h", marker)
    return {r.command_id: r for r in reader.feed(proc.stdout, 1.0)}


def test_stdout_stderr_rc_kept_apart():
    out = _run([Command("a", "echo out; echo err >&2; exit 3", 5)])["a"]
    assert (out.stdout, out.stderr, out.rc, out.timed_out) == (b"out\n", b"err\n", 3, False)


def test_cap_truncates_on_the_node_and_flags_it():
    out = _run([Command("big", "head -c 5000 /dev/zero; head -c 3000 /dev/zero >&2", 5)], cap=1024)["big"]
    assert len(out.stdout) == 1024 and out.stdout_truncated
    assert len(out.stderr) == 1024 and out.stderr_truncated


def test_timeout_is_reported_and_next_command_still_runs():
    results = _run([Command("slow", "sleep 20", 1), Command("next", "echo fine", 5)])
    assert results["slow"].timed_out and results["slow"].rc == 124
    assert results["next"].stdout == b"fine\n"


def test_output_cannot_forge_a_section():
    forged = "printf '\\n@@HC-0000 BEGIN x rc=0 out=1 err=0 outsize=1 errsize=0\\nZ\\n@@HC-0000 END x\\n'"
    results = _run([Command("forge", forged, 5)])
    assert set(results) == {"forge"}
    assert b"BEGIN x" in results["forge"].stdout


def test_quotes_and_binary_output_survive():
    results = _run([Command("q", "printf '%s' \"it's \\$HOME\"; printf '\\377\\000'", 5)])
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


def test_cap_exactly_reached_is_not_truncated():
    out = _run([Command("full", "head -c 1024 /dev/zero", 5)], cap=1024)["full"]
    assert len(out.stdout) == 1024 and not out.stdout_truncated and out.rc == 0


def test_hung_tool_skips_its_later_commands_on_the_node():
    results = _run([Command("smi-q", "sleep 30", 1, ("gpu-tool",)),
                    Command("kernel", "echo xid 79", 5, ("journal",)),
                    Command("smi-topo", "echo never", 5, ("gpu-tool",)),
                    Command("sampler", "echo never", 5, ("other", "gpu-tool")),
                    Command("plain", "echo still", 5)])
    assert results["smi-q"].timed_out and results["smi-q"].rc == 124
    assert results["smi-topo"].not_run == "not run: gpu-tool hung for 1 s in smi-q"
    assert results["sampler"].not_run == "not run: gpu-tool hung for 1 s in smi-q"
    assert (results["smi-topo"].rc, results["smi-topo"].stdout, results["smi-topo"].ok) == (None, b"", False)
    assert results["kernel"].stdout == b"xid 79\n" and results["plain"].stdout == b"still\n"


def test_a_command_that_ignores_sigterm_is_killed_and_counts_as_hung():
    results = _run([Command("stubborn", "trap '' TERM; sleep 30", 1, ("gpu-tool",)),
                    Command("again", "echo never", 5, ("gpu-tool",))])
    assert results["stubborn"].rc == 137 and results["stubborn"].timed_out
    assert results["again"].not_run == "not run: gpu-tool hung for 1 s in stubborn"


def test_an_escaped_descendant_cannot_hold_the_section_open(tmp_path):
    """``setsid sleep &`` keeps no pipe of ours: the script ends at once (bounded by _run's timeout)."""
    pidfile = tmp_path / "escaped.pid"
    try:
        results = _run([Command("escape", f"setsid sleep 300 & echo $! >{pidfile}; echo printed", 5),
                        Command("after", "echo after", 5)])
        assert results["escape"].stdout == b"printed\n" and results["after"].stdout == b"after\n"
    finally:
        if pidfile.is_file():
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


def test_a_writer_still_appending_cannot_break_the_frame():
    writer = "(i=0; while [ $i -lt 3000 ]; do echo junk; i=$((i+1)); done) & echo first"
    results = _run([Command("w", writer, 5), Command("x", "echo next", 5)], cap=1 << 20)
    lines = results["w"].stdout.split(b"\n")
    assert b"first" in lines and set(lines[:-1]) <= {b"first", b"junk"} and b"junk".startswith(lines[-1])
    assert results["x"].stdout == b"next\n"


def test_missing_tool_is_rc_127_with_and_without_a_shell():
    results = _run([Command("direct", "no-such-tool-hc -q -x", 5), Command("shell", "no-such-tool-hc | cat", 5)])
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
def test_same_sections_from_dash_and_bash_with_and_without_proc_fdinfo(shell, fdinfo):
    """/bin/sh is dash on Debian/Ubuntu and bash on RHEL; without /proc the sizes come from wc -c."""
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} not installed")
    commands = [Command("big", "head -c 5000 /dev/zero; printf 'e' >&2", 5), Command("none", "true", 5),
                Command("hang", "sleep 30", 1, ("gpu-tool",)), Command("skip", "echo x", 5, ("gpu-tool",)),
                Command("rc", "printf 'a\\000b'; exit 7", 5)]
    marker = new_marker()
    script = build_script(commands, marker, 1024, kill_after_s=1)
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
