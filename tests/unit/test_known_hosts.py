"""known_hosts parsed once and indexed: plain, [host]:port, hashed (real ssh-keygen -H), patterns, markers."""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path

import pytest

from healthcheck.transport.knownhosts import KnownHostsIndex, fingerprint_sha256, known_hosts_name, parse_known_hosts

SSH_KEYGEN = shutil.which("ssh-keygen")


def _key(tmp_path: Path, name: str) -> tuple[str, str]:
    """A real ed25519 public key made by ssh-keygen: (type, base64)."""
    if SSH_KEYGEN is None:
        pytest.skip("ssh-keygen not installed")
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / name)], check=True)
    kind, b64 = (tmp_path / f"{name}.pub").read_text().split()[:2]
    return kind, b64


def test_fingerprint_matches_ssh_keygen(tmp_path):
    _kind, b64 = _key(tmp_path, "k")
    out = subprocess.run([SSH_KEYGEN, "-l", "-E", "sha256", "-f", str(tmp_path / "k.pub")],
                         capture_output=True, text=True, check=True).stdout
    assert fingerprint_sha256(base64.b64decode(b64)) == out.split()[1]


def test_plain_port_pattern_negation_and_markers(tmp_path):
    (k1, b1), (k2, b2), (k3, b3) = (_key(tmp_path, n) for n in ("a", "b", "c"))
    text = "\n".join([
        "# comment", "",
        f"gpu01,10.0.0.1 {k1} {b1}",
        f"[10.0.0.2]:2222 {k2} {b2} comment here",
        f"*.ib,!bad.ib {k3} {b3}",
        f"@revoked gpu01 {k2} {b2}",
        f"@cert-authority *.corp {k3} {b3}",
        "garbage line", f"gpu09 {k1} not-base64!!",
    ])
    parsed = parse_known_hosts(text, "kh")
    assert [(k.key_type, k.marker) for k in parsed.lookup("GPU01")] == [(k1, ""), (k2, "@revoked")]
    assert parsed.lookup("10.0.0.1")[0].source == "kh:3"
    assert parsed.lookup(known_hosts_name("10.0.0.2", 2222))[0].blob == base64.b64decode(b2)
    assert parsed.lookup("10.0.0.2") == []
    assert [k.blob for k in parsed.lookup("node7.ib")] == [base64.b64decode(b3)]
    assert parsed.lookup("bad.ib") == []
    assert [k.marker for k in parsed.lookup("x.corp")] == ["@cert-authority"]
    assert parsed.lookup("gpu09") == []
    assert sorted(parsed.exact) == ["10.0.0.1", "[10.0.0.2]:2222", "gpu01"]  # patterns stay out of the dict


def test_hashed_entries_written_by_ssh_keygen(tmp_path):
    kind, b64 = _key(tmp_path, "h")
    path = tmp_path / "known_hosts"
    path.write_text(f"[127.0.1.9]:2200 {kind} {b64}\ngpu02 {kind} {b64}\n")
    subprocess.run([SSH_KEYGEN, "-q", "-H", "-f", str(path)], check=True, capture_output=True)
    assert "127.0.1.9" not in path.read_text() and path.read_text().startswith("|1|")
    index = KnownHostsIndex()
    assert [k.key_type for k in index.lookup([str(path)], "[127.0.1.9]:2200")] == [kind]
    assert len(index.lookup([str(path)], "gpu02")) == 1
    assert index.lookup([str(path)], "gpu03") == []


def test_index_parses_each_file_once_and_rereads_on_change(tmp_path, monkeypatch):
    kind, b64 = _key(tmp_path, "k")
    path = tmp_path / "known_hosts"
    path.write_text("".join(f"node{i:04d} {kind} {b64}\n" for i in range(4000)))
    calls = []
    import healthcheck.transport.knownhosts as kh
    real = kh.parse_known_hosts
    monkeypatch.setattr(kh, "parse_known_hosts", lambda *a: calls.append(a[1]) or real(*a))
    index = KnownHostsIndex()
    for i in range(0, 4000, 7):
        assert len(index.lookup([str(path), str(tmp_path / "absent")], f"node{i:04d}")) == 1
    assert calls == [str(path)]
    index.add(str(path), "[10.9.9.9]:22", kind, base64.b64decode(b64))
    assert len(index.lookup([str(path)], "[10.9.9.9]:22")) == 1 and calls == [str(path)]
    assert path.read_text().endswith(f"[10.9.9.9]:22 {kind} {b64}\n")
    path.write_text(f"other {kind} {b64}\n")
    assert index.lookup([str(path)], "node0000") == [] and len(calls) == 2


def test_add_creates_the_file_private(tmp_path):
    index = KnownHostsIndex()
    target = tmp_path / "new" / "known_hosts"
    index.add(str(target), "gpu01", "ssh-ed25519", b"\x00\x01")
    assert target.stat().st_mode & 0o777 == 0o600
    assert target.read_text() == "gpu01 ssh-ed25519 AAE=\n"
