"""The framed remote script, run for real with sh, and its reader."""

from __future__ import annotations

import subprocess

import pytest

from healthcheck.transport.script import Command, FrameError, FrameReader, build_script, new_marker


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
